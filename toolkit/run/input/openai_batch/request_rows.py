"""A request line as the rows that run it: checked against the run (its endpoint, the
served model names) and its body's shape (:mod:`.line_shapes`), then as chat messages or
prompts with their own sampling params, in the vLLM names both engines read."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any, Literal

from pydantic import Field

from toolkit.run.input.openai_batch.line_shapes import (
    BODIES,
    CHAT_COMPLETIONS_URL,
    COMPLETIONS_URL,
    EMBEDDINGS_URL,
    ENDPOINT_TASKS,
    SPLIT_ENDPOINTS,
    ChatBody,
    CompletionBody,
    EmbeddingBody,
    RequestError,
    RequestLine,
    validated,
)
from toolkit.run.input.openai_batch.tool_calls import function_call
from toolkit.spec.models import StrictModel

#: Columns of a staged request file, in order. ``custom_id`` is the row id;
#: ``line`` the 1-based line number; ``body`` the request body as compact JSON text
#: (text, so rows with different bodies share one Arrow type).
ID_COLUMN = "custom_id"
LINE_COLUMN = "line"
URL_COLUMN = "url"
BODY_COLUMN = "body"
REQUEST_ERROR_COLUMN = "request_error"
#: The HTTP status a request refused before it ran is answered with (400, 404); kept in
#: the results, as ``served_model``: the served name the line asked for (its answer's
#: model). Not ``model``: Ray Data LLM reads a row's ``model`` as a LoRA adapter to load.
STATUS_COLUMN = "error_status"
MODEL_COLUMN = "served_model"
#: Result columns: a chat answer's text (a function call's arguments), the function it
#: calls (null: a plain answer), an embeddings line's vector.
CONTENT_COLUMN = "content"
TOOL_CALL_COLUMN = "tool_call"
EMBEDDING_COLUMN = "embedding"
#: An embeddings line with several texts is a row per text (each embedded as a row of
#: its own, so either engine runs it): the text's index in ``input``, and the row id
#: ``custom_id[index]``, and how many texts the line has. Null on every other row. The
#: output file groups them back.
INPUT_INDEX_COLUMN = "input_index"
INPUT_COUNT_COLUMN = "input_count"
REQUEST_COLUMNS: dict[str, str] = {
    ID_COLUMN: "string", LINE_COLUMN: "int64", URL_COLUMN: "string", BODY_COLUMN: "string",
    REQUEST_ERROR_COLUMN: "string", STATUS_COLUMN: "int64", MODEL_COLUMN: "string",
    INPUT_INDEX_COLUMN: "int64", INPUT_COUNT_COLUMN: "int64",
}


class OpenAIBatchOptions(StrictModel):
    """The options of a job that reads OpenAI batch files (``openai-batch``)."""

    served_model_names: list[str] = Field(
        [], description="The names a line's body.model may give for the model being run "
                        "(as vLLM's --served-model-name): a line naming another model is an "
                        "error line (404), and each answer's model is the name its line "
                        "asked for. Empty: the model as engine.model names it.")
    argument_max_chars: int | None = Field(
        None, ge=1, description="Caps the strings (maxLength) and numbers (digits) that a "
                                "function's parameters schema leaves unbounded, and allows no "
                                "whitespace between JSON tokens, in the function calls "
                                "answered for tool_choice: what the model may answer stays "
                                "valid against the schema as given. --smoke sets 16, as the "
                                "random-weight model never ends a string. None: the schema "
                                "as given.")
    endpoint: Literal["/v1/chat/completions", "/v1/completions", "/v1/embeddings"] | None = Field(
        None, description="The endpoint this run answers: /v1/chat/completions (engine.task "
                          "generate), /v1/completions (generate, each prompt as written: "
                          "engine.apply_chat_template false) or /v1/embeddings (engine.task "
                          "embed). A run is one model doing one task one way, so lines for "
                          "another endpoint are error lines (400). Unset: the url of the "
                          "input file's first request.")


def run_endpoint(options: Any, task: str) -> str:
    """The endpoint a run answers: ``options.endpoint``, else the one its ``task``
    (``engine.task``) serves."""
    endpoint = getattr(options, "endpoint", None)
    if endpoint:
        return str(endpoint)
    return next((url for url, served in ENDPOINT_TASKS.items() if served == task),
                CHAT_COMPLETIONS_URL)


def served_model_names(options: Any, model: str) -> list[str]:
    """What a line's ``body.model`` may say: the job's ``served_model_names``, else
    ``model``, ``engine.model`` (as vLLM serves a model under its path or id by default)."""
    names = getattr(options, "served_model_names", None)
    return list(names) if names else [model]


class UnusableLine(ValueError):
    """A line that can't be an error line of its own (not a JSON object, no usable
    ``custom_id``): the file is refused, naming it, as OpenAI refuses it in validating."""

    def __init__(self, line: int, message: str, code: str, param: str | None = None) -> None:
        super().__init__(f"line {line}: {message}")
        self.line, self.reason, self.code, self.param = line, message, code, param


def _row(line: int, request: RequestLine, model: str | None, body_text: str | None = None,
         error: RequestError | None = None) -> dict[str, Any]:
    url = request.url if isinstance(request.url, str) else None
    return {ID_COLUMN: request.custom_id, LINE_COLUMN: line, URL_COLUMN: url,
            BODY_COLUMN: body_text, REQUEST_ERROR_COLUMN: error and f"line {line}: {error}",
            STATUS_COLUMN: error and error.status, MODEL_COLUMN: model,
            INPUT_INDEX_COLUMN: None, INPUT_COUNT_COLUMN: None}


def parse_request_line(text: str, line: int, served: Sequence[str] | None = None,
                       endpoint: str = CHAT_COMPLETIONS_URL) -> dict[str, Any]:
    """One request line as a row of :data:`REQUEST_COLUMNS`, checked as an endpoint checks
    a request before it runs.

    A line that is not a POST to ``endpoint`` with a body this toolkit can run
    (:mod:`.line_shapes`: :class:`ChatBody`, :class:`CompletionBody`,
    :class:`EmbeddingBody`) for a model it serves is a row whose ``request_error``
    names the line and whose ``error_status`` is the HTTP status it is answered with:
    404 for a ``body.model`` not in ``served`` (vLLM's answer), 400 for the rest. A
    UTF-8 byte order mark before line 1 is ignored.

    Args:
        served: The names ``body.model`` may give (a line without one asks for the
            first); None: any model (the first name is then the line's own).
        endpoint: The url this run answers (:data:`ENDPOINT_TASKS`); a line for
            another is refused (400), naming why.

    Raises:
        UnusableLine: the line is not a JSON object with a ``custom_id`` string, so it
            can't be matched to an answer: the file must be fixed.
    """
    if line == 1:
        text = text.removeprefix("\ufeff")
    try:
        parsed = json.loads(text)
    except ValueError as exc:
        where = f" at column {exc.colno}" if isinstance(exc, json.JSONDecodeError) else ""
        reason = exc.msg if isinstance(exc, json.JSONDecodeError) else str(exc)
        raise UnusableLine(line, f"not valid JSON ({reason}{where})",
                           "invalid_json_line") from None
    if not isinstance(parsed, dict):
        raise UnusableLine(line, f"expected a JSON object, got {type(parsed).__name__}",
                           "invalid_json_line")
    request = RequestLine.model_validate(parsed)
    custom_id = request.custom_id
    if not isinstance(custom_id, str) or not custom_id.strip():
        got = "no custom_id" if custom_id is None else f"custom_id {custom_id!r} is not a string"
        raise UnusableLine(line, f"{got}; every request needs a unique custom_id string",
                           "missing_required_parameter", "custom_id")
    model = request.asked_model() or (served[0] if served else None)
    refused = _refusal(request, served, endpoint)
    if refused is not None:
        if refused.status == 404:  # answered as the model the run does serve
            model = served[0] if served else None
        return _row(line, request, model, error=refused)
    return _row(line, request, model,
                json.dumps(request.body, separators=(",", ":"), ensure_ascii=False))


def _refusal(request: RequestLine, served: Sequence[str] | None,
             endpoint: str) -> RequestError | None:
    """Why ``request`` can't run in this run, in the order a server checks it: method,
    url, the body's shape, the model it names, then the body's fields."""
    method, url, body = request.method, request.url, request.body
    if str(method).upper() != "POST":
        return RequestError(f"method {method!r} is not supported; only POST")
    if url not in ENDPOINT_TASKS:
        return RequestError(f"url {url!r} is not supported; only {', '.join(ENDPOINT_TASKS)}")
    if url != endpoint and ENDPOINT_TASKS[url] == ENDPOINT_TASKS.get(endpoint):
        return RequestError(
            f"url {url!r}: this run answers {endpoint}, and a run puts every prompt through "
            f"the chat template or none (engine.apply_chat_template). Run the {url} lines "
            f"as a file (or batch) of their own")
    if url != endpoint:
        return RequestError(
            f"url {url!r} needs a model for engine.task {ENDPOINT_TASKS[url]}; this run "
            f"answers {endpoint} (engine.task {ENDPOINT_TASKS.get(endpoint)}) with one model. "
            f"Run the {url} lines as a file (or batch) of their own")
    if not isinstance(body, dict):
        return RequestError("body must be a JSON object with model and " + {
            EMBEDDINGS_URL: "input", COMPLETIONS_URL: "prompt"}.get(url, "messages"))
    asked = body.get("model")
    if asked is not None and (not isinstance(asked, str) or (served and asked not in served)):
        return RequestError(f"The model `{asked}` does not exist.", status=404)
    try:
        validated(BODIES[url], body)
    except RequestError as exc:
        return exc
    return None


def text_rows(row: dict[str, Any]) -> list[dict[str, Any]]:
    """A request row as the rows that run it: itself, or for an embeddings line with
    several texts (a completions line with several prompts) one row per text
    (``custom_id[i]``, ``input_index`` i)."""
    if row[REQUEST_ERROR_COLUMN] is not None or row[URL_COLUMN] not in SPLIT_ENDPOINTS:
        return [row]
    texts = (embedding_request(row[BODY_COLUMN]) if row[URL_COLUMN] == EMBEDDINGS_URL
             else completion_request(row[BODY_COLUMN])[0])
    if len(texts) == 1:
        return [row]
    return [{**row, ID_COLUMN: f"{row[ID_COLUMN]}[{i}]", INPUT_INDEX_COLUMN: i,
             INPUT_COUNT_COLUMN: len(texts)} for i in range(len(texts))]


def _sampling_params(body: ChatBody | CompletionBody, max_tokens: int | None,
                     structured: dict[str, str] | None) -> dict[str, Any]:
    """A row's sampling params in vLLM's names, every key (None: the spec's value)."""
    return {"max_tokens": max_tokens, "temperature": body.temperature, "top_p": body.top_p,
            "seed": body.seed, "structured_outputs": structured}


def chat_request(body_text: str, argument_max_chars: int | None = None,
                 ) -> tuple[list[dict[str, str]], dict[str, Any]]:
    """A request body as (chat messages, this row's sampling params).

    The params use vLLM's names, as both engines read them, and hold every key
    (``None`` where the body doesn't say, leaving the spec's value):
    ``max_tokens`` (``max_completion_tokens`` wins), ``temperature``, ``top_p``,
    ``seed`` and ``structured_outputs`` (``{"json": schema text}`` from
    ``response_format``). A field that would change answers but that this toolkit
    can't honour (tools, stop, n > 1, ...) is refused by name.

    Raises:
        RequestError: naming the body field that is wrong or unsupported (its ``param``).
    """
    body: ChatBody = validated(ChatBody, body_text)
    messages: list[dict[str, str]] = [dict(message) for message in body.messages]
    call = function_call(body.tools, body.tool_choice, argument_max_chars)
    structured = body.structured_outputs()
    if call is not None:
        structured = {"json": json.dumps(call.schema, separators=(",", ":"),
                                         ensure_ascii=False)}
        messages = [{"role": "system", "content": call.instructions}, *messages]
    max_tokens = body.max_completion_tokens
    return messages, _sampling_params(body, body.max_tokens if max_tokens is None
                                      else max_tokens, structured)


def embedding_request(body_text: str) -> list[str]:
    """The texts an embeddings body asks to embed (``input``: a string or a list of them),
    in order: its answer's ``data[i]`` is ``input[i]``'s vector.

    Raises:
        RequestError: naming the field: no text, token arrays, more than 2,048 texts,
            ``dimensions``, a non-float encoding.
    """
    return validated(EmbeddingBody, body_text).input


def completion_request(body_text: str) -> tuple[list[str], dict[str, Any]]:
    """A completions body as (its prompts, as written, in order, and their sampling
    params): ``prompt`` is a string or a list of them, each answered as ``choices[i]``;
    ``max_tokens`` is 16 where the body doesn't say, as OpenAI and vLLM have it.

    Raises:
        RequestError: naming the field: no prompt, token arrays, more than 2,048
            prompts, a field this toolkit can't honour (``echo``, ``suffix``, ``stop``...).
    """
    body: CompletionBody = validated(CompletionBody, body_text)
    return body.prompt, _sampling_params(body, body.max_tokens, None)
