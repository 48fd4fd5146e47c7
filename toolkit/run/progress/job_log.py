"""A submitted job's log: the toolkit's own lines in it, written and read back.

A job's driver log mixes what the toolkit says with what Ray says: Ray Data's
11-line operator block every 10 s, worker output, library warnings. The cluster
entrypoint's run prints each of its own lines with a fixed marker and a kind
(:class:`JobLogWriter`, the run's :class:`~toolkit.run.progress.observer.RunObserver`
there, as the terminal line is ``toolkit run``'s)::

    [toolkit] phase: loading the model
    [toolkit] progress: rows_done=1200 rows_total=5000 rows_per_second=41.3
    [toolkit] resources: waiting for 1 GPU (L4) for engine: ...
    [toolkit] warning: ...
    [toolkit] error: The output folder holds 1 file(s) this toolkit did not write ...
    [toolkit] hint: ...
    [toolkit] summary: Job text-industry finished in 11.8 s (16.9 rows/s).
    [toolkit] summary:   rows in:       200

so watchers find them by the marker at the start of a line, whatever else the log
holds: a followed job shows only them (:class:`LogFilter`), and ``toolkit status``
reads the newest progress and resources lines (:func:`parse_progress_line`,
:func:`parse_resources_line`). The ``progress:`` and ``resources:`` payloads are the
same as before the marker, so logs of older jobs (unmarked lines) still parse.

Nothing here imports Ray.
"""

from __future__ import annotations

import re
import sys
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal, TextIO

from toolkit.run.progress.display import LOG_SIGNS
from toolkit.run.progress.model import Progress, ProgressReporter, eta_seconds, polling
from toolkit.run.progress.observer import RunObserver
from toolkit.run.progress.sources import WrittenRows

if TYPE_CHECKING:
    from toolkit.errors import ToolkitError
    from toolkit.run.ray.connection import RayConnection

#: Starts every line the toolkit prints into a job's log.
MARKER = "[toolkit] "
#: Seconds between the entrypoint's progress lines in the job's log.
LOG_INTERVAL_S = 30.0
#: While following (and in the entrypoint's progress lines): rows/s is measured over
#: this much recent time, so the ETA follows the rate of now, not of the run so far.
RATE_WINDOW_S = 2 * 60.0

#: What a marked line says: the phase before rows come, a progress figure, what the
#: run waits for, a warning, an error and its hint, a line of the final summary.
LineKind = Literal["phase", "progress", "resources", "warning", "error", "hint", "summary"]
KINDS: tuple[str, ...] = ("phase", "progress", "resources", "warning", "error", "hint",
                          "summary")

_MARKED = re.compile(r"^\[toolkit\] (" + "|".join(KINDS) + r"): ?(.*?)\s*$")
# Before the marker, the entrypoint printed these two unmarked (older jobs' logs).
_LEGACY = re.compile(r"^(progress|resources): (.*?)\s*$")

_PROGRESS = re.compile(
    r"^(?:\[toolkit\] )?progress: rows_done=(\d+) rows_total=(\d+|unknown) "
    r"rows_per_second=([0-9.]+|unknown)(?: failed_checks=(\S+))?(?: phase=(.+?))?\s*$",
    re.MULTILINE,
)
_RESOURCES = re.compile(r"^(?:\[toolkit\] )?resources: (.*\S)\s*$", re.MULTILINE)
_WAITING = "waiting for "


@dataclass(frozen=True)
class ToolkitLine:
    """One of the toolkit's lines in a job's log, or a line a follower shows.

    Attributes:
        kind: A :data:`LineKind`; a follower also shows a ``"note"`` of its own and
            ``"log"`` lines (the end of a failed job's log, unfiltered).
        text: The line after ``[toolkit] KIND: ``.
    """

    kind: str
    text: str

    def shown(self) -> str:
        """The line as a follower prints it: ``Warning: ...``, ``Error: ...``, a
        summary line as the run printed it."""
        prefix = {"warning": "Warning: ", "resources": "Warning: ", "error": "Error: ",
                  "hint": "Hint: "}.get(self.kind, "")
        return prefix + self.text


def toolkit_line(kind: str, text: str) -> str:
    """``[toolkit] KIND: TEXT``; ``text`` must be one line."""
    return f"{MARKER}{kind}: {text}"


def parse_toolkit_line(line: str) -> ToolkitLine | None:
    """The toolkit's line in ``line`` (marked, or an older job's unmarked ``progress:``
    or ``resources:`` line), else None."""
    # A progress bar's carriage returns may precede a line on the same "line".
    line = line.rsplit("\r", 1)[-1]
    found = _MARKED.match(line) or _LEGACY.match(line)
    return ToolkitLine(found.group(1), found.group(2)) if found else None


# --- the payloads: progress and resources -------------------------------------------


def format_progress_line(rows_done: int, rows_total: int | None,
                         rows_per_second: float | None,
                         checks: tuple[tuple[str, int], ...] | None = None,
                         phase: str | None = None) -> str:
    """``progress: rows_done=1200 rows_total=5000 rows_per_second=41.3`` (``unknown`` for
    a missing figure), then ``failed_checks=truncated:12,empty:1`` once a row failed a
    check, and ``phase=loading the model`` while no row has come: the line the cluster
    entrypoint prints (after :data:`MARKER`), stable for parsing."""
    total = str(rows_total) if rows_total is not None else "unknown"
    rate = f"{rows_per_second:.1f}" if rows_per_second is not None else "unknown"
    line = f"progress: rows_done={rows_done} rows_total={total} rows_per_second={rate}"
    failed = [f"{name}:{count}" for name, count in checks or () if count]
    if failed:
        line += f" failed_checks={','.join(failed)}"
    if phase:
        line += f" phase={' '.join(phase.split())}"
    return line


def progress_line(progress: Progress) -> str:
    """:func:`format_progress_line` of ``progress``."""
    return format_progress_line(progress.rows_done or 0, progress.rows_total,
                                progress.rows_per_second, progress.checks, progress.phase)


def parse_progress_line(log_text: str) -> Progress | None:
    """The newest progress line in ``log_text`` (marked or not) as a :class:`Progress`,
    or None."""
    last = None
    for last in _PROGRESS.finditer(log_text):
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
                    checks=checks or None, phase=last.group(5) or None)


def format_resources_line(notice: str) -> str:
    """``resources: waiting for 1 GPU (L4) for engine: ...``: the line the cluster
    entrypoint prints when Ray can't place the run's workers (and when it can again)."""
    return "resources: " + " ".join(notice.split())


def parse_resources_line(log_text: str) -> str | None:
    """What the newest resources line says the job waits for; None when there is none
    or the newest says the workers were placed after all."""
    last = None
    for last in _RESOURCES.finditer(log_text):
        pass
    if last is None or not last.group(1).startswith(_WAITING):
        return None
    return last.group(1)


# --- writing: the cluster entrypoint ------------------------------------------------


class JobLogWriter(RunObserver):
    """Prints the toolkit's lines into the job's log (the entrypoint's stdout and
    stderr, which Ray records together), each marked, one write per line so lines
    from the progress thread never interleave with the main thread's.

    As the run's :class:`~toolkit.run.progress.observer.RunObserver` it prints a
    progress line every :data:`LOG_INTERVAL_S` (rows/s over :data:`RATE_WINDOW_S`), the
    phase, and what Ray can't place (``resources:``, read back by ``toolkit status``).

    Attributes:
        phase_now: The newest phase told (the progress thread puts it in its lines).
    """

    progress_interval_s = LOG_INTERVAL_S
    progress_window_s = RATE_WINDOW_S

    def __init__(self, out: TextIO | None = None, err: TextIO | None = None) -> None:
        self._out = out
        self._err = err
        self._lock = threading.Lock()
        self.phase_now: str | None = None

    def write(self, kind: str, text: str, *, error: bool = False) -> None:
        """``text`` as lines of ``kind`` (each line of a multi-line text marked)."""
        stream = (self._err or sys.stderr) if error else (self._out or sys.stdout)
        lines = text.splitlines() or [""]
        with self._lock:
            stream.write("".join(toolkit_line(kind, line) + "\n" for line in lines))
            stream.flush()

    # -- as the run's observer ------------------------------------------------------------

    def connected(self, connection: "RayConnection") -> None:
        """The Ray Dashboard's URL, unmarked (a link for the job's whole log); the
        output's place is the cluster's own here, so no warning about it."""
        if connection.dashboard_url:
            with self._lock:
                stream = self._out or sys.stdout
                stream.write(f"Ray Dashboard: {connection.dashboard_url}\n")
                stream.flush()

    def phase(self, text: str) -> None:
        """What the run does before its first row (``starting``, ``reading the input``,
        ``loading the model``)."""
        self.phase_now = text
        self.write("phase", text)

    def progress(self, progress: "Progress | str") -> None:
        """A progress line: of a :class:`Progress`, or a :func:`format_progress_line`."""
        line = progress if isinstance(progress, str) else progress_line(progress)
        self.write("progress", line.removeprefix("progress: "))

    def notice(self, text: str) -> None:
        """What Ray can't place (or placed after all), and what else the run must say."""
        self.resources(text)

    def cluster_lost(self, error: "ToolkitError") -> None:
        self.error(error.message, error.hint)

    # -- the other lines -------------------------------------------------------------------

    def resources(self, notice: str) -> None:
        self.write("resources", format_resources_line(notice).removeprefix("resources: "))

    def warning(self, text: str) -> None:
        self.write("warning", text)

    def error(self, message: str, hint: str | None = None) -> None:
        self.write("error", message, error=True)
        if hint:
            self.write("hint", hint, error=True)

    def summary(self, text: str) -> None:
        """The run's summary (:func:`~toolkit.run.output.summary_text.format_summary`)."""
        self.write("summary", text)


def report_progress(output: str, rows_total: int | None | Callable[[], int | None], *,
                    interval_s: float = LOG_INTERVAL_S,
                    emit: Callable[[str], None] | None = None,
                    phase: Callable[[], str | None] | None = None,
                    clock: Callable[[], float] = time.monotonic) -> Callable[[], None]:
    """Print a progress line for the run directory ``output`` at once and then every
    ``interval_s``, from a daemon thread (the cluster entrypoint's fallback for
    watchers that can't read the output; the first line gives them the total before
    any row is written). Rows/s is over the last :data:`RATE_WINDOW_S`.

    Args:
        rows_total: Rows expected, or a function computing it in the thread
            (:func:`~toolkit.run.progress.sources.expected_rows`).
        emit: Prints a :func:`format_progress_line` (default: to stdout, marked).
        phase: What the run does now; its lines carry it until the first row comes.

    Returns:
        ``stop()``, which ends the thread.
    """
    emit = emit or (lambda line: print(MARKER + line, flush=True))
    reporter = ProgressReporter(WrittenRows(output), total=rows_total, clock=clock,
                                window_s=RATE_WINDOW_S)

    def look() -> None:
        if phase is not None:
            reporter.phase = phase()
        emit(progress_line(reporter.poll()))

    return polling(look, interval_s, join_timeout_s=5.0)



# --- reading: a followed job ---------------------------------------------------------


class LogFilter:
    """Reads a followed job's log as it grows and keeps what a user needs from it.

    :meth:`feed` takes each new chunk and returns the lines to show: warnings,
    errors and hints, what the run waits for, the summary, and (once each) a
    warning in our words for the Ray events a user must hear about
    (:data:`~toolkit.run.progress.display.LOG_SIGNS`: a worker killed for memory, one that
    died). Phase and progress lines are not shown but kept: :attr:`phase` and
    :attr:`progress` feed the follower's progress line. Everything else (Ray Data's
    operator blocks, worker output) is left out; the newest of those lines stay in
    :attr:`tail`, shown when a job fails without saying why in a line of its own.
    """

    def __init__(self, tail_lines: int = 20) -> None:
        self._partial = ""
        self._said: set[str] = set()
        #: What the run does before its first row, per its newest phase or progress
        #: line; None once a progress line says rows have come.
        self.phase: str | None = None
        #: The newest progress line, read.
        self.progress: Progress | None = None
        #: The job printed an error line of its own.
        self.saw_error = False
        #: The run printed its summary: it has written its last row.
        self.finished = False
        #: The newest lines that are not the toolkit's.
        self.tail: deque[str] = deque(maxlen=tail_lines)

    def feed(self, text: str) -> list[ToolkitLine]:
        """The lines to show from ``text``, the log's next chunk (a line cut at the
        chunk's end waits for the rest)."""
        lines = (self._partial + text).split("\n")
        self._partial = lines.pop()
        return [shown for line in lines for shown in self._read(line)]

    def end(self) -> list[ToolkitLine]:
        """The lines to show from the log's last line, when it had no newline."""
        rest, self._partial = self._partial, ""
        return self._read(rest) if rest.strip() else []

    def last_words(self) -> list[ToolkitLine]:
        """For a job that FAILED without an error line of its own (Ray could not set
        up its environment, the interpreter died): the end of its log, unfiltered."""
        if self.saw_error or not self.tail:
            return []
        return [ToolkitLine("log", line) for line in self.tail]

    def _read(self, line: str) -> list[ToolkitLine]:
        found = parse_toolkit_line(line)
        if found is None:
            self.tail.append(line.rstrip())
            return self._signs(line)
        if found.kind == "phase":
            self.phase = found.text
            return []
        if found.kind == "progress":
            progress = parse_progress_line("progress: " + found.text)
            if progress is not None:
                self.progress = progress
                self.phase = progress.phase
            return []
        if found.kind == "error":
            self.saw_error = True
        elif found.kind == "summary":
            self.finished = True
        return [found]

    def _signs(self, line: str) -> list[ToolkitLine]:
        said = []
        for pattern, notice in LOG_SIGNS:
            if notice not in self._said and pattern.search(line):
                self._said.add(notice)
                said.append(ToolkitLine("warning", notice))
        return said
