"""How far a submitted job has got: rows written, rows/s, ETA, and stalls.

Progress is read from what the job writes, never from Ray's internals:

- **the run directory** (``JobInfo.output``, recorded at submit): rows done are
  the rows in the toolkit's result files so far, counted from their Parquet
  footers (a file still being written has no footer yet and is skipped; a
  complete file's count is remembered), and rows total is the manifest spec's
  ``data.rows`` (for a ``sample:`` input without rows, the provider's default);
- **the job's log**, when the run directory can't be read from here (a relative
  path on a remote cluster, a bucket without credentials): the cluster
  entrypoint prints a :func:`format_progress_line` every
  :data:`LOG_INTERVAL_S` seconds (:func:`report_progress`), and
  :func:`parse_progress_line` reads the newest one back.

``toolkit status`` calls :func:`job_progress` once (rows/s over the time since the
job started); ``--follow`` calls :func:`watch_job`, which samples the progress
every few seconds, computes rows/s over a sliding window, reports it, and warns
(or, with ``fail_on_stall``, raises :class:`~toolkit.errors.JobStalledError`,
exit 7) when no row has been written for ``stall_timeout_s``: Ray Data LLM can
hang on a CUDA out-of-memory error instead of failing (ray#59986).

Nothing here imports Ray; everything that waits takes a :class:`Clock`.
"""

from __future__ import annotations

import math
import re
import threading
import time
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any

from toolkit.cluster.backends.base import Backend, JobInfo, JobStatus
from toolkit.cluster.watching import DEFAULT_TIMEOUT_S, REAL_CLOCK, Clock, follow
from toolkit.errors import JobStalledError
from toolkit.run.progress import WrittenRows, format_duration

if TYPE_CHECKING:
    from toolkit.run.run_directory import RunDirectory
    from toolkit.run.summary import RunSummary

#: ``--stall-timeout`` default: no new row for this long is worth a warning.
DEFAULT_STALL_TIMEOUT_S = 30 * 60.0
#: Seconds between the entrypoint's progress lines in the job's log.
LOG_INTERVAL_S = 30.0
#: While following: read the progress at most this often (listing a bucket costs).
SAMPLE_INTERVAL_S = 5.0
#: While following without a terminal: one progress line this often.
REPORT_INTERVAL_S = 60.0
#: While following: rows/s is measured over this much recent time.
RATE_WINDOW_S = 5 * 60.0

_LINE_PREFIX = "progress:"
_LINE = re.compile(
    r"^progress: rows_done=(\d+) rows_total=(\d+|unknown) rows_per_second=([0-9.]+|unknown)\s*$",
    re.MULTILINE,
)


@dataclass(frozen=True)
class Progress:
    """A job's progress; ``None`` where it is unknown.

    ``source`` says where it was read: ``"output"`` (the run directory),
    ``"log"`` (the job's own progress lines) or ``"summary"`` (a finished run's
    ``_summary.json``).
    """

    rows_done: int | None = None
    rows_total: int | None = None
    rows_per_second: float | None = None
    eta_seconds: float | None = None
    source: str | None = None

    def as_json(self) -> dict[str, Any]:
        return {
            "rows_done": self.rows_done,
            "rows_total": self.rows_total,
            "rows_per_second": self.rows_per_second,
            "eta_seconds": self.eta_seconds,
            "source": self.source,
        }

    def describe(self) -> str:
        """``4,500 / 20,000 rows (22%), 75.2 rows/s, ETA 3m 26s``."""
        if self.rows_done is None:
            return "no rows counted yet"
        parts = [f"{self.rows_done:,} rows"]
        if self.rows_total:
            share = min(100, math.floor(100 * self.rows_done / self.rows_total))
            parts = [f"{self.rows_done:,} / {self.rows_total:,} rows ({share}%)"]
        if self.rows_per_second is not None:
            parts.append(f"{self.rows_per_second:,.1f} rows/s")
        if self.eta_seconds is not None:
            parts.append(f"ETA {format_duration(self.eta_seconds)}")
        return ", ".join(parts)


def eta_seconds(rows_done: int, rows_total: int | None,
                rows_per_second: float | None) -> float | None:
    """Seconds left at ``rows_per_second``; None without a total or a positive rate."""
    if rows_total is None or not rows_per_second or rows_per_second <= 0:
        return None
    return round(max(0, rows_total - rows_done) / rows_per_second, 1)


def rows_total_of(spec: Mapping[str, Any],
                  sample_rows: Mapping[str, int] | None = None) -> int | None:
    """The rows a run was asked for: ``data.rows``; for a ``sample:NAME`` input without
    rows, ``sample_rows[NAME]`` (the provider's default); else None (all of a file)."""
    data = spec.get("data") or {}
    rows = data.get("rows")
    if isinstance(rows, int) and rows > 0:
        return rows
    source = str(data.get("input") or "")
    if source.startswith("sample:"):
        return (sample_rows or {}).get(source[len("sample:"):])
    return None


# --- reading the run directory ------------------------------------------------------


def readable_from_here(output: str | None) -> bool:
    """Whether ``output`` names the same place here as on the cluster: a URI or an
    absolute path. A relative path is relative to the job's working dir there."""
    if not output:
        return False
    return "://" in output or output.startswith("/")


@dataclass(frozen=True)
class RowsWritten:
    """What the run directory says: rows in complete result files, and the rows asked for."""

    rows_done: int
    rows_total: int | None


class OutputRows:
    """Counts the rows a job has written so far, from its run directory.

    Each complete result file is counted once (from its Parquet footer) and
    remembered; a file that can't be read yet (still being written) is skipped
    and tried again next time.
    """

    def __init__(self, output: str, sample_rows: Mapping[str, int] | None = None,
                 run_dir: "RunDirectory | None" = None) -> None:
        self.output = output
        self.sample_rows = dict(sample_rows or {})
        self._run_dir = run_dir
        self._counter: WrittenRows | None = None

    def read(self) -> RowsWritten | None:
        """Rows written so far, or None when there is no readable manifest there."""
        try:
            run_dir = self._open()
            manifest = run_dir.read_manifest()
            if manifest is None:
                return None
            if self._counter is None:
                file_format = (manifest.spec.get("data") or {}).get("output_format", "parquet")
                self._counter = WrittenRows(run_dir, file_format)
            done, _ = self._counter()
        except Exception:  # noqa: BLE001 - unreachable storage just means "can't tell from here"
            return None
        return RowsWritten(done, rows_total_of(manifest.spec, self.sample_rows))

    def _open(self) -> "RunDirectory":
        if self._run_dir is None:
            from toolkit.run.run_directory import RunDirectory

            self._run_dir = RunDirectory(self.output)
        return self._run_dir


# --- the job's own progress lines ---------------------------------------------------


def format_progress_line(rows_done: int, rows_total: int | None,
                         rows_per_second: float | None) -> str:
    """``progress: rows_done=1200 rows_total=5000 rows_per_second=41.3`` (``unknown`` for
    a missing figure): the line the cluster entrypoint prints, stable for parsing."""
    total = str(rows_total) if rows_total is not None else "unknown"
    rate = f"{rows_per_second:.1f}" if rows_per_second is not None else "unknown"
    return f"{_LINE_PREFIX} rows_done={rows_done} rows_total={total} rows_per_second={rate}"


def parse_progress_line(log_text: str) -> Progress | None:
    """The newest progress line in ``log_text`` as a :class:`Progress`, or None."""
    last = None
    for last in _LINE.finditer(log_text):
        pass
    if last is None:
        return None
    done = int(last.group(1))
    total = int(last.group(2)) if last.group(2) != "unknown" else None
    rate = float(last.group(3)) if last.group(3) != "unknown" else None
    return Progress(done, total, rate, eta_seconds(done, total, rate), source="log")


class RateWindow:
    """Rows/s over the samples of the last ``window_s`` seconds."""

    def __init__(self, window_s: float = RATE_WINDOW_S) -> None:
        self.window_s = window_s
        self._samples: deque[tuple[float, int]] = deque()

    def add(self, when: float, rows: int) -> None:
        self._samples.append((when, rows))
        # Keep one sample at or before the window's start, so the window is full.
        while len(self._samples) > 2 and self._samples[1][0] <= when - self.window_s:
            self._samples.popleft()

    def rate(self) -> float | None:
        if len(self._samples) < 2:
            return None
        (t0, r0), (t1, r1) = self._samples[0], self._samples[-1]
        return round((r1 - r0) / (t1 - t0), 2) if t1 > t0 else None


def report_progress(output: str, rows_total: int | None, *, interval_s: float = LOG_INTERVAL_S,
                    emit: Callable[[str], None] | None = None,
                    clock: Callable[[], float] = time.monotonic) -> Callable[[], None]:
    """Print a progress line for the run directory ``output`` at once and then every
    ``interval_s``, from a daemon thread (the cluster entrypoint's fallback for
    watchers that can't read the output; the first line gives them the total before
    any row is written). Returns ``stop()``, which ends the thread."""
    emit = emit or (lambda line: print(line, flush=True))
    stopped = threading.Event()
    counter = OutputRows(output)
    window = RateWindow()

    def report(measure_rate: bool) -> None:
        try:
            written = counter.read()
            done = written.rows_done if written else 0
            if measure_rate:
                window.add(clock(), done)
            emit(format_progress_line(done, rows_total, window.rate() if measure_rate else None))
        except Exception:  # noqa: BLE001 - progress lines must never break a run
            pass

    def loop() -> None:
        report(measure_rate=False)
        while not stopped.wait(interval_s):
            report(measure_rate=True)

    window.add(clock(), 0)
    thread = threading.Thread(target=loop, name="toolkit-progress", daemon=True)
    thread.start()

    def stop() -> None:
        stopped.set()
        thread.join(timeout=5)

    return stop


# --- one look: toolkit status -------------------------------------------------------


def job_progress(
    info: JobInfo,
    *,
    summary: "RunSummary | None" = None,
    logs: Callable[[], str] | None = None,
    sample_rows: Mapping[str, int] | None = None,
    now: datetime | None = None,
    counter: OutputRows | None = None,
) -> Progress:
    """A job's progress now, for ``toolkit status``.

    Args:
        info: The job as the backend reports it (``output``, ``start_time``).
        summary: A finished run's summary: its rows written are the rows done.
        logs: Fetches the job's log, for its progress lines when the output
            can't be read from here; None skips that.
        sample_rows: Default rows of each ``sample:`` input (rows total).
        now: The current time (UTC); default: the clock's.
        counter: Reads the run directory (default: an :class:`OutputRows` of
            ``info.output``, when that is readable from here).

    Rows/s is rows done over the time since the job started (till it ended); the
    ETA is the rows left at that rate. For a run that resumed, rows written by
    earlier runs count as done, so the rate reads high (a followed job's sliding
    window does not). Once the job has ended, rows done are the rows written (from
    the summary or the result files), or unknown when neither can be read here.
    """
    finished = info.status.is_terminal()
    if summary is not None:
        return Progress(summary.rows_written, summary.rows_in, summary.rows_per_second,
                        0.0 if info.status == JobStatus.SUCCEEDED else None, source="summary")
    if counter is None and readable_from_here(info.output):
        counter = OutputRows(info.output or "", sample_rows)
    written = counter.read() if counter is not None else None
    if written is None:
        # A finished job's last progress line may be up to LOG_INTERVAL_S old: unknown
        # beats a rows_done that isn't the rows written.
        logged = parse_progress_line(logs()) if logs is not None and not finished else None
        return logged or Progress()
    rate = None
    if info.start_time is not None:
        until = info.end_time or now or datetime.now(timezone.utc)
        elapsed = (until - info.start_time).total_seconds()
        rate = round(written.rows_done / elapsed, 2) if elapsed > 0 else None
    eta = None if finished else eta_seconds(written.rows_done, written.rows_total, rate)
    if info.status == JobStatus.SUCCEEDED:
        eta = 0.0
    return Progress(written.rows_done, written.rows_total, rate, eta, source="output")


# --- following: toolkit submit/logs --follow ----------------------------------------


class ProgressWatcher:
    """Called on every poll of a followed job: samples its progress, reports it, and
    raises or warns when no row has been written for ``stall_timeout_s``.

    Rows/s is measured over the last ``window_s`` seconds of samples. The stall
    clock starts when the job is first seen RUNNING and restarts whenever the
    row count changes; it runs only once some progress could be read (a job whose
    progress can't be read from here is never called stalled).
    """

    def __init__(
        self,
        job_id: str,
        read: Callable[[], Progress | None],
        *,
        on_progress: Callable[[Progress], None],
        on_stall: Callable[[str], None],
        stall_timeout_s: float = DEFAULT_STALL_TIMEOUT_S,
        fail_on_stall: bool = False,
        report_interval_s: float = REPORT_INTERVAL_S,
        sample_interval_s: float = SAMPLE_INTERVAL_S,
        window_s: float = RATE_WINDOW_S,
        clock: Clock = REAL_CLOCK,
        hint: str | None = None,
    ) -> None:
        self.job_id = job_id
        self.read = read
        self.on_progress = on_progress
        self.on_stall = on_stall
        self.stall_timeout_s = stall_timeout_s
        self.fail_on_stall = fail_on_stall
        self.report_interval_s = report_interval_s
        self.sample_interval_s = sample_interval_s
        self.clock = clock
        self.hint = hint
        self.window = RateWindow(window_s)
        self.latest: Progress | None = None
        self._sampled_at: float | None = None
        self._reported_at: float | None = None
        self._running_since: float | None = None
        self._rows: int | None = None
        self._changed_at: float | None = None
        self._warned = False

    def __call__(self, info: JobInfo) -> None:
        if info.status != JobStatus.RUNNING:
            return
        now = self.clock.now()
        if self._running_since is None:
            self._running_since = now
        if self._sampled_at is None or now - self._sampled_at >= self.sample_interval_s:
            self._sampled_at = now
            self._sample(now)
        if self._rows is not None:
            self._check_stall(now)

    def _sample(self, now: float) -> None:
        progress = self.read()
        if progress is None or progress.rows_done is None:
            return
        if self._rows is None:
            self._rows = progress.rows_done  # the stall clock runs from the first RUNNING poll
        elif progress.rows_done != self._rows:
            self._rows = progress.rows_done
            self._changed_at = now
            self._warned = False
        self.window.add(now, progress.rows_done)
        rate = self.window.rate()
        if rate is None:
            rate = progress.rows_per_second
        self.latest = Progress(progress.rows_done, progress.rows_total, rate,
                               eta_seconds(progress.rows_done, progress.rows_total, rate),
                               source=progress.source)
        if self._reported_at is None or now - self._reported_at >= self.report_interval_s:
            self._reported_at = now
            self.on_progress(self.latest)

    def _check_stall(self, now: float) -> None:
        since = self._changed_at if self._changed_at is not None else self._running_since
        assert since is not None
        quiet = now - since
        if self._warned or quiet < self.stall_timeout_s:
            return
        self._warned = True
        message = (f"Job {self.job_id} has written no row for {format_duration(quiet)} "
                   f"(--stall-timeout {self.stall_timeout_s:g} s); "
                   f"{self.latest.rows_done if self.latest else 0:,} rows so far.")
        if self.fail_on_stall:
            raise JobStalledError(f"{message} Stopped following; the job keeps running.",
                                  hint=self.hint)
        self.on_stall(message)


def progress_reader(backend: Backend, job_id: str, output: str | None,
                    sample_rows: Mapping[str, int] | None = None) -> Callable[[], Progress | None]:
    """Reads a running job's progress: from its run directory when readable from
    here (or on a local head), else from its newest progress line in the log."""
    counter = OutputRows(output, sample_rows) if output and (
        backend.local or readable_from_here(output)) else None

    def read() -> Progress | None:
        written = counter.read() if counter is not None else None
        if written is not None:
            return Progress(written.rows_done, written.rows_total, source="output")
        return parse_progress_line(backend.logs(job_id))

    return read


def stall_hint(job_id: str, flags: str = "") -> str:
    return (f"Ray Data LLM can hang instead of failing (e.g. on CUDA out of memory, "
            f"ray#59986): look at `toolkit logs {job_id}{flags}`; stop it with "
            f"`toolkit stop {job_id}{flags}`, then rerun with a smaller engine.batch_size "
            "or gpu_memory_utilization (it resumes).")


def watch_job(
    backend: Backend,
    job_id: str,
    *,
    timeout_s: float = DEFAULT_TIMEOUT_S,
    on_log: Callable[[str], None] | None = None,
    on_status: Callable[[JobInfo], None] | None = None,
    on_progress: Callable[[Progress], None] | None = None,
    on_stall: Callable[[str], None] | None = None,
    stall_timeout_s: float = DEFAULT_STALL_TIMEOUT_S,
    fail_on_stall: bool = False,
    report_interval_s: float = REPORT_INTERVAL_S,
    sample_rows: Mapping[str, int] | None = None,
    read: Callable[[], Progress | None] | None = None,
    flags: str = "",
    clock: Clock = REAL_CLOCK,
) -> JobInfo:
    """:func:`~toolkit.cluster.watching.follow` with progress and stall detection.

    The job's output location comes from its first status (``JobInfo.output``);
    ``read`` replaces :func:`progress_reader` (tests).

    Returns:
        The job's final info.

    Raises:
        JobStalledError: ``fail_on_stall`` and no row for ``stall_timeout_s`` (exit 7).
        WaitTimeoutError: still running after ``timeout_s`` (exit 6).
    """
    watcher: ProgressWatcher | None = None

    def on_poll(info: JobInfo) -> None:
        nonlocal watcher
        if watcher is None:
            reader = read or progress_reader(backend, job_id, info.output, sample_rows)
            watcher = ProgressWatcher(
                job_id, reader, on_progress=on_progress or (lambda _: None),
                on_stall=on_stall or (lambda _: None), stall_timeout_s=stall_timeout_s,
                fail_on_stall=fail_on_stall, report_interval_s=report_interval_s,
                clock=clock, hint=stall_hint(job_id, flags),
            )
        watcher(info)

    return follow(backend, job_id, timeout_s=timeout_s, on_log=on_log, on_status=on_status,
                  on_poll=on_poll, clock=clock)
