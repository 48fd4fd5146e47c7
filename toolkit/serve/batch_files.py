"""A batch's run directory as the Batches API shows it: request counts, output and error files.

While the run goes, the counts are the rows its result files hold (the same figures
``toolkit run``'s progress line shows: :class:`~toolkit.run.progress.sources.OutputRows`).
When it ends, however it ends (completed, or cancelled part-way), the rows written
become the batch's two files, as OpenAI splits them: answered requests in the output
file, requests that failed (malformed lines included, each naming its line) in the
error file. Both are Batch API output lines (:mod:`toolkit.run.input.openai_batch`),
and an error's message shows no path on the server (:mod:`.server_paths`). A batch none
of whose requests can run has no run: its error file comes from its input file alone.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from toolkit.run.input.openai_batch import (
    CHAT_COMPLETIONS_URL,
    FileScan,
    batch_output_lines,
    refused_lines,
    scan_requests,
)
from toolkit.run.output.run_directory import RunDirectory
from toolkit.run.progress.sources import OutputRows
from toolkit.serve.openai_objects import BatchUsage, FileObject, RequestCounts
from toolkit.serve.server_paths import without_server_paths
from toolkit.serve.store import Store


class BatchResults(BaseModel):
    output_file: FileObject | None
    error_file: FileObject | None
    request_counts: RequestCounts
    usage: BatchUsage


def live_counts(rows: OutputRows, total: int) -> RequestCounts:
    """Requests answered and failed so far, from the rows the run has written."""
    progress = rows.read()
    if progress is None:
        return RequestCounts(total=total)
    # An embeddings request of several texts is a row per text: rows can outnumber
    # requests while the run goes (the finished files count requests exactly).
    failed = min(progress.error_rows, total)
    return RequestCounts(total=total, failed=failed,
                         completed=min(progress.rows_done - progress.error_rows, total - failed))


def result_file_id(batch_id: str, kind: str) -> str:
    """The same id each time, so finishing a batch again (after a restart) replaces its files."""
    return "file-" + hashlib.sha256(f"{batch_id}/{kind}".encode()).hexdigest()[:24]


def write_batch_files(store: Store, batch_id: str, total: int) -> BatchResults:
    """The rows the batch's run wrote, as its output and error files (None when empty).

    Rows are taken once per row id (a line's ``id`` is derived from it) from the
    result files that are complete, so a run stopped part-way gives the lines it
    finished.
    """
    run_dir = RunDirectory(str(store.run_dir(batch_id)))
    manifest = run_dir.read_manifest() if store.run_dir(batch_id).exists() else None
    lines: Iterator[dict[str, Any]] = iter(())
    if manifest is not None:
        data, engine = manifest.spec.get("data") or {}, manifest.spec.get("engine") or {}
        lines = batch_output_lines(run_dir, data.get("output_format", "parquet"),
                                   str(engine.get("model", "")), int(time.time()),
                                   complete_files_only=True)
    return _write_files(store, batch_id, total, lines)


def write_refused_files(store: Store, batch_id: str, input_file: Path,
                        served: Sequence[str] | None, total: int,
                        endpoint: str = CHAT_COMPLETIONS_URL) -> BatchResults:
    """The error file of a batch none of whose requests can run, from its input file."""
    lines = refused_lines(scan_requests(str(input_file), served, FileScan(),
                                        endpoint=endpoint), int(time.time()))
    return _write_files(store, batch_id, total, lines)


def _write_files(store: Store, batch_id: str, total: int,
                 lines: Iterator[dict[str, Any]]) -> BatchResults:
    usage = BatchUsage()
    counts = RequestCounts(total=total)
    paths = {kind: store.batch_dir(batch_id) / f".{kind}.jsonl" for kind in ("output", "error")}
    with open(paths["output"], "w", encoding="utf-8") as output, \
            open(paths["error"], "w", encoding="utf-8") as errors:
        seen: set[str] = set()
        for line in lines:
            if line["id"] in seen:
                continue
            seen.add(line["id"])
            if line["error"] is not None:
                message = without_server_paths(line["error"]["message"])
                line["error"]["message"] = message
                line["response"]["body"]["error"]["message"] = message.removeprefix(
                    "preprocess: ")
            text = json.dumps(line, ensure_ascii=False) + "\n"
            if line["error"] is None:
                output.write(text)
                counts.completed += 1
                tokens = line["response"]["body"]["usage"]
                usage.input_tokens += tokens["prompt_tokens"]
                usage.output_tokens += tokens.get("completion_tokens", 0)  # none: embeddings
            else:
                errors.write(text)
                counts.failed += 1
    usage.total_tokens = usage.input_tokens + usage.output_tokens
    files = {kind: _publish(store, batch_id, kind, path) for kind, path in paths.items()}
    return BatchResults(output_file=files["output"], error_file=files["error"],
                        request_counts=counts, usage=usage)


def _publish(store: Store, batch_id: str, kind: str, path: Path) -> FileObject | None:
    try:
        if path.stat().st_size == 0:
            return None
        with open(path, "rb") as content:
            return store.add_file(f"{batch_id}_{kind}.jsonl", "batch_output", content,
                                  file_id=result_file_id(batch_id, kind))
    finally:
        path.unlink(missing_ok=True)
