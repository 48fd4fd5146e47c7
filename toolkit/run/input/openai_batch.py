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
them, with vLLM's ``error`` beside (:func:`line_error`)::

    {"id": "batch_req_...", "custom_id": "req-2",
     "response": {"status_code": 404, "request_id": "...", "body": {"error": {
        "message": "line 2: The model `gpt-5` does not exist.",
        "type": "invalid_request_error", "param": "model", "code": "model_not_found"}}},
     "error": {"code": "model_not_found", "message": "preprocess: line 2: ..."}}

4xx is the request's fault (400 a field this toolkit can't run, 404 a model it doesn't
serve), 5xx the engine's.

Here a line becomes a row, checked as an endpoint checks a request
(:func:`parse_request_line`): its body becomes chat messages and per-row sampling
params in the vLLM names both engines read (:func:`chat_request`), and its
``body.model`` must be one of the served names (:class:`OpenAIBatchOptions`, vLLM's
``--served-model-name``; by default ``engine.model``). A request that can't run is a
row with ``request_error`` and its status set, which the job writes as an error row. A
written row becomes an output line (:func:`batch_output_line`).

**In.** A request file is scanned once on the driver, line by line (Batch API files
are at most 50,000 requests / 200 MB), and staged as Parquet into the run
directory's ``_input/`` (as a ``--rows``-limited input is), so a resumed run reads
the very same rows and Ray Data's checkpoint skips those already written by
``custom_id``. The scan (:func:`scan_requests`, which ``toolkit serve`` validates a
batch's file with too) refuses the file before anything runs, naming the lines, where
a line is not a JSON object with a ``custom_id`` (its answer couldn't be matched to
it) or two lines share one; a file none of whose requests can run is answered with
their error lines alone, without starting Ray.

**Out.** When the run is complete, :func:`write_batch_output` writes
``<output>/_batch_output.jsonl`` from the result files: one line per request, in
request order, in the Batch API's output format (the line shapes above). The run
directory owns that file (``--overwrite`` replaces it; it is never "someone else's
file").

Both are this format's steps of a run (:class:`OpenAIBatchFormat`, registered for
``data.format: openai-batch``); the run layer calls them through
:mod:`toolkit.run.input.formats` as it does for every format.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from pydantic import Field

from toolkit.errors import InputDataError
from toolkit.run.input.formats import RunFormat, register_format
from toolkit.run.output.run_directory import BATCH_OUTPUT_FILE, STAGED_INPUT_DIR, RunDirectory
from toolkit.spec.models import JobSpec, StrictModel
from toolkit.spec.row_contract import ERROR_COLUMN

if TYPE_CHECKING:
    import pyarrow as pa


CHAT_COMPLETIONS_URL = "/v1/chat/completions"
COMPLETIONS_URL = "/v1/completions"
EMBEDDINGS_URL = "/v1/embeddings"
#: The endpoints a run answers, each with the ``engine.task`` that answers it: a run
#: is one model doing one task, so it serves the endpoints of its task and answers
#: the other lines of a mixed file with an error line (400) naming why.
ENDPOINT_TASKS: dict[str, str] = {CHAT_COMPLETIONS_URL: "generate", COMPLETIONS_URL: "generate",
                                  EMBEDDINGS_URL: "embed"}
#: The endpoints whose lines hold several texts, each its own row (``input_index``).
SPLIT_ENDPOINTS = (EMBEDDINGS_URL, COMPLETIONS_URL)

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
#: Texts one embeddings request may hold (OpenAI's limit for ``input``).
MAX_EMBEDDING_INPUTS = 2048

#: Body fields that become sampling params (vLLM's names on the right).
_SAMPLING_FIELDS = ("max_tokens", "max_completion_tokens", "temperature", "top_p", "seed",
                    "response_format")
#: Body fields that don't change an answer, accepted and not used (``model`` is
#: checked against the served names when the line is read).
_IGNORED_FIELDS = ("model", "user", "metadata", "store", "service_tier", "stream", "n",
                   "logprobs", "parallel_tool_calls")
#: Body fields of function calling (:func:`tool_call`).
_TOOL_FIELDS = ("tools", "tool_choice")
#: An embeddings body's fields: ``input`` is embedded, the rest don't change the vector
#: (``encoding_format`` float only, ``dimensions`` refused: the model's own size).
_EMBEDDING_FIELDS = ("input", "model", "user", "encoding_format")
#: A completions body's fields (OpenAI's legacy endpoint): ``prompt`` as written, the
#: sampling fields; ``echo``, ``suffix``, ``stop``, ``best_of``... are refused by name.
_COMPLETION_FIELDS = ("prompt", "max_tokens", "temperature", "top_p", "seed", "model", "user",
                      "stream", "n", "logprobs")
#: OpenAI's and vLLM's max_tokens of a completion that does not say.
COMPLETION_DEFAULT_MAX_TOKENS = 16
#: The most prompts one completions line may hold.
MAX_COMPLETION_PROMPTS = 2048
_ROLES = {"system": "system", "developer": "system", "user": "user", "assistant": "assistant"}


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


def run_endpoint(spec: JobSpec) -> str:
    """The endpoint a run answers: ``options.endpoint``, else the one its task serves."""
    endpoint = getattr(spec.options, "endpoint", None)
    if endpoint:
        return str(endpoint)
    return next((url for url, task in ENDPOINT_TASKS.items() if task == spec.engine.task),
                CHAT_COMPLETIONS_URL)


def first_endpoint(source: str | None) -> str | None:
    """The url of the first request in a local request file (the endpoint a file is
    for, as OpenAI's batch names one); None where it can't be told cheaply (no file, a
    URI, no url on the first line)."""
    if not source or "://" in source or not Path(source).expanduser().is_file():
        return None
    try:
        for number, text in request_lines(source):
            request = json.loads(text)
            url = request.get("url") if isinstance(request, dict) else None
            return url if isinstance(url, str) else None
    except (ValueError, InputDataError):
        return None
    return None


def served_model_names(spec: JobSpec) -> list[str]:
    """What a line's ``body.model`` may say: the job's ``served_model_names``, else
    ``engine.model`` (as vLLM serves a model under its path or id by default)."""
    names = getattr(spec.options, "served_model_names", None)
    return list(names) if names else [spec.engine.model]


#: The field a request's error names first (``line 3: body.n 2: ...``, ``line 3: url ...``).
_NAMED_FIELD = re.compile(r"(?:line \d+: )?(?:body\.(\w+)|(url|method|body)\b)")


class RequestError(ValueError):
    """Why a request can't be run as given, with the HTTP status the Batch API answers
    it with (400: bad, 404: a model not served). Its message names the field first
    (``body.n ...``, ``url ...``), which :func:`line_error` reports as its ``param``."""

    def __init__(self, message: str, status: int = 400) -> None:
        super().__init__(message)
        self.status = status


class UnusableLine(ValueError):
    """A line that can't be an error line of its own (not a JSON object, no usable
    ``custom_id``): the file is refused, naming it, as OpenAI refuses it in validating."""

    def __init__(self, line: int, message: str, code: str, param: str | None = None) -> None:
        super().__init__(f"line {line}: {message}")
        self.line, self.reason, self.code, self.param = line, message, code, param


def _bad_line(line: int, custom_id: str, error: RequestError, url: Any = None,
              model: str | None = None) -> dict[str, Any]:
    return {ID_COLUMN: custom_id, LINE_COLUMN: line,
            URL_COLUMN: url if isinstance(url, str) else None, BODY_COLUMN: None,
            REQUEST_ERROR_COLUMN: f"line {line}: {error}", STATUS_COLUMN: error.status,
            MODEL_COLUMN: model, INPUT_INDEX_COLUMN: None, INPUT_COUNT_COLUMN: None}


def parse_request_line(text: str, line: int, served: Sequence[str] | None = None,
                       endpoint: str = CHAT_COMPLETIONS_URL) -> dict[str, Any]:
    """One request line as a row of :data:`REQUEST_COLUMNS`, checked as an endpoint checks
    a request before it runs.

    A line that is not a POST to ``endpoint`` with a body this toolkit can run
    (:func:`chat_request`, :func:`embedding_request`) for a model it serves is a row
    whose ``request_error``
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
        request = json.loads(text)
    except ValueError as exc:
        where = f" at column {exc.colno}" if isinstance(exc, json.JSONDecodeError) else ""
        reason = exc.msg if isinstance(exc, json.JSONDecodeError) else str(exc)
        raise UnusableLine(line, f"not valid JSON ({reason}{where})",
                           "invalid_json_line") from None
    if not isinstance(request, dict):
        raise UnusableLine(line, f"expected a JSON object, got {type(request).__name__}",
                           "invalid_json_line")
    custom_id = request.get("custom_id")
    if not isinstance(custom_id, str) or not custom_id.strip():
        got = "no custom_id" if custom_id is None else f"custom_id {custom_id!r} is not a string"
        raise UnusableLine(line, f"{got}; every request needs a unique custom_id string",
                           "missing_required_parameter", "custom_id")
    body = request.get("body")
    asked = body.get("model") if isinstance(body, dict) else None
    model = (asked if isinstance(asked, str) and asked else None) or (
        served[0] if served else None)
    method = request.get("method", "POST")
    url = request.get("url")
    if str(method).upper() != "POST":
        return _bad_line(line, custom_id, RequestError(
            f"method {method!r} is not supported; only POST"), url, model)
    if url not in ENDPOINT_TASKS:
        return _bad_line(line, custom_id, RequestError(
            f"url {url!r} is not supported; only {', '.join(ENDPOINT_TASKS)}"), url, model)
    if url != endpoint and ENDPOINT_TASKS[url] == ENDPOINT_TASKS.get(endpoint):
        return _bad_line(line, custom_id, RequestError(
            f"url {url!r}: this run answers {endpoint}, and a run puts every prompt through "
            f"the chat template or none (engine.apply_chat_template). Run the {url} lines "
            f"as a file (or batch) of their own"), url, model)
    if url != endpoint:
        return _bad_line(line, custom_id, RequestError(
            f"url {url!r} needs a model for engine.task {ENDPOINT_TASKS[url]}; this run "
            f"answers {endpoint} (engine.task {ENDPOINT_TASKS.get(endpoint)}) with one model. "
            f"Run the {url} lines as a file (or batch) of their own"), url, model)
    if not isinstance(body, dict):
        return _bad_line(line, custom_id, RequestError(
            "body must be a JSON object with model and " + {
                EMBEDDINGS_URL: "input", COMPLETIONS_URL: "prompt"}.get(url, "messages")),
            url, model)
    if asked is not None and (not isinstance(asked, str) or (served and asked not in served)):
        return _bad_line(line, custom_id, RequestError(
            f"The model `{asked}` does not exist.", status=404), url,
            served[0] if served else None)
    body_text = json.dumps(body, separators=(",", ":"), ensure_ascii=False)
    try:
        {EMBEDDINGS_URL: embedding_request, COMPLETIONS_URL: completion_request}.get(
            url, chat_request)(body_text)
    except RequestError as exc:
        return _bad_line(line, custom_id, exc, url, model)
    return {ID_COLUMN: custom_id, LINE_COLUMN: line, URL_COLUMN: url, BODY_COLUMN: body_text,
            REQUEST_ERROR_COLUMN: None, STATUS_COLUMN: None, MODEL_COLUMN: model,
            INPUT_INDEX_COLUMN: None, INPUT_COUNT_COLUMN: None}


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


def _messages(value: Any) -> list[dict[str, str]]:
    if not isinstance(value, list) or not value:
        raise RequestError("body.messages must be a non-empty list of {role, content}")
    messages = []
    for i, message in enumerate(value):
        if not isinstance(message, dict):
            raise RequestError(f"body.messages[{i}] is not an object")
        role = _ROLES.get(str(message.get("role")))
        if role is None:
            raise RequestError(f"body.messages[{i}].role {message.get('role')!r} is not "
                             "supported; use system, developer, user or assistant")
        content = message.get("content")
        if isinstance(content, list):  # content parts: text only
            texts = []
            for part in content:
                if not isinstance(part, dict) or part.get("type") != "text":
                    kind = part.get("type") if isinstance(part, dict) else type(part).__name__
                    raise RequestError(f"body.messages[{i}].content: {kind!r} parts are not "
                                     "supported; only text")
                texts.append(str(part.get("text", "")))
            content = "".join(texts)
        if not isinstance(content, str):
            raise RequestError(f"body.messages[{i}].content must be text")
        messages.append({"role": role, "content": content})
    return messages


def _body(body_text: str, fields: set[str]) -> dict[str, Any]:
    """A request body, refusing by name the fields outside ``fields`` (what this
    toolkit can't honour would change the answer)."""
    body = json.loads(body_text)
    unknown = sorted(set(body) - fields)
    if unknown:
        raise RequestError(f"body.{unknown[0]} is not supported by this toolkit"
                           + (f" (nor {', '.join(unknown[1:])})" if unknown[1:] else "")
                           + "; remove it from the request")
    return body


def _one_answer(body: dict[str, Any], per: str) -> None:
    """Refuses streaming and ``n`` > 1: a batch gives one answer per ``per``."""
    if body.get("stream"):
        raise RequestError("body.stream: true is not supported in a batch; remove it")
    if body.get("n", 1) != 1:
        raise RequestError(f"body.n {body['n']!r}: one answer per {per} only (n: 1)")


def _texts(body: dict[str, Any], field: str, noun: str, limit: int, blank: bool,
           what: str = "") -> list[str]:
    """``body[field]``, a string or a list of them (at most ``limit``), as a list; a
    whitespace-only one allowed where ``blank``. Token arrays are refused."""
    value = body.get(field)
    texts = [value] if isinstance(value, str) else value
    if isinstance(texts, list) and texts and all(
            isinstance(v, int) or isinstance(v, list) for v in texts):
        raise RequestError(f"body.{field}: token arrays are not supported; send the text")
    if not isinstance(texts, list) or not texts or not all(
            isinstance(v, str) and (v if blank else v.strip()) for v in texts):
        raise RequestError(f"body.{field} must be a non-empty string or a list of them{what}")
    if len(texts) > limit:
        raise RequestError(f"body.{field} holds {len(texts):,} {noun}; at most {limit:,} a "
                           "request")
    return texts


def _sampling_params(body: dict[str, Any], max_tokens: int | None,
                     structured: dict[str, str] | None) -> dict[str, Any]:
    """A row's sampling params in vLLM's names, every key (None: the spec's value)."""
    return {
        "max_tokens": max_tokens,
        "temperature": _number(body, "temperature", 0, 2),
        "top_p": _number(body, "top_p", 1e-9, 1),
        "seed": _number(body, "seed", -(2 ** 63), 2 ** 63 - 1, integer=True),
        "structured_outputs": structured,
    }


def _number(body: dict[str, Any], name: str, low: float, high: float,
            integer: bool = False) -> Any:
    value = body.get(name)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or (
            integer and not float(value).is_integer()) or not math.isfinite(value):
        raise RequestError(f"body.{name} must be {'a whole number' if integer else 'a number'}, "
                         f"not {value!r}")
    if not low <= value <= high:
        raise RequestError(f"body.{name} must be between {low:g} and {high:g}, not {value!r}")
    return int(value) if integer else float(value)


def _structured_outputs(response_format: Any) -> dict[str, str] | None:
    """``response_format`` as vLLM's ``structured_outputs`` (the schema as JSON text)."""
    if response_format is None:
        return None
    if not isinstance(response_format, dict):
        raise RequestError("body.response_format must be an object")
    kind = response_format.get("type")
    if kind == "text":
        return None
    if kind == "json_object":
        return {"json": json.dumps({"type": "object"})}
    if kind == "json_schema":
        schema = (response_format.get("json_schema") or {}).get("schema")
        if not isinstance(schema, dict):
            raise RequestError("body.response_format.json_schema.schema must be a JSON schema "
                             "object")
        return {"json": json.dumps(schema, separators=(",", ":"), ensure_ascii=False)}
    raise RequestError(f"body.response_format.type {kind!r} is not supported; use text, "
                     "json_object or json_schema")


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
    body = _body(body_text, {"messages", *_SAMPLING_FIELDS, *_IGNORED_FIELDS, *_TOOL_FIELDS})
    _one_answer(body, "request")
    if body.get("logprobs"):
        raise RequestError("body.logprobs is not supported; remove it")
    messages = _messages(body.get("messages"))
    call = tool_call(body, argument_max_chars)
    structured = _structured_outputs(body.get("response_format"))
    if call is not None:
        if structured is not None:
            raise RequestError("body.response_format can't be given with a tool_choice that "
                               "calls a function (the call's arguments are the answer's "
                               "shape); remove one")
        structured = {"json": json.dumps(call.schema, separators=(",", ":"),
                                         ensure_ascii=False)}
        messages = [{"role": "system", "content": call.instructions}, *messages]
    max_tokens = _number(body, "max_completion_tokens", 1, 1e9, integer=True)
    if max_tokens is None:
        max_tokens = _number(body, "max_tokens", 1, 1e9, integer=True)
    return messages, _sampling_params(body, max_tokens, structured)


class ToolCall:
    """How a request's ``tool_choice`` is answered: the JSON schema its answer is held to
    (the named function's ``parameters``; for ``required`` over several functions,
    ``{"name", "parameters"}`` of one of them, as vLLM constrains it) and the system
    message that tells the model the functions (the chat engines take no ``tools``)."""

    def __init__(self, functions: list[dict[str, Any]], named: str | None,
                 argument_max_chars: int | None = None) -> None:
        self.functions = {f["name"]: f for f in functions}
        #: The function every answer calls, or None: the answer names one of several.
        self.name = named or (functions[0]["name"] if len(functions) == 1 else None)
        if self.name is not None:
            self.schema: dict[str, Any] = _parameters(self.functions[self.name])
        else:
            self.schema = {"anyOf": [{
                "type": "object",
                "properties": {"name": {"type": "string", "enum": [f["name"]]},
                               "parameters": _parameters(f)},
                "required": ["name", "parameters"]} for f in functions]}
        if argument_max_chars is not None:
            # Compact JSON too (arguments are re-serialised anyway): whitespace allowed
            # between every token lets a weak model fill max_tokens with it. llguidance
            # reads this key; the schema a real model gets is the function's as given.
            self.schema = {**_bounded(self.schema, argument_max_chars),
                           "x-guidance": {"whitespace_flexible": False}}
        listed = "\n".join(
            f"- {f['name']}: {f.get('description') or ''} parameters: "
            f"{json.dumps(_parameters(f), ensure_ascii=False)}" for f in functions)
        self.instructions = (
            f"Call the function {self.name} by answering with its arguments as a JSON object."
            if self.name is not None else
            'Call one of the functions by answering {"name": ..., "parameters": {...}} in JSON.'
        ) + f"\nFunctions:\n{listed}"

    def answer(self, text: str) -> tuple[str, str]:
        """(the function called, its arguments as JSON text) from an answer.

        Raises:
            ValueError: the answer is not the JSON the schema asks for (cut off).
        """
        value = json.loads(text)
        if self.name is not None:
            if not isinstance(value, dict):
                raise ValueError(f"the arguments of {self.name} are not a JSON object")
            return self.name, json.dumps(value, ensure_ascii=False)
        if not isinstance(value, dict) or value.get("name") not in self.functions:
            raise ValueError("the answer names none of the request's functions")
        return str(value["name"]), json.dumps(value.get("parameters") or {},
                                              ensure_ascii=False)


def _parameters(function: dict[str, Any]) -> dict[str, Any]:
    return function.get("parameters") or {"type": "object", "properties": {}}


def _bounded(schema: Any, chars: int) -> Any:
    """``schema`` with a ``maxLength`` of ``chars`` on each string it leaves unbounded,
    and numbers it leaves unbounded kept to ``chars`` digits (answers it allows are
    still valid against the schema as given)."""
    if isinstance(schema, list):
        return [_bounded(item, chars) for item in schema]
    if not isinstance(schema, dict):
        return schema
    out = {key: (_bounded(value, chars) if key in ("items", "anyOf", "oneOf", "allOf",
                                                   "additionalProperties") else value)
           for key, value in schema.items()}
    if isinstance(out.get("properties"), dict):
        out["properties"] = {name: _bounded(value, chars)
                             for name, value in out["properties"].items()}
    types = out.get("type") if isinstance(out.get("type"), list) else [out.get("type")]
    if "string" in types and "maxLength" not in out and "enum" not in out \
            and "pattern" not in out and "format" not in out:
        out["maxLength"] = chars
    if ("integer" in types or "number" in types) and "enum" not in out:
        out.setdefault("minimum", -(10 ** chars) + 1)
        out.setdefault("maximum", 10 ** chars - 1)
    return out


def tool_call(body: dict[str, Any], argument_max_chars: int | None = None) -> ToolCall | None:
    """The function call a chat body asks for, or None for a plain answer.

    ``tool_choice`` ``"required"`` or ``{"type": "function", "function": {"name"}}``
    calls a function of ``tools``; ``"none"`` (or no tools) answers as plain chat.

    Raises:
        RequestError: a malformed tool or choice; ``"auto"`` (OpenAI's default when
            tools are given), which would need the model to decide in free text.
    """
    tools, choice = body.get("tools"), body.get("tool_choice")
    if tools is None:
        if choice not in (None, "none"):
            raise RequestError("body.tool_choice needs body.tools, the functions it calls")
        return None
    if not isinstance(tools, list) or not tools:
        raise RequestError("body.tools must be a non-empty list of "
                           '{"type": "function", "function": {"name", "parameters"}}')
    functions = []
    for i, tool in enumerate(tools):
        function = tool.get("function") if isinstance(tool, dict) else None
        if not isinstance(tool, dict) or tool.get("type") != "function" or not isinstance(
                function, dict) or not isinstance(function.get("name"), str):
            raise RequestError(f"body.tools[{i}] must be "
                               '{"type": "function", "function": {"name", "parameters"}}')
        if not isinstance(function.get("parameters", {}), dict):
            raise RequestError(f"body.tools[{i}].function.parameters must be a JSON schema "
                               "object")
        functions.append(function)
    if choice == "none":
        return None
    if choice == "required":
        return ToolCall(functions, None, argument_max_chars)
    if isinstance(choice, dict) and choice.get("type") == "function":
        name = (choice.get("function") or {}).get("name")
        if not any(f["name"] == name for f in functions):
            raise RequestError(f"body.tool_choice names the function {name!r}, which is not "
                               "in body.tools")
        return ToolCall(functions, str(name), argument_max_chars)
    if choice in (None, "auto"):
        raise RequestError("body.tool_choice 'auto' (the default with tools) is not "
                           "supported: this toolkit answers a function call only when the "
                           "request requires one; set tool_choice to 'required', "
                           '{"type": "function", "function": {"name": ...}} or \'none\'')
    raise RequestError(f"body.tool_choice {choice!r} is not supported; use 'required', 'none' "
                       'or {"type": "function", "function": {"name": ...}}')


def embedding_request(body_text: str) -> list[str]:
    """The texts an embeddings body asks to embed (``input``: a string or a list of them),
    in order: its answer's ``data[i]`` is ``input[i]``'s vector.

    Raises:
        RequestError: naming the field: no text, token arrays, more than 2,048 texts,
            ``dimensions``, a non-float encoding.
    """
    body = _body(body_text, set(_EMBEDDING_FIELDS))
    if body.get("encoding_format", "float") != "float":
        raise RequestError(f"body.encoding_format {body['encoding_format']!r} is not "
                           "supported; only float")
    return _texts(body, "input", "texts", MAX_EMBEDDING_INPUTS, blank=False,
                  what=" (the texts to embed)")


def completion_request(body_text: str) -> tuple[list[str], dict[str, Any]]:
    """A completions body as (its prompts, as written, in order, and their sampling
    params): ``prompt`` is a string or a list of them, each answered as ``choices[i]``;
    ``max_tokens`` is 16 where the body doesn't say, as OpenAI and vLLM have it.

    Raises:
        RequestError: naming the field: no prompt, token arrays, more than 2,048
            prompts, a field this toolkit can't honour (``echo``, ``suffix``, ``stop``...).
    """
    body = _body(body_text, set(_COMPLETION_FIELDS))
    _one_answer(body, "prompt")
    if body.get("logprobs") is not None:
        raise RequestError("body.logprobs is not supported; remove it")
    prompts = _texts(body, "prompt", "prompts", MAX_COMPLETION_PROMPTS, blank=True)
    max_tokens = _number(body, "max_tokens", 1, 1e9, integer=True)
    return prompts, _sampling_params(
        body, COMPLETION_DEFAULT_MAX_TOKENS if max_tokens is None else max_tokens, None)


def _short_hash(*parts: Any) -> str:
    return hashlib.sha256("\x1f".join(str(p) for p in parts).encode()).hexdigest()[:24]


def line_error(error: str, status: int | None = None) -> dict[str, Any]:
    """A failed request's ``response`` as OpenAI's error files have it: its HTTP status
    and ``body: {error: {message, type, param, code}}``, minus ``request_id``.

    Args:
        error: The row's ``error`` text (``preprocess: line 3: body.n ...``,
            ``truncated: ...``, or what the engine said).
        status: The status of a request refused before it ran (:data:`STATUS_COLUMN`);
            None for a failure after it: a truncated answer that broke the request's
            constraint is the request's (its max_tokens, 400), anything else the
            engine's (500).
    """
    message = error.removeprefix("preprocess: ")
    if status is None:
        status = 400 if error.startswith(("preprocess:", "truncated:")) else 500
    code = {404: "model_not_found"}.get(status) or (
        "invalid_request" if error.startswith("preprocess:") else
        "truncated" if error.startswith("truncated:") else "inference_error")
    named = _NAMED_FIELD.match(message)
    param = "model" if status == 404 else "max_tokens" if code == "truncated" else (
        (named.group(1) or named.group(2)) if named else None)
    return {"status_code": status, "body": {"error": {
        "message": message, "type": "invalid_request_error" if status < 500 else "server_error",
        "param": param, "code": code}}}


#: A reasoning model's thinking (DeepSeek-R1, Qwen3, gpt-oss chat templates).
THINK_OPEN, THINK_CLOSE = "<think>", "</think>"


def split_reasoning(text: str | None) -> tuple[str | None, str | None]:
    """(reasoning, answer) of a reasoning model's text, as vLLM's reasoning parsers
    split it: what it thought up to ``</think>`` (the opening ``<think>`` may be in the
    prompt, as Qwen3's chat template puts it there) and the answer after it; a text
    cut off before ``</think>`` is all reasoning; text without the tags is all answer.

    Example:
        >>> split_reasoning("<think>Acme sells shoes.</think> Retail")
        ('Acme sells shoes.', 'Retail')
    """
    if not text:
        return None, text
    head = text.lstrip()
    if THINK_CLOSE in text:
        thought, _, answer = text.partition(THINK_CLOSE)
        thought = thought.strip()
        return thought.removeprefix(THINK_OPEN).strip(), answer.strip()
    if head.startswith(THINK_OPEN):
        return head.removeprefix(THINK_OPEN).strip(), ""
    return None, text


def batch_output_line(
    custom_id: str,
    content: str | None,
    finish_reason: str | None,
    prompt_tokens: int | None,
    completion_tokens: int | None,
    error: str | None,
    model: str,
    created: int,
    error_status: int | None = None,
    url: str | None = None,
    embeddings: Sequence[Sequence[float] | None] = (),
    tool_name: str | None = None,
    completions: Sequence[tuple[str | None, str | None]] = (),
) -> dict[str, Any]:
    """One line of a Batch API output file for a written row.

    Ids are derived from the row id (and the run's start), so rewriting the file
    gives the same lines. A failed request's ``response`` is its error as OpenAI's
    error files have it (:func:`line_error`: ``status_code`` 4xx for the request's
    fault, 5xx for the engine's, ``body.error``), and ``error`` is ``{code, message}``
    as vLLM's lines carry it; ``code`` is ``invalid_request`` (or ``model_not_found``)
    for a request this toolkit could not run as given and ``inference_error`` for a
    failure after it.

    Args:
        model: The served name the line asked for: its answer's ``model``.
        error_status: See :func:`line_error`.
        url: The line's endpoint: ``/v1/embeddings`` answers ``embeddings`` (a vector
            per text of its ``input``) as an embeddings ``list``; the rest a
            ``chat.completion``.
        tool_name: The function a chat answer calls (``content`` holds its arguments):
            answered as ``message.tool_calls[0]``, ``finish_reason: tool_calls``.
        completions: For ``/v1/completions``, (text, finish_reason) of each of the
            line's prompts: a ``text_completion`` whose ``choices[i]`` answer ``prompt[i]``.

    A chat answer's thinking (``<think>...</think>``) goes to ``message.reasoning``,
    vLLM's field, and the answer after it to ``content``.
    """
    line_id = f"batch_req_{_short_hash(custom_id, created)}"
    request_id = _short_hash("request", custom_id, created)
    if error is not None:
        response = line_error(error, error_status)
        return {"id": line_id, "custom_id": custom_id,
                "response": {"status_code": response["status_code"], "request_id": request_id,
                             "body": response["body"]},
                "error": {"code": response["body"]["error"]["code"], "message": error}}
    prompt_tokens = int(prompt_tokens or 0)
    completion_tokens = int(completion_tokens or 0)
    if url == EMBEDDINGS_URL:
        return {"id": line_id, "custom_id": custom_id,
                "response": {"status_code": 200, "request_id": request_id, "body": {
                    "object": "list",
                    "data": [{"object": "embedding", "index": i,
                              "embedding": [float(x) for x in vector or ()]}
                             for i, vector in enumerate(embeddings)],
                    "model": model,
                    "usage": {"prompt_tokens": prompt_tokens, "total_tokens": prompt_tokens}}},
                "error": None}
    if url == COMPLETIONS_URL:
        body = {
            "id": f"cmpl-{_short_hash('completion', custom_id, created)}",
            "object": "text_completion",
            "created": created,
            "model": model,
            "choices": [{"index": i, "text": text or "", "logprobs": None,
                         "finish_reason": reason or "stop"}
                        for i, (text, reason) in enumerate(completions)],
            "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
                      "total_tokens": prompt_tokens + completion_tokens},
        }
        return {"id": line_id, "custom_id": custom_id,
                "response": {"status_code": 200, "request_id": request_id, "body": body},
                "error": None}
    reasoning, content = split_reasoning(content) if tool_name is None else (None, content)
    message: dict[str, Any] = {"role": "assistant", "content": content or ""}
    if reasoning is not None:
        message["reasoning"] = reasoning
    if tool_name is not None:
        message = {"role": "assistant", "content": None, "tool_calls": [{
            "id": f"call_{_short_hash('call', custom_id, created)}", "type": "function",
            "function": {"name": tool_name, "arguments": content or "{}"}}]}
        finish_reason = "tool_calls"
    body = {
        "id": f"chatcmpl-{_short_hash('completion', custom_id, created)}",
        "object": "chat.completion",
        "created": created,
        "model": model,
        "choices": [{
            "index": 0,
            "message": message,
            "finish_reason": finish_reason or "stop",
        }],
        "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
                  "total_tokens": prompt_tokens + completion_tokens},
    }
    return {"id": line_id, "custom_id": custom_id,
            "response": {"status_code": 200, "request_id": request_id, "body": body},
            "error": None}


# -- the files of a run ----------------------------------------------------------

OPENAI_BATCH_FORMAT = "openai-batch"
#: Rows per staged file (one Ray Data block each) unless data.partitions says.
ROWS_PER_BLOCK = 256
_SHOWN = 5


def request_lines(source: str) -> Iterator[tuple[int, str]]:
    """(line number, text) of the file's non-blank lines, local or a URI.

    Raises:
        InputDataError: the file is missing or can't be read.
    """
    from toolkit.run.input.file_access import open_binary as _open_binary

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
    for those on more than one."""

    def __init__(self) -> None:
        self._first_line: dict[str, int] = {}
        #: custom_id -> every line it is on, the first included (ids on 2+ lines only).
        self.repeated: dict[str, list[int]] = {}

    def add(self, custom_id: str, line: int) -> None:
        """Note the custom_id of ``line`` (1-based)."""
        if custom_id in self._first_line:
            self.repeated.setdefault(custom_id, [self._first_line[custom_id]]).append(line)
        else:
            self._first_line[custom_id] = line

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


class FileScan:
    """What reading a request file found, as :func:`scan_requests` goes: requests (its
    non-blank lines), the lines that can't be requests, repeated ids, and how many
    requests can run (the rest are error lines)."""

    def __init__(self) -> None:
        self.requests = 0
        self.runnable = 0
        self.unusable: list[UnusableLine] = []
        self.ids = CustomIds()

    def describe_unusable(self) -> str:
        """``line 3: not valid JSON (...); line 7: no custom_id; ...``, five at most."""
        shown = "; ".join(str(line) for line in self.unusable[:_SHOWN])
        more = (f"; and {len(self.unusable) - _SHOWN} more lines"
                if len(self.unusable) > _SHOWN else "")
        return shown + more


def scan_requests(source: str, served: Sequence[str] | None, scan: FileScan,
                  limit: int | None = None,
                  endpoint: str = CHAT_COMPLETIONS_URL) -> Iterator[dict[str, Any]]:
    """The request rows of the file at ``source`` (:func:`parse_request_line`), the first
    ``limit`` requests; what a row can't say (lines that are no request, repeated ids)
    is noted in ``scan``.

    Raises:
        InputDataError: the file is missing or can't be read.
    """
    for number, text in request_lines(source):
        if limit is not None and scan.requests >= limit:
            return
        scan.requests += 1
        try:
            row = parse_request_line(text, number, served, endpoint)
        except UnusableLine as unusable:
            scan.unusable.append(unusable)
            continue
        scan.ids.add(str(row[ID_COLUMN]), number)
        scan.runnable += row[REQUEST_ERROR_COLUMN] is None
        yield from text_rows(row)


def refused_lines(rows: Iterator[dict[str, Any]], created: int) -> Iterator[dict[str, Any]]:
    """The output lines of the request rows that were refused before running."""
    for row in rows:
        if row[REQUEST_ERROR_COLUMN] is not None:
            yield batch_output_line(row[ID_COLUMN], None, None, None, None,
                                    f"preprocess: {row[REQUEST_ERROR_COLUMN]}",
                                    row[MODEL_COLUMN] or "", created, row[STATUS_COLUMN])


def stage_requests(spec: JobSpec, run_dir: RunDirectory, clock=time.time) -> str:
    """Scan ``data.input`` once into ``<output>/_input`` (Parquet); return its path.

    The first ``data.rows`` requests (non-blank lines) are staged, in blocks of
    ``ceil(requests / data.partitions)`` rows (default 256), so progress and
    retries move a block at a time. A staged copy that is complete is reused.

    Raises:
        InputDataError: the file is missing, unreadable or empty; a line is not a JSON
            object with a custom_id, or two lines share one (named, with their line
            numbers); or no request can run: ``_batch_output.jsonl`` then holds each
            one's error line. In each case nothing is run (Ray never starts).
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
    scan = FileScan()
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
    for row in scan_requests(data.input, served_model_names(spec), scan, limit=data.rows,
                             endpoint=run_endpoint(spec)):
        rows.append(row)
        if len(rows) >= block and not scan.unusable:  # a file refused needs no more blocks
            flush()
    flush()
    refused = None
    if scan.unusable:
        refused = InputDataError(
            f"data.input: {data.input} has {len(scan.unusable)} line(s) that are not a "
            f"request with a custom_id: {scan.describe_unusable()}. Each line must be a "
            "JSON object with a unique custom_id string, so its answer can be matched to it.",
            hint="Fix those lines (or remove them), then run again.")
    elif scan.ids.repeated:
        refused = InputDataError(
            f"data.input: {data.input} has {scan.ids.describe()}. Results are keyed on "
            "custom_id, so each must be unique.",
            hint="Give every request its own custom_id, then run again.")
    elif scan.requests == 0:
        refused = InputDataError(
            f"data.input: {data.input} holds no requests (no non-blank line).",
            hint="Point --input at an OpenAI Batch API request file (JSONL), one request "
                 "a line.")
    if refused is not None:
        run_dir.clear_staged_input()
        raise refused
    if scan.runnable == 0:
        shown, first = write_refused_output(run_dir, spec, clock)
        run_dir.clear_staged_input()
        raise InputDataError(
            f"data.input: none of the {scan.requests:,} requests in {data.input} can run "
            f"as given, so no model was loaded; {shown} has each one's error line "
            f"(the first: {first}).",
            hint="Fix the requests their error lines name, then run again.")
    run_dir.mark_staged_input_complete()
    return staged


def write_refused_output(run_dir: RunDirectory, spec: JobSpec,
                         clock=time.time) -> tuple[str, str]:
    """``_batch_output.jsonl`` from the staged rows alone, every one refused before it
    ran: where it is (as the user gave the output folder) and its first error."""
    import pyarrow.dataset as pads

    table = pads.dataset(f"{run_dir.root}/{STAGED_INPUT_DIR}", filesystem=run_dir.fs,
                         format="parquet").to_table().sort_by(LINE_COLUMN)
    lines = list(refused_lines(iter(table.to_pylist()), int(clock())))
    _write_lines(run_dir, iter(lines))
    first = lines[0]["response"]["body"]["error"]["message"] if lines else ""
    return f"{spec.data.output.rstrip('/')}/{BATCH_OUTPUT_FILE}", first


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


def write_batch_output(run_dir: RunDirectory, spec: JobSpec, clock=time.time) -> str:
    """Write ``_batch_output.jsonl`` from the run's result files; return a note naming it.

    One line per written row (every request: answered or with its error), ordered
    by the request file's line numbers.
    """
    count = _write_lines(run_dir, batch_output_lines(run_dir, spec.data.output_format,
                                                     spec.engine.model, int(clock())))
    shown = f"{spec.data.output.rstrip('/')}/{BATCH_OUTPUT_FILE}"
    return (f"Batch API output: {shown} ({count:,} lines, one per "
            "request, matched by custom_id).")


class OpenAIBatchFormat(RunFormat):
    """An OpenAI Batch API request file in, the Batch API output file out."""

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
