"""OpenAI Batch API files on disk: stage a request file for a run, write its output file.

**In.** A request file is scanned once on the driver, line by line (Batch API files
are at most 50,000 requests / 200 MB), and staged as Parquet into the run
directory's ``_input/`` (as a ``--rows``-limited input is), so a resumed run reads
the very same rows and Ray Data's checkpoint skips those already written by
``custom_id``. The scan refuses duplicate ``custom_id``s up front, naming them and
their lines (:class:`CustomIds`, which ``toolkit serve`` checks a batch's file with
too); a line that isn't JSON or lacks a ``custom_id`` is staged as a row with
``request_error`` set (keyed :func:`~toolkit.spec.openai_batch.unnamed_row_id`, which
no request's id can clash with), which the job writes as an error row.

**Out.** When the run is complete, :func:`write_batch_output` writes
``<output>/_batch_output.jsonl`` from the result files: one line per request, in
request order, in the Batch API's output format (the line shapes are
:mod:`toolkit.spec.openai_batch`). The run directory owns that file
(``--overwrite`` replaces it; it is never "someone else's file").

Both are this format's steps of a run (:class:`OpenAIBatchFormat`, registered for
``data.format: openai-batch``); the run layer calls them through
:mod:`toolkit.run.run_formats` as it does for every format.
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from toolkit.errors import InputDataError
from toolkit.run.run_directory import STAGED_INPUT_DIR, RunDirectory
from toolkit.run.run_formats import RunFormat, register_format
from toolkit.spec.models import JobSpec
from toolkit.spec.openai_batch import (
    ID_COLUMN,
    LINE_COLUMN,
    REQUEST_COLUMNS,
    batch_output_line,
    parse_request_line,
    unnamed_line,
    unnamed_row_id,
)
from toolkit.spec.row_contract import ERROR_COLUMN

if TYPE_CHECKING:
    import pyarrow as pa

OPENAI_BATCH_FORMAT = "openai-batch"
#: The Batch API output file, in the run directory once the run is complete.
BATCH_OUTPUT_FILE = "_batch_output.jsonl"
#: Rows per staged file (one Ray Data block each) unless data.partitions says.
ROWS_PER_BLOCK = 256
_SHOWN = 5


def request_lines(source: str) -> Iterator[tuple[int, str]]:
    """(line number, text) of the file's non-blank lines, local or a URI.

    Raises:
        InputDataError: the file is missing or can't be read.
    """
    from toolkit.run.input_data import _open_binary

    try:
        stream = _open_binary(source if "://" in source else str(Path(source).expanduser()))
    except FileNotFoundError:
        raise InputDataError(f"data.input: {source} does not exist.",
                             hint="Point --input at an OpenAI Batch API request file "
                             "(JSONL).") from None
    except Exception as exc:  # noqa: BLE001 - unreachable URL, permissions, ...
        raise InputDataError(f"data.input: can't read {source}: {exc}",
                             hint="Check the path or URL (and credentials for s3/gs).") from None
    with stream:
        for number, raw in enumerate(stream, start=1):
            text = raw.decode("utf-8", errors="replace") if isinstance(raw, bytes) else raw
            if number == 1:  # a UTF-8 byte order mark (Windows editors) is no part of line 1
                text = text.removeprefix("\ufeff")
            if text.strip():
                yield number, text.rstrip("\r\n")


class CustomIds:
    """The custom_ids of a request file as it is read: the lines each one is on, kept
    for those on more than one. Rows of lines without a usable custom_id (keyed
    :func:`~toolkit.spec.openai_batch.unnamed_row_id`) repeat no one."""

    def __init__(self) -> None:
        self._first_line: dict[str, int] = {}
        #: custom_id -> every line it is on, the first included (ids on 2+ lines only).
        self.repeated: dict[str, list[int]] = {}

    def add(self, row_id: str, line: int) -> None:
        """Note the row id of ``line`` (1-based)."""
        if unnamed_line(row_id) is not None:
            return
        if row_id in self._first_line:
            self.repeated.setdefault(row_id, [self._first_line[row_id]]).append(line)
        else:
            self._first_line[row_id] = line

    def repeats(self) -> list[tuple[str, int, int]]:
        """(custom_id, the line it is first on, a later line with it), in file order."""
        return sorted(((custom_id, lines[0], later) for custom_id, lines in self.repeated.items()
                       for later in lines[1:]), key=lambda repeat: repeat[2])

    def describe(self) -> str:
        """``2 duplicate custom_id(s): 'a' on lines 1, 3, 6; 'b' on lines 2, 5``."""
        shown = "; ".join(f"{shown_custom_id(cid)} on lines {', '.join(map(str, lines))}"
                          for cid, lines in list(self.repeated.items())[:_SHOWN])
        more = f" and {len(self.repeated) - _SHOWN} more" if len(self.repeated) > _SHOWN else ""
        return f"{len(self.repeated)} duplicate custom_id(s): {shown}{more}"


def shown_custom_id(custom_id: str, limit: int = 64) -> str:
    """A custom_id quoted for a message, cut to ``limit`` characters (ids are the
    user's: a 100 kB one must not make a 100 kB message)."""
    if len(custom_id) <= limit:
        return repr(custom_id)
    return repr(custom_id[:limit]) + "..."


def _count_lines(source: str) -> int:
    return sum(1 for _ in request_lines(source))


def stage_requests(spec: JobSpec, run_dir: RunDirectory) -> str:
    """Scan ``data.input`` once into ``<output>/_input`` (Parquet); return its path.

    The first ``data.rows`` requests (non-blank lines) are staged, in blocks of
    ``ceil(requests / data.partitions)`` rows (default 256), so progress and
    retries move a block at a time. A staged copy that is complete is reused.

    Raises:
        InputDataError: the file is missing, unreadable or empty, or two lines share
            a ``custom_id`` (named, with their line numbers; nothing is run).
    """
    import pyarrow as pa
    import pyarrow.parquet as pq

    data = spec.data
    staged = run_dir.staged_input_path
    if run_dir.staged_input_complete():
        return staged
    run_dir.begin_staged_input()  # recorded in the manifest; a copy cut short is cleared
    block = ROWS_PER_BLOCK
    if data.partitions:
        total = min(_count_lines(data.input), data.rows or math.inf)
        block = max(1, math.ceil(total / data.partitions))
    schema = pa.schema([pa.field(name, pa.type_for_alias(alias))
                        for name, alias in REQUEST_COLUMNS.items()])
    ids = CustomIds()
    rows: list[dict[str, object]] = []
    files = 0

    def flush() -> None:
        nonlocal files, rows
        if rows:
            path = f"{run_dir.root}/{STAGED_INPUT_DIR}/part-{files:05d}.parquet"
            with run_dir.fs.open_output_stream(path) as stream:
                pq.write_table(pa.Table.from_pylist(rows, schema=schema), stream)
            files += 1
            rows = []

    run_dir.fs.create_dir(f"{run_dir.root}/{STAGED_INPUT_DIR}", recursive=True)
    count = 0
    for number, text in request_lines(data.input):
        if data.rows is not None and count >= data.rows:
            break
        # Rows are checkpointed by id: a bad line's must not be a request's (line-1).
        row = parse_request_line(text, number, unnamed_id=unnamed_row_id)
        ids.add(str(row[ID_COLUMN]), number)
        rows.append(row)
        count += 1
        if len(rows) >= block:
            flush()
    flush()
    if ids.repeated:
        run_dir.clear_staged_input()
        raise InputDataError(
            f"data.input: {data.input} has {ids.describe()}. Results are keyed on "
            "custom_id, so each must be unique.",
            hint="Give every request its own custom_id, then run again.",
        )
    if count == 0:
        run_dir.clear_staged_input()
        raise InputDataError(f"data.input: {data.input} holds no requests (no non-blank line).",
                             hint="Point --input at an OpenAI Batch API request file (JSONL).")
    run_dir.mark_staged_input_complete()
    return staged



def staged_request_count(run_dir: RunDirectory) -> int | None:
    """Requests staged for the run (from the Parquet footers), or None before staging."""
    import pyarrow.dataset as pads

    if not run_dir.staged_input_complete():
        return None
    try:
        return int(pads.dataset(f"{run_dir.root}/{STAGED_INPUT_DIR}", filesystem=run_dir.fs,
                                format="parquet").count_rows())
    except Exception:  # noqa: BLE001 - unknown is fine: progress shows "?"
        return None


def read_staged_requests(run_dir: RunDirectory) -> "Any":
    """The staged requests as a Ray Dataset with one block per staged file.

    ``read_parquet`` would merge small files into one block, so nothing would be
    written (or checkpointed) until every request was answered; a datasource whose
    read tasks yield a block per file keeps results streaming out block by block.
    """
    import ray.data
    from ray.data.block import BlockMetadata
    from ray.data.datasource import Datasource, ReadTask

    import pyarrow.fs

    selector = pyarrow.fs.FileSelector(f"{run_dir.root}/{STAGED_INPUT_DIR}")
    files = sorted(info.path for info in run_dir.fs.get_file_info(selector)
                   if info.base_name.endswith(".parquet"))
    filesystem = run_dir.fs

    def read(group: list[str]) -> list["pa.Table"]:
        import pyarrow.parquet as pq

        return [pq.read_table(file, filesystem=filesystem) for file in group]

    class StagedRequests(Datasource):
        def get_name(self) -> str:
            return "OpenAIBatchRequests"

        def estimate_inmemory_data_size(self) -> int | None:
            return None

        def get_read_tasks(self, parallelism: int, per_task_row_limit: int | None = None,
                           data_context: Any = None) -> list[ReadTask]:
            tasks = max(1, min(parallelism, len(files)))
            groups = [files[i::tasks] for i in range(tasks)]
            return [ReadTask(lambda group=group: read(group),
                             BlockMetadata(num_rows=None, size_bytes=None, exec_stats=None,
                                           input_files=group),
                             per_task_row_limit=per_task_row_limit)
                    for group in groups if group]

    return ray.data.read_datasource(StagedRequests())


def _rows_in_order(run_dir: RunDirectory, file_format: str,
                   complete_files_only: bool = False) -> "pa.Table":
    import pyarrow as pa
    import pyarrow.dataset as pads

    wanted = [ID_COLUMN, LINE_COLUMN, "content", "finish_reason", "num_input_tokens",
              "num_generated_tokens", ERROR_COLUMN]
    if complete_files_only:
        # A run stopped part-way (Ctrl-C, a kill) can leave a file without its footer.
        tables = []
        for path in run_dir.result_files():
            try:
                dataset = pads.dataset(path, filesystem=run_dir.fs, format=file_format)
                tables.append(dataset.to_table(
                    columns=[c for c in wanted if c in dataset.schema.names]))
            except (OSError, pa.ArrowInvalid):
                continue
        if not tables:
            return pa.table({ID_COLUMN: pa.array([], pa.string())})
        table = pa.concat_tables(tables, promote_options="default")
    else:
        dataset = run_dir.open_results(file_format)
        table = dataset.to_table(columns=[c for c in wanted if c in dataset.schema.names])
    return table.sort_by(LINE_COLUMN) if LINE_COLUMN in table.column_names else table


def batch_output_lines(run_dir: RunDirectory, file_format: str, model: str, created: int,
                       complete_files_only: bool = False,
                       name_unnamed: bool = True) -> Iterator[dict[str, Any]]:
    """The Batch API output lines of the rows written so far, in request order.

    Args:
        complete_files_only: Pass over result files that can't be read (a run that
            was stopped part-way, whose last file has no footer) instead of failing.
        name_unnamed: Show a line without a usable custom_id as ``line-N`` (else
            ``null``): see :func:`~toolkit.spec.openai_batch.batch_output_line`.
    """
    table = _rows_in_order(run_dir, file_format, complete_files_only)
    for batch in table.to_batches(max_chunksize=1024):
        for row in batch.to_pylist():
            yield batch_output_line(
                custom_id=row[ID_COLUMN], content=row.get("content"),
                finish_reason=row.get("finish_reason"),
                prompt_tokens=row.get("num_input_tokens"),
                completion_tokens=row.get("num_generated_tokens"),
                error=row.get(ERROR_COLUMN), model=model, created=created,
                name_unnamed=name_unnamed,
            )


def write_batch_output(run_dir: RunDirectory, spec: JobSpec, clock=time.time) -> str:
    """Write ``_batch_output.jsonl`` from the run's result files; return a note naming it.

    One line per written row (every request: answered or with its error), ordered
    by the request file's line numbers.
    """
    lines = 0
    path = f"{run_dir.root}/{BATCH_OUTPUT_FILE}"
    run_dir.claim(BATCH_OUTPUT_FILE)
    with run_dir.fs.open_output_stream(path) as stream:
        chunk: list[str] = []
        for line in batch_output_lines(run_dir, spec.data.output_format, spec.engine.model,
                                       int(clock())):
            chunk.append(json.dumps(line, ensure_ascii=False))
            if len(chunk) >= 1024:
                stream.write(("\n".join(chunk) + "\n").encode("utf-8"))
                lines += len(chunk)
                chunk = []
        if chunk:
            stream.write(("\n".join(chunk) + "\n").encode("utf-8"))
            lines += len(chunk)
    shown = f"{spec.data.output.rstrip('/')}/{BATCH_OUTPUT_FILE}"
    return (f"Batch API output: {shown} ({lines:,} lines, one per "
            "request, matched by custom_id).")


class OpenAIBatchFormat(RunFormat):
    """An OpenAI Batch API request file in, the Batch API output file out."""

    files = (BATCH_OUTPUT_FILE,)
    stages_rows = True

    def stage(self, spec: JobSpec, run_dir: RunDirectory) -> None:
        stage_requests(spec, run_dir)

    def open(self, spec: JobSpec, run_dir: RunDirectory) -> "Any":
        # Scanned and staged once: ids checked, bad lines kept as error rows.
        stage_requests(spec, run_dir)
        return read_staged_requests(run_dir)

    def staged_rows(self, run_dir: RunDirectory) -> int | None:
        return staged_request_count(run_dir)

    def finish(self, spec: JobSpec, run_dir: RunDirectory) -> str | None:
        return write_batch_output(run_dir, spec)


register_format(OPENAI_BATCH_FORMAT, OpenAIBatchFormat())
