"""The OpenAI Batch API file format, the one place the toolkit knows it: its lines, and
its files as a run reads and writes them (``data.format: openai-batch``).

**Lines.** A Batch API request file (also what ``vllm run-batch`` reads) is JSONL, one request a
line::

    {"custom_id": "req-1", "method": "POST", "url": "/v1/chat/completions",
     "body": {"model": "...", "messages": [...], "max_tokens": 100, ...}}

and its output file one line per request::

    {"id": "batch_req_...", "custom_id": "req-1",
     "response": {"status_code": 200, "request_id": "...", "body": {"id": "chatcmpl-...",
        "object": "chat.completion", "model": "...", "choices": [{"index": 0,
        "message": {"role": "assistant", "content": "..."}, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 9, "completion_tokens": 12, "total_tokens": 21}}},
     "error": null}

or, for a request that failed, its HTTP status and error as OpenAI's error files have
them, with vLLM's ``error`` beside::

    {"id": "batch_req_...", "custom_id": "req-2",
     "response": {"status_code": 404, "request_id": "...", "body": {"error": {
        "message": "line 2: The model `gpt-5` does not exist.",
        "type": "invalid_request_error", "param": "model", "code": "model_not_found"}}},
     "error": {"code": "model_not_found", "message": "preprocess: line 2: ..."}}

The package, in the order a line goes through it:

- :mod:`.line_shapes`: the request line and each endpoint's body as typed models
  (vLLM's ``BatchRequestInput``), which refuse what this toolkit can't honour by name.
- :mod:`.request_rows`: a line as the rows that run it (:func:`parse_request_line`),
  checked against the run's endpoint and served model names
  (:class:`OpenAIBatchOptions`, vLLM's ``--served-model-name``); a body as chat
  messages or prompts with their own sampling params (:func:`chat_request`). A
  request that can't run is a row with ``request_error`` and its status set, which the
  job writes as an error row.
- :mod:`.tool_calls`: ``tools`` with ``tool_choice`` answered as a function call.
- :mod:`.request_file`: the file scanned once on the driver and staged as Parquet.
- :mod:`.output_lines`: the output line of a written row (vLLM's ``BatchRequestOutput``).
- :mod:`.output_file`: ``<output>/_batch_output.jsonl`` once the run is complete.

Both files are this format's steps of a run (:class:`OpenAIBatchFormat`, registered for
``data.format: openai-batch``); the run layer calls them through
:mod:`toolkit.run.input.formats` as it does for every format.
"""

from __future__ import annotations

from typing import Any

from toolkit.run.input.format_steps import RunFormat, register_format
from toolkit.run.input.openai_batch.line_shapes import (
    CHAT_COMPLETIONS_URL,
    COMPLETIONS_URL,
    EMBEDDINGS_URL,
    ENDPOINT_TASKS,
    RequestError,
)
from toolkit.run.input.openai_batch.output_file import (
    batch_output_lines,
    refused_lines,
    write_batch_output,
)
from toolkit.run.input.openai_batch.output_lines import batch_output_line, split_reasoning
from toolkit.run.input.openai_batch.request_file import (
    FileScan,
    first_endpoint,
    read_staged_requests,
    request_lines,
    scan_requests,
    shown_custom_id,
    stage_requests,
    staged_request_count,
)
from toolkit.run.input.openai_batch.request_rows import (
    BODY_COLUMN,
    CONTENT_COLUMN,
    EMBEDDING_COLUMN,
    INPUT_INDEX_COLUMN,
    REQUEST_ERROR_COLUMN,
    TOOL_CALL_COLUMN,
    URL_COLUMN,
    OpenAIBatchOptions,
    UnusableLine,
    chat_request,
    completion_request,
    embedding_request,
    parse_request_line,
    run_endpoint,
    served_model_names,
    text_rows,
)
from toolkit.run.input.openai_batch.tool_calls import ToolCall, tool_call
from toolkit.run.output.run_directory import RunDirectory
from toolkit.run.run_plan import RunPlan
from toolkit.spec.engine_settings import EngineSettings
from toolkit.spec.models import DataConfig, JobSpec

__all__ = [
    "BODY_COLUMN", "CHAT_COMPLETIONS_URL", "COMPLETIONS_URL", "CONTENT_COLUMN",
    "EMBEDDINGS_URL", "EMBEDDING_COLUMN", "ENDPOINT_TASKS", "INPUT_INDEX_COLUMN",
    "OPENAI_BATCH_FORMAT", "REQUEST_ERROR_COLUMN", "TOOL_CALL_COLUMN", "URL_COLUMN",
    "FileScan", "OpenAIBatchFormat", "OpenAIBatchOptions", "RequestError", "ToolCall",
    "UnusableLine", "batch_output_line", "batch_output_lines", "chat_request",
    "completion_request", "embedding_request", "first_endpoint", "parse_request_line",
    "refused_lines", "request_lines", "run_endpoint", "scan_requests", "served_model_names",
    "shown_custom_id", "split_reasoning", "text_rows", "tool_call",
]

OPENAI_BATCH_FORMAT = "openai-batch"


class OpenAIBatchFormat(RunFormat):
    """An OpenAI Batch API request file in, the Batch API output file out."""

    stages_rows = True

    def stage(self, spec: JobSpec, run_dir: RunDirectory) -> None:
        _stage(spec.data, run_dir, spec.options, spec.engine)

    def open(self, plan: RunPlan) -> "Any":
        # Scanned and staged once: ids checked, bad lines kept as error rows.
        _stage(plan.data, plan.run_dir, plan.options, plan.stages[-1].engine)
        return read_staged_requests(plan.run_dir)

    def staged_rows(self, run_dir: RunDirectory) -> int | None:
        return staged_request_count(run_dir)

    def finish(self, plan: RunPlan) -> str | None:
        return write_batch_output(plan.run_dir, plan.data, plan.stages[-1].engine.model)


def _stage(data: DataConfig, run_dir: RunDirectory, options: Any, engine: EngineSettings) -> None:
    """The request file staged for a run of ``engine`` (the main, last stage's)."""
    stage_requests(data, run_dir, served=served_model_names(options, engine.model),
                   endpoint=run_endpoint(options, engine.task))


register_format(OPENAI_BATCH_FORMAT, OpenAIBatchFormat())
