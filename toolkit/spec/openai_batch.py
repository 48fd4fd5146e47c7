"""The OpenAI Batch API file format, as pure functions: request lines in, output lines out.

A Batch API request file (also what ``vllm run-batch`` reads) is JSONL, one request a
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

or, for a request that failed, ``"response": null, "error": {"code", "message"}``.

Here a line becomes a row (:func:`parse_request_line`, which never raises: a line that
is not JSON or lacks a ``custom_id`` is a row with ``request_error`` set, named by its
line number), a row's body becomes chat messages and per-row sampling params in the
vLLM names both engines read (:func:`chat_request`), and a written row becomes an
output line (:func:`batch_output_line`). Reading files and writing the output file is
:mod:`toolkit.run.openai_batch`.

A line without a usable ``custom_id`` still needs a row id (results are checkpointed
and resumed by it), and that id must not be one a request of the same file uses: a
file whose line 1 is not JSON may well have a request ``"custom_id": "line-1"``. So
such rows are keyed :func:`unnamed_row_id` (``"\\x00line-1"``), a form no request can
take: a ``custom_id`` starting with a NUL is refused as unusable. Output lines show
them as ``line-N`` (``toolkit run``'s file, read by people) or ``null`` (the
server's error files, as OpenAI's error files have it).
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Callable
from typing import Any

CHAT_COMPLETIONS_URL = "/v1/chat/completions"

#: Columns of a staged request file, in order. ``custom_id`` is the row id;
#: ``line`` the 1-based line number; ``body`` the request body as compact JSON text
#: (text, so rows with different bodies share one Arrow type).
ID_COLUMN = "custom_id"
LINE_COLUMN = "line"
URL_COLUMN = "url"
BODY_COLUMN = "body"
REQUEST_ERROR_COLUMN = "request_error"
REQUEST_COLUMNS: dict[str, str] = {
    ID_COLUMN: "string", LINE_COLUMN: "int64", URL_COLUMN: "string", BODY_COLUMN: "string",
    REQUEST_ERROR_COLUMN: "string",
}

#: Body fields that become sampling params (vLLM's names on the right).
_SAMPLING_FIELDS = ("max_tokens", "max_completion_tokens", "temperature", "top_p", "seed",
                    "response_format")
#: Body fields that don't change an answer, accepted and not used.
_IGNORED_FIELDS = ("model", "user", "metadata", "store", "service_tier", "stream", "n",
                   "logprobs", "parallel_tool_calls")
_ROLES = {"system": "system", "developer": "system", "user": "user", "assistant": "assistant"}


#: Row ids of lines without a usable custom_id start with this (see the module's doc).
UNNAMED_ID_PREFIX = "\x00line-"


def synthetic_id(line: int) -> str:
    """How a line without a usable ``custom_id`` is named for people: ``line-17``."""
    return f"line-{line}"


def unnamed_row_id(line: int) -> str:
    """The row id of a line without a usable ``custom_id``: ``"\\x00line-17"``, which no
    request's own ``custom_id`` can clash with."""
    return f"{UNNAMED_ID_PREFIX}{line}"


def unnamed_line(row_id: str) -> int | None:
    """The line number in an :func:`unnamed_row_id`, or None for a request's own id."""
    number = row_id[len(UNNAMED_ID_PREFIX):]
    return int(number) if row_id.startswith(UNNAMED_ID_PREFIX) and number.isdigit() else None


def _bad_line(line: int, message: str, custom_id: str | None = None,
              unnamed_id: Callable[[int], str] = synthetic_id) -> dict[str, Any]:
    return {ID_COLUMN: custom_id or unnamed_id(line), LINE_COLUMN: line, URL_COLUMN: None,
            BODY_COLUMN: None, REQUEST_ERROR_COLUMN: f"line {line}: {message}"}


def parse_request_line(text: str, line: int,
                       unnamed_id: Callable[[int], str] = synthetic_id) -> dict[str, Any]:
    """One request line as a row of :data:`REQUEST_COLUMNS`; never raises.

    A line that is not a JSON object, lacks a string ``custom_id``, or is not a POST
    to ``/v1/chat/completions`` with an object ``body`` is a row whose
    ``request_error`` names the line, so it becomes an error row of the output. A
    UTF-8 byte order mark before line 1 is ignored.

    Args:
        unnamed_id: The row id of a line without a usable custom_id of its own:
            ``line-N`` to show one line; where rows are keyed on the id (a staged
            file), :func:`unnamed_row_id`, which can't clash with a request's id.
    """
    if line == 1:
        text = text.removeprefix("\ufeff")
    try:
        request = json.loads(text)
    except ValueError as exc:
        where = f" at column {exc.colno}" if isinstance(exc, json.JSONDecodeError) else ""
        reason = exc.msg if isinstance(exc, json.JSONDecodeError) else str(exc)
        return _bad_line(line, f"not valid JSON ({reason}{where})", unnamed_id=unnamed_id)
    if not isinstance(request, dict):
        return _bad_line(line, f"expected a JSON object, got {type(request).__name__}",
                         unnamed_id=unnamed_id)
    custom_id = request.get("custom_id")
    if not isinstance(custom_id, str) or not custom_id.strip():
        got = "no custom_id" if custom_id is None else f"custom_id {custom_id!r} is not a string"
        return _bad_line(line, f"{got}; every request needs a unique custom_id string",
                         unnamed_id=unnamed_id)
    if custom_id.startswith("\x00"):  # the unnamed rows' own form: refused, so no clash
        return _bad_line(line, "a custom_id starting with a NUL character is not supported; "
                               "every request needs a unique custom_id string",
                         unnamed_id=unnamed_id)
    method = request.get("method", "POST")
    url = request.get("url")
    if str(method).upper() != "POST":
        return _bad_line(line, f"method {method!r} is not supported; only POST", custom_id)
    if url != CHAT_COMPLETIONS_URL:
        return {**_bad_line(line, f"url {url!r} is not supported; only "
                                  f"{CHAT_COMPLETIONS_URL} (chat completions)", custom_id),
                URL_COLUMN: url if isinstance(url, str) else None}
    body = request.get("body")
    if not isinstance(body, dict):
        return _bad_line(line, "body must be a JSON object with model and messages", custom_id)
    return {ID_COLUMN: custom_id, LINE_COLUMN: line, URL_COLUMN: url,
            BODY_COLUMN: json.dumps(body, separators=(",", ":"), ensure_ascii=False),
            REQUEST_ERROR_COLUMN: None}


def _messages(value: Any) -> list[dict[str, str]]:
    if not isinstance(value, list) or not value:
        raise ValueError("body.messages must be a non-empty list of {role, content}")
    messages = []
    for i, message in enumerate(value):
        if not isinstance(message, dict):
            raise ValueError(f"body.messages[{i}] is not an object")
        role = _ROLES.get(str(message.get("role")))
        if role is None:
            raise ValueError(f"body.messages[{i}].role {message.get('role')!r} is not "
                             "supported; use system, developer, user or assistant")
        content = message.get("content")
        if isinstance(content, list):  # content parts: text only
            texts = []
            for part in content:
                if not isinstance(part, dict) or part.get("type") != "text":
                    kind = part.get("type") if isinstance(part, dict) else type(part).__name__
                    raise ValueError(f"body.messages[{i}].content: {kind!r} parts are not "
                                     "supported; only text")
                texts.append(str(part.get("text", "")))
            content = "".join(texts)
        if not isinstance(content, str):
            raise ValueError(f"body.messages[{i}].content must be text")
        messages.append({"role": role, "content": content})
    return messages


def _number(body: dict[str, Any], name: str, low: float, high: float,
            integer: bool = False) -> Any:
    value = body.get(name)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or (
            integer and not float(value).is_integer()) or not math.isfinite(value):
        raise ValueError(f"body.{name} must be {'a whole number' if integer else 'a number'}, "
                         f"not {value!r}")
    if not low <= value <= high:
        raise ValueError(f"body.{name} must be between {low:g} and {high:g}, not {value!r}")
    return int(value) if integer else float(value)


def _structured_outputs(response_format: Any) -> dict[str, str] | None:
    """``response_format`` as vLLM's ``structured_outputs`` (the schema as JSON text)."""
    if response_format is None:
        return None
    if not isinstance(response_format, dict):
        raise ValueError("body.response_format must be an object")
    kind = response_format.get("type")
    if kind == "text":
        return None
    if kind == "json_object":
        return {"json": json.dumps({"type": "object"})}
    if kind == "json_schema":
        schema = (response_format.get("json_schema") or {}).get("schema")
        if not isinstance(schema, dict):
            raise ValueError("body.response_format.json_schema.schema must be a JSON schema "
                             "object")
        return {"json": json.dumps(schema, separators=(",", ":"), ensure_ascii=False)}
    raise ValueError(f"body.response_format.type {kind!r} is not supported; use text, "
                     "json_object or json_schema")


def chat_request(body_text: str) -> tuple[list[dict[str, str]], dict[str, Any]]:
    """A request body as (chat messages, this row's sampling params).

    The params use vLLM's names, as both engines read them, and hold every key
    (``None`` where the body doesn't say, leaving the spec's value):
    ``max_tokens`` (``max_completion_tokens`` wins), ``temperature``, ``top_p``,
    ``seed`` and ``structured_outputs`` (``{"json": schema text}`` from
    ``response_format``). A field that would change answers but that this toolkit
    can't honour (tools, stop, n > 1, ...) is refused by name.

    Raises:
        ValueError: naming the body field that is wrong or unsupported.
    """
    body = json.loads(body_text)
    unknown = sorted(set(body) - {"messages", *_SAMPLING_FIELDS, *_IGNORED_FIELDS})
    if unknown:
        raise ValueError(f"body.{unknown[0]} is not supported by this toolkit"
                         + (f" (nor {', '.join(unknown[1:])})" if unknown[1:] else "")
                         + "; remove it from the request")
    if body.get("stream"):
        raise ValueError("body.stream: true is not supported in a batch; remove it")
    if body.get("n", 1) != 1:
        raise ValueError(f"body.n {body['n']!r}: one answer per request only (n: 1)")
    if body.get("logprobs"):
        raise ValueError("body.logprobs is not supported; remove it")
    messages = _messages(body.get("messages"))
    max_tokens = _number(body, "max_completion_tokens", 1, 1e9, integer=True)
    if max_tokens is None:
        max_tokens = _number(body, "max_tokens", 1, 1e9, integer=True)
    params = {
        "max_tokens": max_tokens,
        "temperature": _number(body, "temperature", 0, 2),
        "top_p": _number(body, "top_p", 1e-9, 1),
        "seed": _number(body, "seed", -(2 ** 63), 2 ** 63 - 1, integer=True),
        "structured_outputs": _structured_outputs(body.get("response_format")),
    }
    return messages, params


def _short_hash(*parts: Any) -> str:
    return hashlib.sha256("\x1f".join(str(p) for p in parts).encode()).hexdigest()[:24]


def batch_output_line(
    custom_id: str,
    content: str | None,
    finish_reason: str | None,
    prompt_tokens: int | None,
    completion_tokens: int | None,
    error: str | None,
    model: str,
    created: int,
    name_unnamed: bool = True,
) -> dict[str, Any]:
    """One line of a Batch API output file for a written row.

    Ids are derived from the row id (and the run's start), so rewriting the
    file gives the same lines. A row with an error has ``response: null`` and
    ``error: {code, message}``; ``code`` is ``invalid_request`` for a request this
    toolkit could not run as given and ``inference_error`` for a failure after it.

    Args:
        custom_id: The row's id: the request's custom_id, or an :func:`unnamed_row_id`.
        name_unnamed: Show a line without a usable custom_id as ``line-N``; else as
            ``null`` (as OpenAI's error files: a made-up name could be a request's).
    """
    line_id = f"batch_req_{_short_hash(custom_id, created)}"
    line = unnamed_line(custom_id)
    shown: str | None = custom_id
    if line is not None:
        shown = synthetic_id(line) if name_unnamed else None
    if error is not None:
        code = "invalid_request" if error.startswith("preprocess:") else "inference_error"
        return {"id": line_id, "custom_id": shown, "response": None,
                "error": {"code": code, "message": error}}
    prompt_tokens = int(prompt_tokens or 0)
    completion_tokens = int(completion_tokens or 0)
    body = {
        "id": f"chatcmpl-{_short_hash('completion', custom_id, created)}",
        "object": "chat.completion",
        "created": created,
        "model": model,
        "choices": [{
            "index": 0,
            "message": {"role": "assistant", "content": content or ""},
            "finish_reason": finish_reason or "stop",
        }],
        "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
                  "total_tokens": prompt_tokens + completion_tokens},
    }
    return {"id": line_id, "custom_id": shown,
            "response": {"status_code": 200, "request_id": _short_hash("request", custom_id,
                                                                      created),
                         "body": body},
            "error": None}
