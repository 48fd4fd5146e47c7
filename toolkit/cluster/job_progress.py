"""How far a submitted job has got: rows written, rows/s, ETA, and stalls.

A job's progress is the run layer's one model,
:class:`~toolkit.run.progress_model.Progress`, read from what the job writes,
never from Ray's internals:

- **the run directory** (``JobInfo.output``, recorded at submit), through
  :class:`~toolkit.run.progress_sources.OutputRows`: rows done are the rows in the
  toolkit's result files so far, and rows total comes from the manifest's spec
  (:func:`~toolkit.run.progress_sources.expected_rows`, the same function a local
  run uses; for a ``sample:`` input without rows, the provider's default);
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

import dataclasses
import re
import time
from collections.abc import Callable, Mapping
from datetime import datetime, timezone
from typing import TYPE_CHECKING

from toolkit.cluster.backends.base import Backend, JobInfo, JobStatus
from toolkit.cluster.watching import DEFAULT_TIMEOUT_S, REAL_CLOCK, Clock, follow
from toolkit.errors import JobStalledError
from toolkit.run.progress_model import (
    Progress,
    ProgressReporter,
    RateWindow,
    eta_seconds,
    format_duration,
    polling,
    rows_per_second,
)
from toolkit.run.progress_sources import OutputRows, WrittenRows

if TYPE_CHECKING:
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
    r"^progress: rows_done=(\d+) rows_total=(\d+|unknown) rows_per_second=([0-9.]+|unknown)"
    r"(?: failed_checks=(\S+))?\s*$",
    re.MULTILINE,
)


# --- reading the run directory ------------------------------------------------------


def readable_from_here(output: str | None) -> bool:
    """Whether ``output`` names the same place here as on the cluster: a URI or an
    absolute path. A relative path is relative to the job's working dir there."""
    if not output:
        return False
    return "://" in output or output.startswith("/")


# --- the job's own progress lines ---------------------------------------------------


def format_progress_line(rows_done: int, rows_total: int | None,
                         rows_per_second: float | None,
                         checks: tuple[tuple[str, int], ...] | None = None) -> str:
    """``progress: rows_done=1200 rows_total=5000 rows_per_second=41.3`` (``unknown`` for
    a missing figure), then ``failed_checks=truncated:12,empty:1`` once a row failed a
    check: the line the cluster entrypoint prints, stable for parsing."""
    total = str(rows_total) if rows_total is not None else "unknown"
    rate = f"{rows_per_second:.1f}" if rows_per_second is not None else "unknown"
    line = f"{_LINE_PREFIX} rows_done={rows_done} rows_total={total} rows_per_second={rate}"
    failed = [f"{name}:{count}" for name, count in checks or () if count]
    return line + (f" failed_checks={','.join(failed)}" if failed else "")


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
    checks = None
    if last.group(4):
        pairs = [item.rpartition(":") for item in last.group(4).split(",")]
        checks = tuple((name, int(count)) for name, _, count in pairs if count.isdigit())
    return Progress(done, total, rate, eta_seconds(done, total, rate), source="log",
                    checks=checks or None)


def report_progress(output: str, rows_total: int | None | Callable[[], int | None], *,
                    interval_s: float = LOG_INTERVAL_S,
                    emit: Callable[[str], None] | None = None,
                    clock: Callable[[], float] = time.monotonic) -> Callable[[], None]:
    """Print a progress line for the run directory ``output`` at once and then every
    ``interval_s``, from a daemon thread (the cluster entrypoint's fallback for
    watchers that can't read the output; the first line gives them the total before
    any row is written). Rows/s is over the last :data:`RATE_WINDOW_S`.

    Args:
        rows_total: Rows expected, or a function computing it in the thread
            (:func:`~toolkit.run.progress_sources.expected_rows`).

    Returns:
        ``stop()``, which ends the thread.
    """
    emit = emit or (lambda line: print(line, flush=True))
    reporter = ProgressReporter(WrittenRows(output), total=rows_total, clock=clock,
                                window_s=RATE_WINDOW_S)

    def look() -> None:
        progress = reporter.poll()
        emit(format_progress_line(progress.rows_done or 0, progress.rows_total,
                                  progress.rows_per_second, progress.checks))

    return polling(look, interval_s, join_timeout_s=5.0)


_RESOURCES_PREFIX = "resources: "
_RESOURCES_LINE = re.compile(r"^resources: (.*\S)\s*$", re.MULTILINE)
_WAITING = "waiting for "


def format_resources_line(notice: str) -> str:
    """``resources: waiting for 1 GPU (L4) for engine: ...``: the line the cluster
    entrypoint prints when Ray can't place the run's workers (and when it can again)."""
    return _RESOURCES_PREFIX + " ".join(notice.split())


def parse_resources_line(log_text: str) -> str | None:
    """What the newest resources line says the job waits for; None when there is none
    or the newest says the workers were placed after all."""
    last = None
    for last in _RESOURCES_LINE.finditer(log_text):
        pass
    if last is None or not last.group(1).startswith(_WAITING):
        return None
    return last.group(1)


def waiting_for(info: JobInfo, logs: Callable[[], str]) -> str | None:
    """What a job that hasn't ended waits for, from its log's newest resources line."""
    if info.status.is_terminal():
        return None
    try:
        return parse_resources_line(logs())
    except Exception:  # noqa: BLE001 - a log that can't be read: status shows the rest
        return None


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
    ended = info.status.is_terminal()
    succeeded = info.status == JobStatus.SUCCEEDED
    if summary is not None:
        return Progress(summary.rows_written, summary.rows_in, summary.rows_per_second,
                        0.0 if succeeded else None, source="summary",
                        error_rows=summary.error_rows, elapsed_seconds=summary.seconds,
                        finished=succeeded,
                        checks=tuple((n, c.failed) for n, c in summary.checks.items()) or None)
    if counter is None and readable_from_here(info.output):
        counter = OutputRows(info.output or "", sample_rows)
    written = counter.read() if counter is not None else None
    if written is None or written.rows_done is None:
        # A finished job's last progress line may be up to LOG_INTERVAL_S old: unknown
        # beats a rows_done that isn't the rows written.
        logged = parse_progress_line(logs()) if logs is not None and not ended else None
        return logged or Progress()
    elapsed = rate = None
    if info.start_time is not None:
        until = info.end_time or now or datetime.now(timezone.utc)
        elapsed = (until - info.start_time).total_seconds()
        rate = rows_per_second(written.rows_done, elapsed)
    eta = None if ended else eta_seconds(written.rows_done, written.rows_total, rate)
    if succeeded:
        eta = 0.0
    return dataclasses.replace(written, rows_per_second=rate, eta_seconds=eta,
                               elapsed_seconds=elapsed, finished=succeeded)


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
        self.latest = dataclasses.replace(
            progress, rows_per_second=rate,
            eta_seconds=eta_seconds(progress.rows_done, progress.rows_total, rate))
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
        return written if written is not None else parse_progress_line(backend.logs(job_id))

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
