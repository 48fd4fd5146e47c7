"""The Batch API output file of a run, ``<output>/_batch_output.jsonl``: written from
the result files when the run is complete (:func:`write_batch_output`), one line per
request, in request order (:mod:`.output_lines`), or from the staged rows alone when
no request could run. The run directory owns that file (``--overwrite`` replaces it;
it is never "someone else's file")."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from toolkit.run.input.openai_batch.output_lines import batch_output_line
from toolkit.run.input.openai_batch.request_rows import (
    CONTENT_COLUMN,
    EMBEDDING_COLUMN,
    ID_COLUMN,
    INPUT_COUNT_COLUMN,
    INPUT_INDEX_COLUMN,
    LINE_COLUMN,
    MODEL_COLUMN,
    REQUEST_ERROR_COLUMN,
    STATUS_COLUMN,
    TOOL_CALL_COLUMN,
    URL_COLUMN,
)
from toolkit.run.output.run_directory import BATCH_OUTPUT_FILE, STAGED_INPUT_DIR, RunDirectory
from toolkit.spec.models import DataConfig
from toolkit.spec.row_contract import ERROR_COLUMN

if TYPE_CHECKING:
    import pyarrow as pa


def refused_lines(rows: Iterator[dict[str, Any]], created: int) -> Iterator[dict[str, Any]]:
    """The output lines of the request rows that were refused before running."""
    for row in rows:
        if row[REQUEST_ERROR_COLUMN] is not None:
            yield batch_output_line(row[ID_COLUMN], None, None, None, None,
                                    f"preprocess: {row[REQUEST_ERROR_COLUMN]}",
                                    row[MODEL_COLUMN] or "", created, row[STATUS_COLUMN])


def write_refused_output(run_dir: RunDirectory, output: str,
                         clock=time.time) -> tuple[str, str]:
    """``_batch_output.jsonl`` from the staged rows alone, every one refused before it
    ran: where it is (under ``output``, as the user gave the folder) and its first error."""
    import pyarrow.dataset as pads

    table = pads.dataset(f"{run_dir.root}/{STAGED_INPUT_DIR}", filesystem=run_dir.fs,
                         format="parquet").to_table().sort_by(LINE_COLUMN)
    lines = list(refused_lines(iter(table.to_pylist()), int(clock())))
    _write_lines(run_dir, iter(lines))
    first = lines[0]["response"]["body"]["error"]["message"] if lines else ""
    return f"{output.rstrip('/')}/{BATCH_OUTPUT_FILE}", first


def _rows_in_order(run_dir: RunDirectory, file_format: str,
                   complete_files_only: bool = False) -> "pa.Table":
    import pyarrow as pa
    import pyarrow.dataset as pads

    wanted = [ID_COLUMN, LINE_COLUMN, MODEL_COLUMN, URL_COLUMN, INPUT_INDEX_COLUMN,
              INPUT_COUNT_COLUMN, CONTENT_COLUMN,
              TOOL_CALL_COLUMN, EMBEDDING_COLUMN, "finish_reason", "num_input_tokens",
              "num_generated_tokens", STATUS_COLUMN, ERROR_COLUMN]
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
    if LINE_COLUMN not in table.column_names:
        return table
    return table.sort_by([(LINE_COLUMN, "ascending"), *(
        [(INPUT_INDEX_COLUMN, "ascending")] if INPUT_INDEX_COLUMN in table.column_names
        else [])])


def batch_output_lines(run_dir: RunDirectory, file_format: str, model: str, created: int,
                       complete_files_only: bool = False) -> Iterator[dict[str, Any]]:
    """The Batch API output lines of the rows written so far, in request order.

    Args:
        model: The answers' ``model`` where a row doesn't name the one its line
            asked for (results written before rows did).
        complete_files_only: Pass over result files that can't be read (a run that
            was stopped part-way, whose last file has no footer) instead of failing.
    """
    table = _rows_in_order(run_dir, file_format, complete_files_only)
    for request in _requests(table):
        row = request[0]
        failed = next((r for r in request if r.get(ERROR_COLUMN) is not None), None)
        custom_id = row[ID_COLUMN]
        if row.get(INPUT_INDEX_COLUMN) is not None:  # custom_id[0]: one row per text
            custom_id = custom_id[:-len(f"[{row[INPUT_INDEX_COLUMN]}]")]
            if len(request) != row.get(INPUT_COUNT_COLUMN):
                continue  # a stopped run wrote some of its texts: not answered yet
        yield batch_output_line(
            custom_id=custom_id, content=row.get(CONTENT_COLUMN),
            finish_reason=row.get("finish_reason"),
            prompt_tokens=sum(int(r.get("num_input_tokens") or 0) for r in request),
            completion_tokens=sum(int(r.get("num_generated_tokens") or 0) for r in request),
            error=failed.get(ERROR_COLUMN) if failed else None,
            model=row.get(MODEL_COLUMN) or model, created=created,
            error_status=failed.get(STATUS_COLUMN) if failed else None,
            url=row.get(URL_COLUMN),
            embeddings=[r.get(EMBEDDING_COLUMN) for r in request],
            tool_name=row.get(TOOL_CALL_COLUMN),
            completions=[(r.get(CONTENT_COLUMN), r.get("finish_reason")) for r in request],
        )


def _requests(table: "pa.Table") -> Iterator[list[dict[str, Any]]]:
    """The rows of ``table`` (in line order) a request at a time: one row, or the rows
    of an embeddings line's texts (a completions line's prompts)."""
    request: list[dict[str, Any]] = []
    for batch in table.to_batches(max_chunksize=1024):
        for row in batch.to_pylist():
            if request and (row.get(INPUT_INDEX_COLUMN) is None
                            or row.get(LINE_COLUMN) != request[0].get(LINE_COLUMN)):
                yield request
                request = []
            request.append(row)
    if request:
        yield request


def _write_lines(run_dir: RunDirectory, lines: Iterator[dict[str, Any]]) -> int:
    """``lines`` as ``_batch_output.jsonl``, claimed for the run directory; how many."""
    count = 0
    path = f"{run_dir.root}/{BATCH_OUTPUT_FILE}"
    run_dir.claim(BATCH_OUTPUT_FILE)
    with run_dir.fs.open_output_stream(path) as stream:
        chunk: list[str] = []
        for line in lines:
            chunk.append(json.dumps(line, ensure_ascii=False))
            if len(chunk) >= 1024:
                stream.write(("\n".join(chunk) + "\n").encode("utf-8"))
                count += len(chunk)
                chunk = []
        if chunk:
            stream.write(("\n".join(chunk) + "\n").encode("utf-8"))
            count += len(chunk)
    return count


def write_batch_output(run_dir: RunDirectory, data: DataConfig, model: str,
                       clock=time.time) -> str:
    """Write ``_batch_output.jsonl`` from the run's result files; return a note naming it.

    One line per written row (every request: answered or with its error), ordered
    by the request file's line numbers; ``model`` (``engine.model``) answers the lines
    whose rows don't name one.
    """
    count = _write_lines(run_dir, batch_output_lines(run_dir, data.output_format,
                                                     model, int(clock())))
    shown = f"{data.output.rstrip('/')}/{BATCH_OUTPUT_FILE}"
    return (f"Batch API output: {shown} ({count:,} lines, one per "
            "request, matched by custom_id).")
