"""How far a submitted job has got: rows written, rows/s, ETA, and stalls.

A job's progress is the run layer's one model,
:class:`~toolkit.run.progress.model.Progress`, read from what the job writes,
never from Ray's internals:

- **the run directory** (``JobInfo.output``, recorded at submit), through
  :class:`~toolkit.run.progress.sources.OutputRows`: rows done are the rows in the
  toolkit's result files so far, and rows total comes from the manifest's spec
  (:func:`~toolkit.run.progress.sources.expected_rows`, the same function a local
  run uses; for a ``sample:`` input without rows, the provider's default);
- **the job's log**, when the run directory can't be read from here (a relative
  path on a remote cluster, a bucket without credentials): the cluster
  entrypoint prints a progress line every
  :data:`~toolkit.run.progress.job_log.LOG_INTERVAL_S` seconds
  (:class:`~toolkit.run.progress.job_log.JobLogWriter`, the run's observer there), marked
  as the toolkit's (:mod:`toolkit.run.progress.job_log` owns the format), and
  :func:`~toolkit.run.progress.job_log.parse_progress_line` reads the newest one back.

``toolkit status`` calls :func:`job_progress` once (rows/s over the time since the
job started); ``--follow`` calls :func:`watch_job`, which shows the toolkit's own
lines of the job's log (:class:`~toolkit.run.progress.job_log.LogFilter`), samples the
progress every few seconds, computes rows/s over a sliding window of recent samples
(from the last sample before rows came, so model loading does not drag the rate
down), reports it, and warns (or, with ``fail_on_stall``, raises
:class:`~toolkit.errors.JobStalledError`, exit 7) when no row has been written for
``stall_timeout_s``: Ray Data LLM can hang on a CUDA out-of-memory error instead of
failing (ray#59986).

Nothing here imports Ray; everything that waits takes a :class:`Clock`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from datetime import datetime, timezone
from typing import TYPE_CHECKING

from toolkit.errors import JobStalledError
from toolkit.run.progress.following import DEFAULT_TIMEOUT_S, REAL_CLOCK, Clock, follow
from toolkit.run.progress.job_log import (  # noqa: F401 - callers import the line formats here too
    LOG_INTERVAL_S,
    MARKER,
    RATE_WINDOW_S,
    LogFilter,
    ToolkitLine,
    format_progress_line,
    format_resources_line,
    parse_progress_line,
    parse_resources_line,
    report_progress,
)
from toolkit.run.progress.job_state import JobInfo, JobStatus, WatchedJobs
from toolkit.run.progress.model import (
    Progress,
    RateWindow,
    eta_seconds,
    format_duration,
    rows_per_second,
)
from toolkit.run.progress.sources import OutputRows

if TYPE_CHECKING:
    from toolkit.run.output.summary import RunSummary

#: ``--stall-timeout`` default: no new row for this long is worth a warning.
DEFAULT_STALL_TIMEOUT_S = 30 * 60.0
#: While following: read the progress at most this often from a bucket (listing one
#: costs); an output on a path is read at every poll.
SAMPLE_INTERVAL_S = 5.0
#: While following without a terminal: one progress line this often.
REPORT_INTERVAL_S = 60.0
#: While following: rows/s is shown once rows have been landing for this long. Ray
#: Data writes files in bursts; a rate over a second or two says more about a burst
#: than about the run.
RATE_MIN_SPAN_S = 5.0

# --- reading the run directory ------------------------------------------------------


def readable_from_here(output: str | None) -> bool:
    """Whether ``output`` names the same place here as on the cluster: a URI or an
    absolute path. A relative path is relative to the job's working dir there."""
    if not output:
        return False
    return "://" in output or output.startswith("/")


# --- what a job waits for ------------------------------------------------------------


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

    Rows/s is measured over the last ``window_s`` seconds of samples, counted from
    the first rows seen to land, and known once more rows have landed after them at
    least :data:`RATE_MIN_SPAN_S` later: the minutes a job spends loading its model
    are not a rate (counted in, they made the first ETAs many times too long), and
    neither is a burst of files over the second since the last look.
    Progress read from the job's log carries the entrypoint's own recent rate,
    measured where the rows are written, and is taken as it is (its lines are up to
    :data:`LOG_INTERVAL_S` apart, too coarse to sample again here).

    Until rows come, the progress reported carries the job's phase (``phase``,
    from its log). A progress line is reported every ``report_interval_s``, and at
    once when the phase changes, the first rows included.

    The stall clock starts when the job is first seen RUNNING and restarts whenever
    the row count changes; it runs only once some progress could be read (a job
    whose progress can't be read from here is never called stalled).
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
        phase: Callable[[], str | None] | None = None,
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
        self.phase = phase
        self.window = RateWindow(window_s)
        self.latest: Progress | None = None
        self._sampled_at: float | None = None
        self._reported_at: float | None = None
        self._reported_phase: str | None = None
        self._running_since: float | None = None
        self._rows: int | None = None
        self._changed_at: float | None = None
        self._landings = 0  # times this run's row count was seen to grow
        self._first_landing_at: float | None = None
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
        rows = progress.rows_done if progress is not None else None
        if rows is not None:
            self._count(now, rows)
        phase = None
        if self._landings == 0:  # no row has come since the follow began
            phase = (self.phase() if self.phase is not None else None) or (
                progress.phase if progress is not None else None)
        if progress is not None and rows is not None:
            rate = progress.rows_per_second
            settled = (self._first_landing_at is not None and self._landings >= 2
                       and now - self._first_landing_at >= RATE_MIN_SPAN_S)
            if progress.source != "log" and settled:
                rate = self.window.rate()
            eta = eta_seconds(rows, progress.rows_total, rate)
            if rows == progress.rows_total:  # all written: no rate needed to know
                eta = 0.0
            latest = dataclasses.replace(progress, rows_per_second=rate, phase=phase,
                                         eta_seconds=eta)
        elif phase is not None:  # nothing counted yet, but the log says what it does
            latest = Progress(rows_total=progress.rows_total if progress else None, phase=phase)
        else:
            return
        self.latest = latest
        due = self._reported_at is None or now - self._reported_at >= self.report_interval_s
        if due or phase != self._reported_phase:
            self._reported_at = now
            self._reported_phase = phase
            self.on_progress(latest)

    def _count(self, now: float, rows: int) -> None:
        """Take a row count: the stall clock, and the window rows/s is measured over."""
        if self._rows is None:
            self._rows = rows  # the stall clock runs from the first RUNNING poll
        elif rows != self._rows:
            # Fewer rows: --overwrite cleared an earlier run's, and this run has none yet.
            self._landings = self._landings + 1 if rows > self._rows else 0
            self._rows = rows
            self._changed_at = now
            self._warned = False
        if self._landings == 0:  # no rows yet: the window holds the newest look only
            self.window = RateWindow(self.window.window_s)
            self._first_landing_at = None
        elif self._first_landing_at is None:  # the first rows: the rate counts from here
            self.window = RateWindow(self.window.window_s)
            self._first_landing_at = now
        self.window.add(now, rows)

    def _check_stall(self, now: float) -> None:
        since = self._changed_at if self._changed_at is not None else self._running_since
        assert since is not None
        quiet = now - since
        if self._warned or quiet < self.stall_timeout_s:
            return
        self._warned = True
        message = (f"Job {self.job_id} has written no row for {format_duration(quiet)} "
                   f"(--stall-timeout {self.stall_timeout_s:g} s); "
                   f"{self._rows or 0:,} rows so far.")
        if self.fail_on_stall:
            raise JobStalledError(f"{message} Stopped following; the job keeps running.",
                                  hint=self.hint)
        self.on_stall(message)


def progress_reader(backend: WatchedJobs, job_id: str, output: str | None,
                    sample_rows: Mapping[str, int] | None = None,
                    logged: Callable[[], Progress | None] | None = None,
                    ) -> Callable[[], Progress | None]:
    """Reads a running job's progress: from its run directory when readable from
    here (or on a local head), else from its newest progress line in the log
    (``logged``, e.g. a :class:`~toolkit.run.progress.job_log.LogFilter`'s, saves
    fetching the log again)."""
    counter = OutputRows(output, sample_rows) if output and (
        backend.local or readable_from_here(output)) else None

    def read() -> Progress | None:
        written = counter.read() if counter is not None else None
        if written is not None:
            return written
        return logged() if logged is not None else parse_progress_line(backend.logs(job_id))

    return read


def stall_hint(job_id: str, flags: str = "") -> str:
    return (f"Ray Data LLM can hang instead of failing (e.g. on CUDA out of memory, "
            f"ray#59986): look at `toolkit logs {job_id}{flags}`; stop it with "
            f"`toolkit stop {job_id}{flags}`, then rerun with a smaller engine.batch_size "
            "or gpu_memory_utilization (it resumes).")


@dataclasses.dataclass(frozen=True)
class WatchOptions:
    """How :func:`watch_job` follows a job.

    Attributes:
        timeout_s: Give up after this long (exit 6; the job keeps running).
        stall_timeout_s: Warn (or fail) once no row was written for this long.
        fail_on_stall: A stall raises :class:`~toolkit.errors.JobStalledError` (exit 7).
        report_interval_s: Seconds between progress reports (0: every sample).
        sample_interval_s: Read the progress at most this often; None: at every poll
            for an output on a path, every :data:`SAMPLE_INTERVAL_S` for a URI.
        sample_rows: A ``sample:`` input's default rows, for its total.
        flags: The command line's target flags, repeated in the hints it prints.
    """

    timeout_s: float = DEFAULT_TIMEOUT_S
    stall_timeout_s: float = DEFAULT_STALL_TIMEOUT_S
    fail_on_stall: bool = False
    report_interval_s: float = REPORT_INTERVAL_S
    sample_interval_s: float | None = SAMPLE_INTERVAL_S
    sample_rows: Mapping[str, int] | None = None
    flags: str = ""


class JobObserver:
    """What a caller follows of a submitted job; each method does nothing here.

    ``toolkit submit --follow`` and ``toolkit logs --follow`` show all of it
    (:class:`~toolkit.run.progress.display.ProgressDisplay`, the same line ``toolkit
    run`` draws).
    """

    #: What of the job's log to read once per poll: "lines" (the toolkit's own lines,
    #: to :meth:`line`), "raw" (every new chunk, to :meth:`log`, as ``--raw``) or None
    #: (the log is not read; the progress then comes from the output folder alone).
    reads_log: str | None = None

    def log(self, text: str) -> None:
        """A new chunk of the job's whole log (``reads_log = "raw"``)."""

    def line(self, line: ToolkitLine) -> None:
        """One line of the log a user needs (:class:`~toolkit.run.progress.job_log.LogFilter`:
        warnings, errors, the summary); for a job that FAILED without an error line of
        its own, then the end of its log (``reads_log = "lines"``)."""

    def status(self, info: JobInfo) -> None:
        """The job's status, when it changed."""

    def progress(self, progress: Progress) -> None:
        """Its phase until rows come, then rows done of total, rows/s over
        :data:`RATE_WINDOW_S`, the ETA."""

    def stall(self, message: str) -> None:
        """No row was written for ``stall_timeout_s``."""


def watch_job(
    backend: WatchedJobs,
    job_id: str,
    observer: JobObserver | None = None,
    options: WatchOptions = WatchOptions(),
    *,
    read: Callable[[], Progress | None] | None = None,
    clock: Clock = REAL_CLOCK,
) -> JobInfo:
    """:func:`~toolkit.run.progress.following.follow` with the toolkit's lines, progress and
    stall detection, told to ``observer``.

    Args:
        read: Replaces :func:`progress_reader` (tests).

    The job's output location comes from its first status (``JobInfo.output``).
    Reading the log (``observer.reads_log``) reads it once per poll; the phase and
    the progress lines in it are then taken from that read.

    Returns:
        The job's final info.

    Raises:
        JobStalledError: ``options.fail_on_stall`` and no row for
            ``options.stall_timeout_s`` (exit 7).
        WaitTimeoutError: still running after ``options.timeout_s`` (exit 6).
    """
    observer = observer or JobObserver()
    raw = observer.reads_log == "raw"
    watcher: ProgressWatcher | None = None
    lines = LogFilter() if observer.reads_log is not None else None

    def show(text: str) -> None:
        assert lines is not None
        if raw:
            observer.log(text)
        for line in lines.feed(text):
            if not raw:
                observer.line(line)

    def on_poll(info: JobInfo) -> None:
        nonlocal watcher
        if lines is not None and lines.finished:
            return  # the summary is out: a progress line after it would say less, later
        if watcher is None:
            logged = (lambda: lines.progress) if lines is not None else None
            reader = read or progress_reader(backend, job_id, info.output,
                                             options.sample_rows, logged)
            interval = options.sample_interval_s
            if interval is None:
                interval = SAMPLE_INTERVAL_S if "://" in (info.output or "") else 0.0
            watcher = ProgressWatcher(
                job_id, reader, on_progress=observer.progress, on_stall=observer.stall,
                stall_timeout_s=options.stall_timeout_s, fail_on_stall=options.fail_on_stall,
                report_interval_s=options.report_interval_s, sample_interval_s=interval,
                clock=clock, hint=stall_hint(job_id, options.flags),
                phase=(lambda: lines.phase) if lines is not None else None,
            )
        watcher(info)

    info = follow(backend, job_id, timeout_s=options.timeout_s,
                  on_log=show if lines else None, on_status=observer.status, on_poll=on_poll,
                  clock=clock)
    if lines is not None and not raw:
        ending = lines.end()
        if info.status == JobStatus.FAILED and not lines.saw_error:
            last = lines.last_words()
            if last:
                ending.append(ToolkitLine("note", f"The job printed no error of its own; its "
                                          f"log ends with (`toolkit logs {job_id}"
                                          f"{options.flags}` shows all of it):"))
                ending += last
        for line in ending:
            observer.line(line)
    return info
