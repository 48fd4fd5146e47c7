"""A local run's progress as the user sees it, on top of the one progress model.

The model (:class:`~toolkit.run.progress.model.Progress`, rows/s, ETA) is in
:mod:`toolkit.run.progress.model`; the counts come from the run directory's result
files (:mod:`toolkit.run.progress.sources`). Here: :func:`format_progress` renders
a :class:`Progress` (a live bar or a plain line) and :class:`ProgressDisplay`
keeps that line on a terminal; :func:`reporting` polls in a background thread
(:func:`~toolkit.run.progress.model.polling`, the same helper the cluster
entrypoint's progress lines use). :class:`LogWatcher` spots, in the run's log, the
Ray messages a user must hear about (out of memory, a worker that died) and says
them in our words.

Example:
    >>> reporter = ProgressReporter(WrittenRows(run_dir, "parquet"), total=1000)  # doctest: +SKIP
    >>> format_progress(reporter.poll(), interactive=False)  # doctest: +SKIP
    'Progress: 250/1,000 rows (25%), 12.5 rows/s, ETA 1m 00s, 0 errors, 20s elapsed'
"""

from __future__ import annotations

import contextlib
import os
import re
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from typing import TYPE_CHECKING, TextIO

from toolkit.redaction import redact
from toolkit.run.progress.model import (
    Clock,
    Progress,
    ProgressReporter,
    answered_text,
    checks_text,
    format_duration,
    polling,
)
from toolkit.run.progress.observer import RunObserver

if TYPE_CHECKING:
    from toolkit.errors import ToolkitError
    from toolkit.run.ray.connection import RayConnection

#: Seconds between progress lines when stderr is not a terminal (CI logs, pipes);
#: the environment variable of this name overrides it (tests use a short one).
PLAIN_INTERVAL_ENV = "TOOLKIT_PROGRESS_INTERVAL"
PLAIN_INTERVAL_S = 10.0
#: Seconds between redraws of the live bar on a terminal.
LIVE_INTERVAL_S = 1.0


# -- rendering -----------------------------------------------------------------------

def format_progress(progress: Progress, interactive: bool, width: int = 80) -> str:
    """The progress line: a live bar for a terminal, a plain sentence otherwise.

    Examples:
        ``[#########-----------]  150/300 rows  50%  12.3 rows/s  ETA 12s  0 errors  0:21``
        ``Progress: 150/300 rows (50%), 12.3 rows/s, ETA 12s, 0 errors, 21s elapsed``

    Before the first row, what the run is doing stands where rows/s and the ETA go:
        ``Progress: 0/300 rows (0%), loading the model, 0 errors, 14s elapsed``
    """
    p = progress
    done = p.rows_done or 0
    total = f"{p.rows_total:,}" if p.rows_total is not None else "?"
    fraction = (done / p.rows_total if p.rows_total else
                1.0 if p.rows_total == 0 else None)
    percent = f"{100 * fraction:.0f}%" if fraction is not None else None
    eta = None
    if not p.finished and p.rows_total is not None:
        eta = f"ETA {format_duration(p.eta_seconds)}" if p.eta_seconds is not None else "ETA ?"
    errors = (f"{p.error_rows:,} error{'' if p.error_rows == 1 else 's'}"
              if p.error_rows is not None else None)
    failed = checks_text(p.checks, p.rows_done)
    if errors and failed:
        errors = f"{errors} (failed checks: {failed})"
    answered = answered_text(p.answered_by)
    if errors and answered:
        errors = f"{errors}, answered by {answered}"
    if p.nodes:
        errors = f"{errors}, {p.nodes}" if errors else p.nodes
    rate = f"{p.rows_per_second:,.1f} rows/s" if p.rows_per_second is not None else "? rows/s"
    if p.phase is not None:  # no row yet: rows/s and the ETA would say nothing
        rate, eta = p.phase, None
    if not interactive:
        parts = [f"{done:,}/{total} rows" + (f" ({percent})" if percent else ""),
                 rate, *([eta] if eta else []), *([errors] if errors else []),
                 *([f"{format_duration(p.elapsed_seconds)} elapsed"]
                   if p.elapsed_seconds is not None else [])]
        return ("Done: " if p.finished else "Progress: ") + ", ".join(parts)
    parts = [f"{done:,}/{total} rows", *([percent] if percent else []), rate,
             *([eta] if eta else []), *([errors] if errors else [])]
    if p.elapsed_seconds is not None:
        minutes, secs = divmod(int(p.elapsed_seconds), 60)
        parts.append(f"{minutes // 60}:{minutes % 60:02d}:{secs:02d}" if minutes >= 60 else
                     f"{minutes}:{secs:02d}")
    text = "  ".join(parts)
    bar_width = min(30, width - len(text) - 4)
    if bar_width >= 10:
        filled = int(bar_width * fraction) if fraction is not None else 0
        bar = "#" * filled + "-" * (bar_width - filled) if fraction is not None \
            else "?" * bar_width
        text = f"[{bar}]  {text}"
    return text[:max(10, width - 1)]


class ProgressDisplay(RunObserver):
    """Keeps one progress line on ``stream`` and prints messages above it: what
    ``toolkit run`` shows of a run it follows (a :class:`RunObserver`), and what
    ``submit --follow`` / ``logs --follow`` show of a job, whose own lines go to
    ``lines`` (stdout) while the progress line and notes stay on ``stream``.

    On a terminal (``interactive``) the line is redrawn in place with ``\\r``, below
    whatever is printed meanwhile; else each update is its own line, at most one per
    ``plain_interval_s``, plus the last. Safe to call from the polling thread and the
    main thread.
    """

    def __init__(
        self,
        stream: TextIO,
        interactive: bool,
        plain_interval_s: float = PLAIN_INTERVAL_S,
        width: Callable[[], int] | None = None,
        clock: Clock = time.monotonic,
        lines: TextIO | None = None,
    ) -> None:
        self.stream = stream
        self.lines = lines or stream
        self.interactive = interactive
        self.plain_interval_s = plain_interval_s
        self._width = width or (lambda: _terminal_width(stream))
        self._clock = clock
        self._lock = threading.Lock()
        self._line = ""  # the live line drawn and not yet ended, redrawn after a message
        self._last_plain: float | None = None
        self.progress_interval_s = LIVE_INTERVAL_S if interactive else plain_interval_s

    # -- as the run's observer ------------------------------------------------------------

    def connected(self, connection: "RayConnection") -> None:
        """Which cluster was joined (or the Dashboard of the Ray started here), and what
        the nodes make of ``data.output``."""
        url = connection.dashboard_url
        if not connection.started_here:
            self.message(f"Joined the Ray cluster at {connection.address}"
                         + (f" ({url})" if url else ""))
        elif url:
            self.message(f"Ray Dashboard: {url}")
        for warning in connection.warnings:
            self.message(redact(f"Warning: {warning}"))

    def progress(self, progress: Progress) -> None:
        self.show(progress)

    def notice(self, text: str) -> None:
        self.message(redact(f"Warning: {text}"))

    def cluster_lost(self, error: "ToolkitError") -> None:
        self.close()
        self.message(f"Error: {error.format_message()}")

    # -- the line ---------------------------------------------------------------------------

    def show(self, progress: Progress) -> None:
        with self._lock:
            if self.interactive:
                self._line = format_progress(progress, interactive=True, width=self._width())
                self.stream.write("\r" + self._line + "\x1b[K")
                if progress.finished:
                    self.stream.write("\n")
                    self._line = ""
            else:
                now = self._clock()
                if self._last_plain is None:  # the interval counts from the first look
                    self._last_plain = now
                if not progress.finished and now < self._last_plain + self.plain_interval_s:
                    return
                self._last_plain = now
                self.stream.write(format_progress(progress, interactive=False) + "\n")
            self.stream.flush()

    def message(self, text: str) -> None:
        """A line of its own (a warning, the log's path), above the live line."""
        self._above(self.stream, text + "\n")

    def job_text(self, text: str) -> None:
        """A chunk of a followed job's own log, on ``lines`` above the live line."""
        self._above(self.lines, text, redraw=text.endswith("\n"))

    def job_line(self, text: str, *, ended: bool = False) -> None:
        """One of a followed job's own lines; ``ended``: its run is over (the
        summary), so its last progress line is stale and not drawn again."""
        self._above(self.lines, text + "\n", drop=ended)

    def close(self, keep: bool = True) -> None:
        """End a live line that was left mid-run (a failure, Ctrl-C): kept as a line of
        its own, or cleared (``keep=False``: a follower's, which says what came of it)."""
        with self._lock:
            if self._line:
                self.stream.write("\n" if keep else "\r\x1b[K")
                self.stream.flush()
                self._line = ""

    def _above(self, out: TextIO, text: str, redraw: bool = True, drop: bool = False) -> None:
        """``text`` on ``out``, the live line cleared first and drawn again below it
        (``redraw``), or dropped (``drop``)."""
        with self._lock:
            if self._line:
                self.stream.write("\r\x1b[K")
                self.stream.flush()
            if drop:
                self._line = ""
            out.write(text)
            out.flush()
            if self._line and redraw:
                self.stream.write(self._line + "\x1b[K")
                self.stream.flush()


def _terminal_width(stream: TextIO) -> int:
    """Columns of the terminal ``stream`` writes to (fds 1 and 2 may be a log file now)."""
    try:
        columns = os.get_terminal_size(stream.fileno()).columns
    except (AttributeError, OSError, ValueError):
        return 80
    return columns if columns > 0 else 80  # a pseudo-terminal may report 0


def plain_interval(environ: Mapping[str, str] = os.environ) -> float:
    """Seconds between plain progress lines: ``TOOLKIT_PROGRESS_INTERVAL`` or 10."""
    try:
        value = float(environ.get(PLAIN_INTERVAL_ENV, ""))
    except ValueError:
        return PLAIN_INTERVAL_S
    return value if value > 0 else PLAIN_INTERVAL_S


# -- what the log says -------------------------------------------------------------

#: Ray's words (raylet, core worker, Ray Data) for events a user must hear about,
#: and ours. Each is said once per run.
LOG_SIGNS: tuple[tuple[re.Pattern[str], str], ...] = (
    (re.compile(r"running low on memory|killed due to memory pressure|OutOfMemoryError"),
     "Ray killed a worker because this machine ran low on memory; Ray Data retries "
     "its rows, but if this repeats, lower --batch-size or --concurrency."),
    (re.compile(r"A worker died or was killed|actor died unexpectedly|ActorDiedError|"
                r"Worker unexpectedly exits"),
     "a Ray worker process died; Ray restarts it and retries its rows."),
)


class LogWatcher:
    """Reads what was appended to the run's log since the last look, for :data:`LOG_SIGNS`."""

    def __init__(self, path: str, signs: tuple[tuple[re.Pattern[str], str], ...] = LOG_SIGNS):
        self.path = path
        self.signs = signs
        self._offset = _size(path)  # only what this run appends
        self._said: set[str] = set()
        self._partial = ""

    def new_notices(self) -> list[str]:
        try:
            with open(self.path, encoding="utf-8", errors="replace") as log:
                log.seek(self._offset)
                text = log.read(1 << 22)
                self._offset = log.tell()
        except OSError:
            return []
        lines = (self._partial + text).split("\n")
        self._partial = lines.pop()
        notices = []
        for line in lines:
            for pattern, notice in self.signs:
                if notice not in self._said and pattern.search(line):
                    self._said.add(notice)
                    notices.append(notice)
        return notices


def _size(path: str) -> int:
    try:
        return os.path.getsize(path)
    except OSError:
        return 0


# -- polling -----------------------------------------------------------------------

@contextlib.contextmanager
def reporting(
    reporter: ProgressReporter,
    on_progress: Callable[[Progress], None],
    interval_s: float,
    log: LogWatcher | None = None,
    on_notice: Callable[[str], None] | None = None,
) -> Iterator[None]:
    """Poll ``reporter`` every ``interval_s`` in a background thread while the block runs.

    When the block completes, one last poll reports the run ``finished``; when it
    raises, polling just stops. Callbacks run in the polling thread.
    """

    def look(finished: bool = False) -> None:
        if log is not None and on_notice is not None:
            for notice in log.new_notices():
                on_notice(notice)
        on_progress(reporter.poll(finished=finished))

    stop = polling(look, interval_s)
    try:
        yield
    finally:
        stop()
    try:
        look(finished=True)
    except Exception:  # noqa: BLE001 - the run succeeded; its summary counts the rows
        pass
