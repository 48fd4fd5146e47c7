"""Where progress figures come from: the rows a run directory holds, and the rows expected.

Rows done are counted in the run directory's result files, polled from outside the
workers. They are what the summary counts at the end, so progress and summary can
never disagree, and reading them costs little: a Parquet file's footer holds its
row count and, in the ``error`` column's statistics, its null count, so a file is
counted without reading its data, once (counts are cached by file size and mtime).
Nothing runs in Ray's workers and nothing reads Ray's internals.

The other candidate, counting rows in our postprocess stage, would need an actor
(a whole extra worker process) for the counts to reach the driver, and would be no
finer: postprocess sees a block only once the engine has finished all of it, and
the block's file is written by the same task a moment later. Either way progress
moves a block at a time (``--partitions`` makes blocks smaller).

:class:`WrittenRows` counts for a run that knows its plan (a local run, the
cluster entrypoint); :class:`OutputRows` reads a run directory by its location
alone (a watcher: the manifest gives the format and the spec). Both take the
total from :func:`expected_rows`, the one function that knows it.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from toolkit.run.input.file_access import HF_PREFIX, input_format
from toolkit.run.input.formats import run_format
from toolkit.run.output.run_directory import RESULT_FILE_PREFIX, RunDirectory
from toolkit.run.progress.model import Progress, RowCounts
from toolkit.spec.cascade import ANSWERED_BY_COLUMN
from toolkit.spec.models import DataConfig
from toolkit.spec.row_contract import ERROR_COLUMN, FAILED_CHECKS_COLUMN
from toolkit.spec.run_settings import RunData
from toolkit.spec.sample_sources import sample_name

if TYPE_CHECKING:
    import pyarrow as pa
    import pyarrow.parquet as pq


def expected_rows(
    run: RunData | Mapping[str, Any],
    sample_rows: Mapping[str, int] | None = None,
    *,
    run_dir: RunDirectory | None = None,
    inputs_here: bool = True,
) -> int | None:
    """Rows a run will write, where that is known before it writes them; else None.

    In order: an OpenAI batch file's staged requests (known once staged, before the
    model runs); ``data.rows``; a ``sample:NAME`` input's default rows
    (``sample_rows[NAME]``); a Parquet input's row count (from its footers). CSV and
    JSON inputs (a full read) and streamed datasets are unknown.

    Args:
        run: The run's plan (or a spec), or the JSON form of its spec (a run
            directory's manifest, as a watcher reads it).
        sample_rows: Default rows of each ``sample:`` input, by name (the sample
            provider's ``default_rows``); the run layer doesn't know samples itself.
        run_dir: Where the batch file is staged (default: ``data.output``).
        inputs_here: Whether a relative ``data.input`` names the input here. A
            watcher elsewhere passes False: on a cluster a relative path is relative
            to the job's working directory, so only URIs and absolute paths are read.
    """
    data = _data_config(run)
    if data is None:
        return None
    behaviour = run_format(data)
    if behaviour.stages_rows:
        try:
            return behaviour.staged_rows(run_dir or RunDirectory(data.output))
        except Exception:  # noqa: BLE001 - unknown is fine: progress shows "?"
            return None
    if data.rows is not None:
        return data.rows
    name = sample_name(data.input)
    if name is not None:
        return (sample_rows or {}).get(name)
    if data.input.startswith(HF_PREFIX):
        return None
    source = data.input if "://" in data.input else os.path.expanduser(data.input)
    if not inputs_here and "://" not in source and not os.path.isabs(source):
        return None
    try:
        if input_format(data) != "parquet":
            return None
        import pyarrow.dataset as pads

        return int(pads.dataset(source, format="parquet").count_rows())
    except Exception:  # noqa: BLE001 - unknown is fine: the bar shows "?"
        return None


def _data_config(run: RunData | Mapping[str, Any]) -> DataConfig | None:
    """The run's ``data`` section; from a manifest's JSON, the fields this version knows."""
    if not isinstance(run, Mapping):
        return run.data
    data = run.get("data")
    if not isinstance(data, Mapping):
        return None
    try:
        return DataConfig.model_validate(
            {key: value for key, value in data.items() if key in DataConfig.model_fields})
    except ValueError:  # a manifest this version can't read: unknown
        return None


class WrittenRows:
    """Counts rows, error rows and failed checks in a run directory's result files.

    A file still being written (no Parquet footer yet) is skipped until it is
    complete; a CSV/JSON file is recounted while it grows. Before the run has
    written its manifest the count is what was counted before (0 at first).
    """

    def __init__(self, run_dir: RunDirectory | str, file_format: str | None = None,
                 write_id: str | None = None) -> None:
        """
        Args:
            run_dir: The run directory, or its location (opened on the first count).
            file_format: ``data.output_format``; default: the manifest's.
            write_id: Count only the files of this write (the rows this run wrote).
        """
        self._run_dir = run_dir
        self.file_format = file_format
        self.write_id = write_id
        self._counted: dict[str, tuple[tuple[int, int], RowCounts]] = {}

    @property
    def run_dir(self) -> RunDirectory:
        if isinstance(self._run_dir, str):
            self._run_dir = RunDirectory(self._run_dir)
        return self._run_dir

    def __call__(self) -> RowCounts:
        import pyarrow.fs

        run_dir = self.run_dir
        manifest = run_dir.read_manifest()
        if manifest is None:  # not written yet, or being rewritten right now
            return self._totals(set(self._counted))
        if self.file_format is None:
            self.file_format = (manifest.spec.get("data") or {}).get("output_format", "parquet")
        prefix = f"{RESULT_FILE_PREFIX}{self.write_id}_" if self.write_id else RESULT_FILE_PREFIX
        selector = pyarrow.fs.FileSelector(run_dir.root, allow_not_found=True)
        present = set()
        for info in run_dir.fs.get_file_info(selector):
            name = info.base_name
            if (info.type != pyarrow.fs.FileType.File or not name.startswith(prefix)
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

    #: What no file adds up to (a subclass counting more figures has its own).
    _nothing: RowCounts = RowCounts(0, 0, 0)

    def _totals(self, paths: set[str]) -> RowCounts:
        total = self._nothing
        for path in paths:
            if path in self._counted:
                total = total + self._counted[path][1]
        return total

    def _count_file(self, path: str) -> RowCounts | None:
        try:
            with self.run_dir.fs.open_input_file(path) as stream:
                if self.file_format == "parquet":
                    import pyarrow.parquet as pq

                    return _parquet_counts(pq.ParquetFile(stream))
                table = _read_text_table(stream, self.file_format or "parquet")
        except Exception:  # noqa: BLE001 - a file mid-write; counted on a later poll
            return None
        return table_counts(table)


def table_counts(table: "pa.Table") -> RowCounts:
    """Rows, error rows, failing rows and each check's failures of a result table."""
    import pyarrow.compute as pc

    names = table.column_names
    errors = table.column(ERROR_COLUMN).null_count if ERROR_COLUMN in names else table.num_rows
    error_rows = table.num_rows - errors
    answered: tuple[tuple[str, int], ...] = ()
    if ANSWERED_BY_COLUMN in names:
        answered = tuple(sorted(
            (entry["values"], int(entry["counts"])) for entry in
            pc.value_counts(table.column(ANSWERED_BY_COLUMN).drop_null()).to_pylist()))
    if FAILED_CHECKS_COLUMN not in names:
        return RowCounts(table.num_rows, error_rows, error_rows, (), answered)
    failed = table.column(FAILED_CHECKS_COLUMN)
    bad = pc.is_valid(failed)
    if ERROR_COLUMN in names:
        bad = pc.or_(bad, pc.is_valid(table.column(ERROR_COLUMN)))
    checks: dict[str, int] = {}
    for text in failed.drop_null().to_pylist():
        for name in text.split(","):
            checks[name] = checks.get(name, 0) + 1
    return RowCounts(table.num_rows, error_rows, int(pc.sum(bad).as_py() or 0),
                     tuple(sorted(checks.items())), answered)


def _parquet_counts(file: "pq.ParquetFile") -> RowCounts:
    """Rows and error rows from the footer (row count, the error column's null count);
    a file with failed checks (or a cascade's answered_by) is read for them (a few
    small columns)."""
    meta = file.metadata
    paths = [meta.schema.column(i).path for i in range(meta.num_columns)]
    if FAILED_CHECKS_COLUMN in paths or ANSWERED_BY_COLUMN in paths:
        columns = [c for c in (ERROR_COLUMN, FAILED_CHECKS_COLUMN, ANSWERED_BY_COLUMN)
                   if c in paths]
        return table_counts(file.read(columns=columns))
    if ERROR_COLUMN not in paths:
        return RowCounts(meta.num_rows, 0, 0)
    column = paths.index(ERROR_COLUMN)
    nulls = 0
    for group in range(meta.num_row_groups):
        stats = meta.row_group(group).column(column).statistics
        if stats is None or not stats.has_null_count:  # a writer without statistics
            return table_counts(file.read(columns=[ERROR_COLUMN]))
        nulls += stats.null_count
    return RowCounts(meta.num_rows, meta.num_rows - nulls, meta.num_rows - nulls)


def _read_text_table(stream: object, file_format: str) -> Any:
    if file_format == "csv":
        import pyarrow.csv as pacsv

        return pacsv.read_csv(stream, convert_options=pacsv.ConvertOptions(
            include_columns=[ERROR_COLUMN, FAILED_CHECKS_COLUMN, ANSWERED_BY_COLUMN],
            include_missing_columns=True, strings_can_be_null=True))
    import pyarrow.json as pajson

    return pajson.read_json(stream)


class OutputRows:
    """A run directory's progress read from its location alone (a watcher's view).

    The manifest gives the output format and the spec, so the rows total. Each
    complete result file is counted once (from its Parquet footer) and remembered;
    a file that can't be read yet (still being written) is skipped and tried again.
    """

    def __init__(self, output: str, sample_rows: Mapping[str, int] | None = None,
                 run_dir: RunDirectory | None = None, *, inputs_here: bool = False) -> None:
        """
        Args:
            output: ``data.output`` as readable from here (a URI or an absolute path).
            sample_rows: Default rows of each ``sample:`` input (the rows total).
            run_dir: The run directory already open (tests).
            inputs_here: See :func:`expected_rows` (False: this is not where the job runs).
        """
        self.output = output
        self.sample_rows = dict(sample_rows or {})
        self.inputs_here = inputs_here
        self._counter = WrittenRows(run_dir or output)
        self._total: int | None = None

    def read(self) -> Progress | None:
        """Rows written so far (``source="output"``), or None when there is no readable
        manifest there."""
        try:
            run_dir = self._counter.run_dir
            manifest = run_dir.read_manifest()
            if manifest is None:
                return None
            counts = self._counter()
        except Exception:  # noqa: BLE001 - unreachable storage just means "can't tell from here"
            return None
        if self._total is None:  # until known: a batch file's requests are counted once staged
            self._total = expected_rows(manifest.spec, self.sample_rows, run_dir=run_dir,
                                        inputs_here=self.inputs_here)
        return Progress(rows_done=counts.rows, rows_total=self._total,
                        error_rows=counts.errors, source="output", checks=counts.checks or None,
                        answered_by=counts.answered or None)
