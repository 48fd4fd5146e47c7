"""openai-batch: run an OpenAI Batch API request file and write the Batch API output file.

Each request line (``{"custom_id", "method", "url", "body"}``) is a row keyed on its
``custom_id``. A run answers one endpoint (``options.endpoint``, by default the url of
the file's first request) with one model: ``/v1/chat/completions`` on
``engine.task: generate``, ``/v1/completions`` on ``generate`` with each prompt as
written (``engine.apply_chat_template: false``), ``/v1/embeddings`` on ``engine.task:
embed``; lines for another are error lines (400) naming why. A chat line's
``body.messages`` are the row's chat messages and the body's sampling fields (``max_tokens`` /
``max_completion_tokens``, ``temperature``, ``top_p``, ``seed``, ``response_format``)
override the spec's ``sampling`` for that row; ``tools`` with ``tool_choice``
``required`` or a named function are answered with a function call whose arguments
the engine holds to the function's ``parameters`` schema. The answer is the ``content``
column (``tool_call``: the function it calls), an embedding the ``embedding`` column,
and a finished run also writes ``<output>/_batch_output.jsonl`` in the Batch API's
output format. ``body.model`` must be one of ``options.served_model_names``
(``--served-model-name``; by default ``engine.model``), and is the answer's
``model``. Requests that can't run as given (another url, a model not served, a field
the toolkit can't honour) are error rows named by their line, with the status they are
answered with (``error_status``).
"""

from __future__ import annotations

import json
from typing import Any

from pydantic import Field, model_validator

from toolkit.run.input.openai_batch import (
    BODY_COLUMN,
    COMPLETIONS_URL,
    CONTENT_COLUMN,
    EMBEDDING_COLUMN,
    EMBEDDINGS_URL,
    ENDPOINT_TASKS,
    INPUT_INDEX_COLUMN,
    REQUEST_ERROR_COLUMN,
    TOOL_CALL_COLUMN,
    URL_COLUMN,
    OpenAIBatchOptions,
    chat_request,
    completion_request,
    embedding_request,
    first_endpoint,
    tool_call,
)
from toolkit.spec.job_definition import JobDefinition
from toolkit.spec.models import JobSpec
from toolkit.spec.row_contract import PROMPT_COLUMN

#: What --smoke runs an endpoint on: the tiny model of its task.
SMOKE_MODELS = {"generate": "sample:tiny-chat", "embed": "sample:tiny-encoder"}
#: The random-weight model never ends a string it starts: under --smoke a function
#: call's free strings and numbers are kept short, so the call is answered whole.
SMOKE_ARGUMENT_CHARS = 16


class OpenAIBatchSpec(JobSpec):
    options: OpenAIBatchOptions = Field(default_factory=OpenAIBatchOptions,
                                        description="The served model names and endpoint.")

    @model_validator(mode="after")
    def _endpoint_fits_task(self) -> "OpenAIBatchSpec":
        endpoint = self.options.endpoint
        if endpoint is not None and ENDPOINT_TASKS[endpoint] != self.engine.task:
            raise ValueError(
                f"options.endpoint {endpoint} is answered by engine.task "
                f"{ENDPOINT_TASKS[endpoint]}, not {self.engine.task}: set engine.task "
                f"{ENDPOINT_TASKS[endpoint]} (and a model for it), or leave engine.task out")
        templated = getattr(self.engine, "apply_chat_template", True)
        if endpoint is not None and ENDPOINT_TASKS[endpoint] == "generate" and (
                templated != (endpoint != COMPLETIONS_URL)):
            raise ValueError(
                f"options.endpoint {endpoint} sends "
                + ("each prompt as written: set engine.apply_chat_template false, or leave "
                   "it out" if endpoint == COMPLETIONS_URL else
                   "chat messages through the chat template: leave "
                   "engine.apply_chat_template out"))
        return self


def endpoint_settings(data: dict[str, Any], smoke: bool) -> None:
    """The endpoint a run answers and the task that answers it, before the spec is
    validated: ``options.endpoint`` as given, else the url of the input's first request;
    ``engine.task`` its task unless given (for embeddings, without the chat model's
    ``max_model_len``: the embedding model's own applies); under ``--smoke`` the tiny
    model of that task."""
    options = data.setdefault("options", {})
    if not isinstance(options, dict):
        return
    endpoint = options.get("endpoint") or first_endpoint((data.get("data") or {}).get("input"))
    task = ENDPOINT_TASKS.get(endpoint) if isinstance(endpoint, str) else None
    engine = data.get("engine")
    if task is None or not isinstance(engine, dict):
        return
    options["endpoint"] = endpoint
    if endpoint == COMPLETIONS_URL:
        engine.setdefault("apply_chat_template", False)
    if "task" not in engine and task == "embed":
        # The template's max_model_len is a chat model's context: an embedding model
        # has its own (512 positions for BERT-like ones), and vLLM refuses a longer one.
        kwargs = engine.get("engine_kwargs")
        if isinstance(kwargs, dict):
            engine["engine_kwargs"] = {k: v for k, v in kwargs.items() if k != "max_model_len"}
    engine.setdefault("task", task)
    if smoke and engine.get("model") in SMOKE_MODELS.values():
        engine["model"] = SMOKE_MODELS.get(engine["task"], engine["model"])


def preprocess(row: dict[str, Any], options: OpenAIBatchOptions) -> dict[str, Any]:
    """The request's messages, and its own sampling params on top of the spec's (the
    request was checked when its file was read: one refused then fails here)."""
    if row.get(REQUEST_ERROR_COLUMN):
        raise ValueError(row[REQUEST_ERROR_COLUMN])
    try:
        if row.get(URL_COLUMN) == EMBEDDINGS_URL:
            texts = embedding_request(row[BODY_COLUMN])
            return {PROMPT_COLUMN: texts[row.get(INPUT_INDEX_COLUMN) or 0]}
        if row.get(URL_COLUMN) == COMPLETIONS_URL:
            prompts, params = completion_request(row[BODY_COLUMN])
            return {PROMPT_COLUMN: prompts[row.get(INPUT_INDEX_COLUMN) or 0],
                    "sampling_params": params}
        messages, params = chat_request(row[BODY_COLUMN], options.argument_max_chars)
    except ValueError as exc:
        raise ValueError(f"line {row.get('line')}: {exc}") from None
    return {"messages": messages, "sampling_params": params}


def postprocess(row: dict[str, Any], options: OpenAIBatchOptions) -> dict[str, Any]:
    """The answer as it came (not stripped), or the function it calls and the call's
    arguments; an embeddings line's vector. Why an answer stopped is the pipeline's
    ``finish_reason`` column, which the Batch API output file reads."""
    if row.get(URL_COLUMN) == EMBEDDINGS_URL:
        vector = row.get(EMBEDDING_COLUMN)
        return {EMBEDDING_COLUMN: None if vector is None else [float(x) for x in vector]}
    text = str(row["generated_text"])
    if row.get(URL_COLUMN) == COMPLETIONS_URL:
        return {CONTENT_COLUMN: text, TOOL_CALL_COLUMN: None}
    call = tool_call(json.loads(row[BODY_COLUMN]), options.argument_max_chars)
    if call is None:
        return {CONTENT_COLUMN: text, TOOL_CALL_COLUMN: None}
    name, arguments = call.answer(text)  # a cut-off answer is refused: not valid JSON
    return {CONTENT_COLUMN: arguments, TOOL_CALL_COLUMN: name}


def result_columns(options: OpenAIBatchOptions) -> dict[str, str]:
    if options.endpoint == EMBEDDINGS_URL:
        return {EMBEDDING_COLUMN: "list<float>"}
    return {CONTENT_COLUMN: "string", TOOL_CALL_COLUMN: "string"}


JOB = JobDefinition(
    name="openai-batch",
    description="Run an OpenAI Batch API request file (JSONL); write the Batch API output file.",
    spec_model=OpenAIBatchSpec,
    preprocess=preprocess,  # each request's response_format is its own structured output
    postprocess=postprocess,
    required_columns=lambda options: [BODY_COLUMN, REQUEST_ERROR_COLUMN],
    result_columns=result_columns,
    drop_columns=lambda options: [BODY_COLUMN, REQUEST_ERROR_COLUMN],
    smoke_overrides={"engine.model": SMOKE_MODELS["generate"],
                     "options.argument_max_chars": SMOKE_ARGUMENT_CHARS},
    complete_spec=endpoint_settings,
)
