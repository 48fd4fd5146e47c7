"""The lines of a Batch API output file, as typed shapes (vLLM's ``BatchRequestOutput``):
an answered request's line, and a failed one's with its HTTP status and error as
OpenAI's error files have them (:func:`line_error`), vLLM's ``error`` beside. 4xx is
the request's fault (400 a field this toolkit can't run, 404 a model it doesn't
serve), 5xx the engine's. The answers' bodies are OpenAI's ``chat.completion``,
``text_completion`` and embeddings ``list`` (which tests check with the ``openai``
package's own models). The shapes are TypedDicts, not pydantic models: a line is
built once from values already checked and written as JSON, a million times for a
big file, so it costs what building a dict costs."""

from __future__ import annotations

import hashlib
import re
from collections.abc import Sequence
from typing import Any

from typing_extensions import TypedDict

from toolkit.run.input.openai_batch.line_shapes import COMPLETIONS_URL, EMBEDDINGS_URL

#: The field a request's error names first (``line 3: body.n 2: ...``, ``line 3: url ...``).
_NAMED_FIELD = re.compile(r"(?:line \d+: )?(?:body\.(\w+)|(url|method|body)\b)")
#: A reasoning model's thinking (DeepSeek-R1, Qwen3, gpt-oss chat templates).
THINK_OPEN, THINK_CLOSE = "<think>", "</think>"


class ErrorDetail(TypedDict):
    """``body.error`` of a failed request's response, as OpenAI's error files have it."""

    message: str
    type: str
    param: str | None
    code: str


class LineError(TypedDict):
    """A failed line's ``error``, as vLLM's output lines carry it."""

    code: str
    message: str


class LineResponse(TypedDict):
    """A line's ``response``: its HTTP status and the body the endpoint answered."""

    status_code: int
    request_id: str
    body: dict[str, Any]


class BatchOutputLine(TypedDict):
    """One line of an output file; ``error`` is None for an answered request."""

    id: str
    custom_id: str
    response: LineResponse
    error: LineError | None


def _short_hash(*parts: Any) -> str:
    return hashlib.sha256("\x1f".join(str(p) for p in parts).encode()).hexdigest()[:24]


def line_error(error: str, status: int | None = None) -> tuple[int, ErrorDetail]:
    """A failed request's HTTP status and ``body.error``, as OpenAI's error files have it.

    Args:
        error: The row's ``error`` text (``preprocess: line 3: body.n ...``,
            ``truncated: ...``, or what the engine said).
        status: The status of a request refused before it ran (its ``error_status``);
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
    return status, ErrorDetail(
        message=message, type="invalid_request_error" if status < 500 else "server_error",
        param=param, code=code)


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


def _usage(prompt_tokens: int, completion_tokens: int) -> dict[str, int]:
    return {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens}


def _chat_completion(custom_id: str, content: str | None, finish_reason: str | None,
                     tool_name: str | None, created: int, model: str,
                     usage: dict[str, int]) -> dict[str, Any]:
    """A chat answer's ``chat.completion`` body."""
    reasoning, content = split_reasoning(content) if tool_name is None else (None, content)
    message: dict[str, Any] = {"role": "assistant", "content": content or ""}
    if reasoning is not None:
        message["reasoning"] = reasoning
    if tool_name is not None:
        message = {"role": "assistant", "content": None, "tool_calls": [{
            "id": f"call_{_short_hash('call', custom_id, created)}", "type": "function",
            "function": {"name": tool_name, "arguments": content or "{}"}}]}
        finish_reason = "tool_calls"
    return {"id": f"chatcmpl-{_short_hash('completion', custom_id, created)}",
            "object": "chat.completion", "created": created, "model": model,
            "choices": [{"index": 0, "message": message,
                         "finish_reason": finish_reason or "stop"}],
            "usage": usage}


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
) -> BatchOutputLine:
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
    failed = None
    prompt_tokens = int(prompt_tokens or 0)
    completion_tokens = int(completion_tokens or 0)
    if error is not None:
        status, detail = line_error(error, error_status)
        body: dict[str, Any] = {"error": detail}
        failed = LineError(code=detail["code"], message=error)
    elif url == EMBEDDINGS_URL:
        status, body = 200, {
            "object": "list",
            "data": [{"object": "embedding", "index": i,
                      "embedding": [float(x) for x in vector or ()]}
                     for i, vector in enumerate(embeddings)],
            "model": model,
            "usage": {"prompt_tokens": prompt_tokens, "total_tokens": prompt_tokens}}
    elif url == COMPLETIONS_URL:
        status, body = 200, {
            "id": f"cmpl-{_short_hash('completion', custom_id, created)}",
            "object": "text_completion", "created": created, "model": model,
            "choices": [{"index": i, "text": text or "", "logprobs": None,
                         "finish_reason": reason or "stop"}
                        for i, (text, reason) in enumerate(completions)],
            "usage": _usage(prompt_tokens, completion_tokens)}
    else:
        status, body = 200, _chat_completion(custom_id, content, finish_reason, tool_name,
                                             created, model,
                                             _usage(prompt_tokens, completion_tokens))
    return BatchOutputLine(id=line_id, custom_id=custom_id,
                           response=LineResponse(status_code=status, request_id=request_id,
                                                 body=body),
                           error=failed)
