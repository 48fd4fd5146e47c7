"""The one progress model: rows done of total, error rows, rows/s, ETA, elapsed time.

A run (:mod:`toolkit.run.driver`) and a watched cluster job
(:mod:`toolkit.run.progress.watched_job`) both describe themselves with
:class:`Progress`; the displays sit on top of it (the local bar/plain line in
:mod:`toolkit.run.progress.display`, ``toolkit status``/``--follow`` via
:meth:`Progress.describe`, the entrypoint's ``progress:`` log lines). Where the
figures are read from (result files, the job's log, a finished summary) is in
:mod:`toolkit.run.progress.sources` and :mod:`toolkit.run.progress.watched_job`.

:class:`ProgressReporter` turns row counts into :class:`Progress` on an injected
clock, with rows/s from a :class:`RateWindow`; :func:`polling` calls a look in a
background thread at an injected interval. Nothing here reads a file or imports
Ray or pyarrow.

Example:
    >>> reporter = ProgressReporter(lambda: (250, 0), total=1000)
    >>> reporter.poll().rows_done
    250
"""

from __future__ import annotations

import math
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal, Protocol

Clock = Callable[[], float]

#: Where a :class:`Progress` was read: the run directory's result files, the job's
#: own ``progress:`` log lines, or a finished run's ``_summary.json``.
ProgressSource = Literal["output", "log", "summary"]


@dataclass(frozen=True)
class Progress:
    """One look at a run or a job; ``None`` where a figure is unknown.

    Attributes:
        rows_done: Rows in the output, with a result or an error (a resumed run's
            earlier rows included).
        rows_total: Rows the run will write, where known in advance.
        rows_per_second: Rows written per second (over the run so far, or over
            recent time where the reader says so).
        eta_seconds: Seconds left at that rate, where the total is known and rows came.
        source: Where it was read: ``"output"``, ``"log"`` or ``"summary"``.
        error_rows: Rows written with an error so far.
        elapsed_seconds: Seconds since the run (or job) started.
        finished: The run wrote its last row.
        phase: What the run is doing while no row has come yet (``starting Ray``,
            ``reading the input``, ``loading the model``); None once rows come.
        checks: Rows that failed each check so far, by name (generate jobs).
        answered_by: A cascade's rows so far by the model that answered them.
        nodes: What the cluster's nodes did that the run must say (``1 node taken
            back (preemption)``); None when nothing.
    """

    rows_done: int | None = None
    rows_total: int | None = None
    rows_per_second: float | None = None
    eta_seconds: float | None = None
    source: ProgressSource | None = None
    error_rows: int | None = None
    elapsed_seconds: float | None = None
    finished: bool = False
    phase: str | None = None
    checks: tuple[tuple[str, int], ...] | None = None
    answered_by: tuple[tuple[str, int], ...] | None = None
    nodes: str | None = None

    def as_json(self) -> dict[str, Any]:
        """The ``progress`` object of ``toolkit status --output json``."""
        return {
            "rows_done": self.rows_done,
            "rows_total": self.rows_total,
            "rows_per_second": self.rows_per_second,
            "eta_seconds": self.eta_seconds,
            "source": self.source,
            "checks": dict(self.checks or ()),
            **({"answered_by": dict(self.answered_by)} if self.answered_by else {}),
        }

    def describe(self) -> str:
        """``4,500 / 20,000 rows (22%), 75.2 rows/s, ETA 3m 26s`` (``toolkit status``)."""
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
        failed = checks_text(self.checks, self.rows_done)
        if failed:
            parts.append(f"failed checks: {failed}")
        answered = answered_text(self.answered_by)
        if answered:
            parts.append(f"answered by {answered}")
        if self.nodes:
            parts.append(self.nodes)
        return ", ".join(parts)


def format_duration(seconds: float) -> str:
    """``42s``, ``3m 05s``, ``2h 07m``."""
    seconds = max(0, int(round(seconds)))
    if seconds < 60:
        return f"{seconds}s"
    if seconds < 3600:
        return f"{seconds // 60}m {seconds % 60:02d}s"
    return f"{seconds // 3600}h {seconds % 3600 // 60:02d}m"


def rows_per_second(rows: float, seconds: float) -> float | None:
    """``rows`` over ``seconds`` (two decimals); None when no time has passed."""
    return round(rows / seconds, 2) if seconds > 0 else None


def eta_seconds(rows_done: int, rows_total: int | None,
                rows_per_second: float | None) -> float | None:
    """Seconds left at ``rows_per_second``; None without a total or a positive rate."""
    if rows_total is None or not rows_per_second or rows_per_second <= 0:
        return None
    return round(max(0, rows_total - rows_done) / rows_per_second, 1)


class RateWindow:
    """Rows/s over the samples of the last ``window_s`` seconds (all of them when infinite)."""

    def __init__(self, window_s: float = math.inf) -> None:
        self.window_s = window_s
        self._samples: deque[tuple[float, int]] = deque()

    def add(self, when: float, rows: int) -> None:
        self._samples.append((when, rows))
        if math.isinf(self.window_s):  # the first and the newest sample are all it needs
            if len(self._samples) > 2:
                del self._samples[1]
            return
        # Keep one sample at or before the window's start, so the window is full.
        while len(self._samples) > 2 and self._samples[1][0] <= when - self.window_s:
            self._samples.popleft()

    def rate(self) -> float | None:
        if len(self._samples) < 2:
            return None
        (t0, r0), (t1, r1) = self._samples[0], self._samples[-1]
        return rows_per_second(r1 - r0, t1 - t0)


@dataclass(frozen=True)
class RowCounts:
    """Rows written so far, and how many of them failed.

    Attributes:
        rows: Rows written, with a result or an error.
        errors: Rows written with an error.
        failing: Rows that failed: an error or a failed check (the stop-loss's count).
        checks: Rows that failed each check, by check name (a row may fail several).
        answered: A cascade's rows by the model that answered them (``answered_by``).
    """

    rows: int
    errors: int
    failing: int | None = None
    checks: tuple[tuple[str, int], ...] = ()
    answered: tuple[tuple[str, int], ...] = ()

    @property
    def failed_rows(self) -> int:
        return self.errors if self.failing is None else self.failing

    def __add__(self, other: "RowCounts") -> "RowCounts":
        checks = dict(self.checks)
        for name, count in other.checks:
            checks[name] = checks.get(name, 0) + count
        answered = dict(self.answered)
        for model, count in other.answered:
            answered[model] = answered.get(model, 0) + count
        return RowCounts(self.rows + other.rows, self.errors + other.errors,
                         self.failed_rows + other.failed_rows, tuple(sorted(checks.items())),
                         tuple(sorted(answered.items())))


def row_counts(counted: "RowCounts | tuple[int, int]") -> RowCounts:
    """A counter's answer as :class:`RowCounts` (a plain ``(rows, errors)`` pair too)."""
    return counted if isinstance(counted, RowCounts) else RowCounts(*counted)


def answered_text(answered: tuple[tuple[str, int], ...] | None) -> str | None:
    """``tiny-chat-small 23, tiny-chat 17``: a cascade's rows by the model that answered
    them, each model by the last part of its name; None without a cascade."""
    if not answered:
        return None
    return ", ".join(f"{model.rstrip('/').rsplit('/', 1)[-1].removeprefix('sample:')} "
                     f"{count:,}" for model, count in answered)


def checks_text(checks: tuple[tuple[str, int], ...] | None, rows: int | None) -> str | None:
    """``truncated 212 (100%), empty 3 (1%)``: rows failing each check, most first."""
    if not checks or not rows:
        return None
    ranked = sorted((c for c in checks if c[1]), key=lambda c: -c[1])
    return ", ".join(f"{name} {count:,} ({100 * count / rows:.0f}%)" for name, count in ranked) \
        or None


class RowCounter(Protocol):
    def __call__(self) -> "RowCounts | tuple[int, int]":
        """Rows written so far: :class:`RowCounts`, or (rows, error rows)."""
        ...


class ProgressReporter:
    """Turns written-row counts into :class:`Progress`; time comes from ``clock``."""

    def __init__(
        self,
        count_rows: RowCounter,
        total: int | None | Callable[[], int | None] = None,
        clock: Clock = time.monotonic,
        window_s: float = math.inf,
    ) -> None:
        """
        Args:
            count_rows: (rows, error rows) written so far, e.g.
                :class:`~toolkit.run.progress.sources.WrittenRows`.
            total: Rows expected, or a function computing it (e.g.
                :func:`~toolkit.run.progress.sources.expected_rows`; it may read
                Parquet footers, so it runs in the polling thread), called on each
                poll until it gives a number (an OpenAI batch file's requests are
                known once staged).
            clock: Monotonic seconds; the run's elapsed time starts at construction.
            window_s: Rows/s over this much recent time; by default over the whole
                run (rows this run wrote, so a resumed run's earlier rows don't count).
        """
        self._count_rows = count_rows
        self._find_total = total if callable(total) else None
        self._total = None if callable(total) else total
        self._clock = clock
        self._started = clock()
        self._window = RateWindow(window_s)
        self._first_look = True
        self._rows_at_start: int | None = None
        #: What the run is doing before its first row (set by the run as it goes on);
        #: shown until this run writes a row.
        self.phase: str | None = None
        self._ended: tuple[float, float] | None = None
        #: What the cluster's nodes did, asked on each poll (the driver's node watch).
        self.nodes: Callable[[], str | None] | None = None

    def ended(self, seconds: float, rows_per_second: float) -> None:
        """The run's own duration and rate (its summary's): the finished poll shows
        these, so the last progress line and the summary give one time and one rate."""
        self._ended = (seconds, rows_per_second)

    def poll(self, finished: bool = False) -> Progress:
        """Count now. ``finished``: the run completed, so what is written is the total."""
        if self._total is None and self._find_total is not None:
            self._total = self._find_total()
            if self._total is not None:
                self._find_total = None
        counts = row_counts(self._count_rows())
        done, errors = counts.rows, counts.errors
        now = self._clock()
        if self._first_look:
            # A resumed run starts with rows already written: its rate counts from them.
            self._window.add(self._started, done)
            self._first_look = False
            self._rows_at_start = done
        waiting = not finished and done == self._rows_at_start
        if waiting:  # rows/s counts from the last look before rows came, not Ray's start
            self._window = RateWindow(self._window.window_s)
        self._window.add(now, done)
        rate = self._window.rate() or 0.0  # no time yet: nothing written per second
        total = self._total
        if finished:
            total = done  # every row read is written once, with its result or an error
        elif total is not None and done > total:
            total = None  # more than expected: the estimate was wrong, not the files
        eta = 0.0 if finished else eta_seconds(done, total, rate)
        elapsed = max(0.0, now - self._started)
        if finished and self._ended is not None:
            elapsed, rate = self._ended
        return Progress(rows_done=done, rows_total=total, rows_per_second=rate, eta_seconds=eta,
                        source="output", error_rows=errors,
                        elapsed_seconds=elapsed, finished=finished,
                        phase=self.phase if waiting else None,
                        checks=counts.checks or None, answered_by=counts.answered or None,
                        nodes=self.nodes() if self.nodes is not None else None)


def polling(look: Callable[[], None], interval_s: float, *,
            join_timeout_s: float = 30.0) -> Callable[[], None]:
    """Call ``look`` at once and then every ``interval_s`` seconds in a daemon thread.

    What ``look`` raises is dropped: progress must never break a run. Returns
    ``stop()``, which ends the thread, waiting up to ``join_timeout_s`` for a look
    in progress.
    """
    stopped = threading.Event()

    def loop() -> None:
        while True:
            try:
                look()
            except Exception:  # noqa: BLE001 - progress must never break a run
                pass
            if stopped.wait(interval_s):
                return

    thread = threading.Thread(target=loop, name="toolkit-progress", daemon=True)
    thread.start()

    def stop() -> None:
        stopped.set()
        thread.join(timeout=join_timeout_s)

    return stop
