"""A run's progress as the user sees it: rows done of total, rows/s, ETA, error rows.

Where the figures come from: the run directory's result files, polled from the
driver. They are what the summary counts at the end, so progress and summary can
never disagree, and reading them costs little: a Parquet file's footer holds its
row count and, in the ``error`` column's statistics, its null count, so a file is
counted without reading its data, once (counts are cached by file size and mtime).
Nothing runs in Ray's workers and nothing reads Ray's internals.

The other candidate, counting rows in our postprocess stage, would need an actor
(a whole extra worker process) for the counts to reach the driver, and would be no
finer: postprocess sees a block only once the engine has finished all of it, and
the block's file is written by the same task a moment later. Either way progress
moves a block at a time (``--partitions`` makes blocks smaller).

:class:`ProgressReporter` turns counts into :class:`Progress` with an injected
clock; :func:`format_progress` renders it (a live bar or a plain line) and
:class:`ProgressDisplay` keeps that line on a terminal; :func:`reporting` polls in
a background thread. :class:`LogWatcher` spots, in the run's log, the Ray messages
a user must hear about (out of memory, a worker that died) and says them in our
words.

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
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol, TextIO

from toolkit.run.input_data import HF_PREFIX, input_format
from toolkit.run.run_directory import RESULT_FILE_PREFIX, RunDirectory
from toolkit.spec.models import SAMPLE_PREFIX, JobSpec
from toolkit.spec.row_contract import ERROR_COLUMN

if TYPE_CHECKING:
    import pyarrow.parquet as pq

#: Seconds between progress lines when stderr is not a terminal (CI logs, pipes);
#: the environment variable of this name overrides it (tests use a short one).
PLAIN_INTERVAL_ENV = "TOOLKIT_PROGRESS_INTERVAL"
PLAIN_INTERVAL_S = 10.0
#: Seconds between redraws of the live bar on a terminal.
LIVE_INTERVAL_S = 1.0

Clock = Callable[[], float]


@dataclass(frozen=True)
class Progress:
    """One look at a run.

    Attributes:
        rows_done: Rows in the output, with a result or an error (a resumed run's
            earlier rows included).
        rows_total: Rows the run will write, where known in advance.
        error_rows: Rows written with an error so far.
        elapsed_s: Seconds since the run started.
        rows_per_s: Rows this run wrote per second of its elapsed time.
        eta_s: Seconds left at that rate, where the total is known and rows came.
        finished: The run wrote its last row.
    """

    rows_done: int
    rows_total: int | None
    error_rows: int
    elapsed_s: float
    rows_per_s: float
    eta_s: float | None
    finished: bool = False


class RowCounter(Protocol):
    def __call__(self) -> tuple[int, int]:
        """(rows, error rows) written so far."""
        ...


class WrittenRows:
    """Counts rows and error rows in a run directory's result files.

    A file still being written (no Parquet footer yet) is skipped until it is
    complete; a CSV/JSON file is recounted while it grows.
    """

    def __init__(self, run_dir: RunDirectory, file_format: str) -> None:
        self.run_dir = run_dir
        self.file_format = file_format
        self._counted: dict[str, tuple[tuple[int, int], tuple[int, int]]] = {}

    def __call__(self) -> tuple[int, int]:
        import pyarrow.fs

        manifest = self.run_dir.read_manifest()
        if manifest is None:  # not written yet, or being rewritten right now
            return self._totals(set(self._counted))
        selector = pyarrow.fs.FileSelector(self.run_dir.root, allow_not_found=True)
        present = set()
        for info in self.run_dir.fs.get_file_info(selector):
            name = info.base_name
            if (info.type != pyarrow.fs.FileType.File or not name.startswith(RESULT_FILE_PREFIX)
                    or not manifest.owns(name)):
                continue
            present.add(info.path)
            stamp = (info.size or 0, info.mtime_ns or 0)
            known = self._counted.get(info.path)
            if known is not None and known[0] == stamp:
                continue
            counts = self._count_file(info.path)
            if counts is not None:
                self._counted[info.path] = (stamp, counts)
        return self._totals(present)

    def _totals(self, paths: set[str]) -> tuple[int, int]:
        counts = [self._counted[p][1] for p in paths if p in self._counted]
        return sum(c[0] for c in counts), sum(c[1] for c in counts)

    def _count_file(self, path: str) -> tuple[int, int] | None:
        try:
            with self.run_dir.fs.open_input_file(path) as stream:
                if self.file_format == "parquet":
                    import pyarrow.parquet as pq

                    return _parquet_counts(pq.ParquetFile(stream))
                table = _read_text_table(stream, self.file_format)
        except Exception:  # noqa: BLE001 - a file mid-write; counted on a later poll
            return None
        errors = table.column(ERROR_COLUMN).null_count if ERROR_COLUMN in table.column_names \
            else table.num_rows
        return table.num_rows, table.num_rows - errors


def _parquet_counts(file: "pq.ParquetFile") -> tuple[int, int]:
    """(rows, error rows) from the footer: row count and the error column's null count."""
    meta = file.metadata
    paths = [meta.schema.column(i).path for i in range(meta.num_columns)]
    if ERROR_COLUMN not in paths:
        return meta.num_rows, 0
    column = paths.index(ERROR_COLUMN)
    nulls = 0
    for group in range(meta.num_row_groups):
        stats = meta.row_group(group).column(column).statistics
        if stats is None or not stats.has_null_count:  # a writer without statistics
            errors = file.read(columns=[ERROR_COLUMN]).column(0)
            return meta.num_rows, len(errors) - errors.null_count
        nulls += stats.null_count
    return meta.num_rows, meta.num_rows - nulls


def _read_text_table(stream: object, file_format: str) -> object:
    if file_format == "csv":
        import pyarrow.csv as pacsv

        return pacsv.read_csv(stream, convert_options=pacsv.ConvertOptions(
            include_columns=[ERROR_COLUMN], strings_can_be_null=True))
    import pyarrow.json as pajson

    return pajson.read_json(stream)


def expected_rows(spec: JobSpec) -> int | None:
    """Rows the run will write, where that is known before it runs: ``data.rows``,
    or a Parquet input's row count (from its footers). None otherwise (CSV/JSON
    inputs, streamed datasets, samples without ``--rows``). An OpenAI batch file's
    requests are counted once it is staged (before Ray starts)."""
    data = spec.data
    if data.format == "openai-batch":
        from toolkit.run.openai_batch import staged_request_count

        return staged_request_count(RunDirectory(data.output))
    if data.rows is not None:
        return data.rows
    if data.input.startswith((SAMPLE_PREFIX, HF_PREFIX)):
        return None
    try:
        if input_format(data) != "parquet":
            return None
        import pyarrow.dataset as pads

        source = data.input if "://" in data.input else os.path.expanduser(data.input)
        return int(pads.dataset(source, format="parquet").count_rows())
    except Exception:  # noqa: BLE001 - unknown is fine: the bar shows "?"
        return None


class ProgressReporter:
    """Turns written-row counts into :class:`Progress`; time comes from ``clock``."""

    def __init__(
        self,
        count_rows: RowCounter,
        total: int | None | Callable[[], int | None] = None,
        clock: Clock = time.monotonic,
    ) -> None:
        """
        Args:
            count_rows: (rows, error rows) written so far, e.g. :class:`WrittenRows`.
            total: Rows expected, or a function computing it on the first poll
                (it may read Parquet footers, so it runs in the polling thread).
            clock: Monotonic seconds; the run's elapsed time starts at construction.
        """
        self._count_rows = count_rows
        self._total = total
        self._clock = clock
        self._started = clock()
        self._rows_before: int | None = None

    def poll(self, finished: bool = False) -> Progress:
        """Count now. ``finished``: the run completed, so what is written is the total."""
        if callable(self._total):
            self._total = self._total()
        done, errors = self._count_rows()
        if self._rows_before is None:  # a resumed run starts with rows already written
            self._rows_before = done
        elapsed = max(0.0, self._clock() - self._started)
        rate = (done - self._rows_before) / elapsed if elapsed > 0 else 0.0
        total = self._total
        if finished:
            total = done  # every row read is written once, with its result or an error
        elif total is not None and done > total:
            total = None  # more than expected: the estimate was wrong, not the files
        eta = None
        if finished:
            eta = 0.0
        elif total is not None and rate > 0:
            eta = (total - done) / rate
        return Progress(rows_done=done, rows_total=total, error_rows=errors,
                        elapsed_s=elapsed, rows_per_s=rate, eta_s=eta, finished=finished)


# -- rendering -----------------------------------------------------------------------

def format_duration(seconds: float) -> str:
    """``42s``, ``3m 05s``, ``2h 07m``."""
    seconds = max(0, int(round(seconds)))
    if seconds < 60:
        return f"{seconds}s"
    if seconds < 3600:
        return f"{seconds // 60}m {seconds % 60:02d}s"
    return f"{seconds // 3600}h {seconds % 3600 // 60:02d}m"


def format_progress(progress: Progress, interactive: bool, width: int = 80) -> str:
    """The progress line: a live bar for a terminal, a plain sentence otherwise.

    Examples:
        ``[#########-----------]  150/300 rows  50%  12.3 rows/s  ETA 12s  0 errors  0:21``
        ``Progress: 150/300 rows (50%), 12.3 rows/s, ETA 12s, 0 errors, 21s elapsed``
    """
    p = progress
    total = f"{p.rows_total:,}" if p.rows_total is not None else "?"
    fraction = (p.rows_done / p.rows_total if p.rows_total else
                1.0 if p.rows_total == 0 else None)
    percent = f"{100 * fraction:.0f}%" if fraction is not None else None
    eta = None
    if not p.finished and p.rows_total is not None:
        eta = f"ETA {format_duration(p.eta_s)}" if p.eta_s is not None else "ETA ?"
    errors = f"{p.error_rows:,} error{'' if p.error_rows == 1 else 's'}"
    rate = f"{p.rows_per_s:,.1f} rows/s"
    if not interactive:
        parts = [f"{p.rows_done:,}/{total} rows" + (f" ({percent})" if percent else ""),
                 rate, *([eta] if eta else []), errors,
                 f"{format_duration(p.elapsed_s)} elapsed"]
        return ("Done: " if p.finished else "Progress: ") + ", ".join(parts)
    minutes, secs = divmod(int(p.elapsed_s), 60)
    clock = f"{minutes // 60}:{minutes % 60:02d}:{secs:02d}" if minutes >= 60 else \
        f"{minutes}:{secs:02d}"
    parts = [f"{p.rows_done:,}/{total} rows", *([percent] if percent else []), rate,
             *([eta] if eta else []), errors, clock]
    text = "  ".join(parts)
    bar_width = min(30, width - len(text) - 4)
    if bar_width >= 10:
        filled = int(bar_width * fraction) if fraction is not None else 0
        bar = "#" * filled + "-" * (bar_width - filled) if fraction is not None \
            else "?" * bar_width
        text = f"[{bar}]  {text}"
    return text[:max(10, width - 1)]


class ProgressDisplay:
    """Keeps one progress line on ``stream`` and prints messages above it.

    On a terminal (``interactive``) the line is redrawn in place with ``\\r``; else
    each update is its own line, at most one per ``plain_interval_s``, plus the last.
    Safe to call from the polling thread and the main thread.
    """

    def __init__(
        self,
        stream: TextIO,
        interactive: bool,
        plain_interval_s: float = PLAIN_INTERVAL_S,
        width: Callable[[], int] | None = None,
        clock: Clock = time.monotonic,
    ) -> None:
        self.stream = stream
        self.interactive = interactive
        self.plain_interval_s = plain_interval_s
        self._width = width or (lambda: _terminal_width(stream))
        self._clock = clock
        self._lock = threading.Lock()
        self._live = False  # a live line is drawn and not yet ended
        self._last_plain: float | None = None

    def show(self, progress: Progress) -> None:
        with self._lock:
            if self.interactive:
                line = format_progress(progress, interactive=True, width=self._width())
                self.stream.write("\r" + line + "\x1b[K")
                self._live = True
                if progress.finished:
                    self.stream.write("\n")
                    self._live = False
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
        with self._lock:
            if self._live:
                self.stream.write("\r\x1b[K")
            self.stream.write(text + "\n")
            self._live = False
            self.stream.flush()

    def close(self) -> None:
        """End a live line that was left mid-run (a failure, Ctrl-C)."""
        with self._lock:
            if self._live:
                self.stream.write("\n")
                self.stream.flush()
                self._live = False


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
    stop = threading.Event()

    def look(finished: bool = False) -> None:
        if log is not None and on_notice is not None:
            for notice in log.new_notices():
                on_notice(notice)
        on_progress(reporter.poll(finished=finished))

    def loop() -> None:
        while True:
            try:
                look()
            except Exception:  # noqa: BLE001 - progress must never break a run
                pass
            if stop.wait(interval_s):
                return

    thread = threading.Thread(target=loop, name="toolkit-progress", daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join(timeout=30)
    try:
        look(finished=True)
    except Exception:  # noqa: BLE001 - the run succeeded; its summary counts the rows
        pass
