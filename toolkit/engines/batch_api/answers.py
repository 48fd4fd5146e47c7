"""A Batch API's output and error lines as the run's columns, by ``custom_id``.

An output line is ``{"custom_id", "response": {"status_code", "body"}, "error"}``
(OpenAI's shape; :mod:`toolkit.run.input.openai_batch.output_lines` writes the
same): a 200's body is a chat completion, read as the http engine reads one
(:func:`toolkit.engines.http.chat_stage.read_response`: the answer, ``usage``'s
tokens, the finish reason); any other status, or a line's own ``error``, is an error
row with the provider's status and message.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from toolkit.engines.http.chat_stage import read_response
from toolkit.spec.row_contract import (
    ERROR_COLUMN,
    FINISH_REASON_COLUMN,
    GENERATED_LOGPROB_COLUMN,
    GENERATED_TEXT_COLUMN,
    RAY_LLM_ERROR_COLUMN,
)

#: The error codes of a line its batch ended before running (OpenAI lists them in
#: the error file): not an answer, so the line is sent again.
UNFINISHED_CODES = frozenset({"batch_expired", "batch_cancelled"})
#: What the stage adds to every row.
ANSWER_COLUMNS = (GENERATED_TEXT_COLUMN, "num_input_tokens", "num_generated_tokens",
                  FINISH_REASON_COLUMN, GENERATED_LOGPROB_COLUMN, ERROR_COLUMN,
                  RAY_LLM_ERROR_COLUMN)


def error_answer(message: str) -> dict[str, Any]:
    """The columns of a row that got no answer, saying why."""
    return {**dict.fromkeys(ANSWER_COLUMNS), ERROR_COLUMN: message,
            RAY_LLM_ERROR_COLUMN: message}


def line_answer(line: Mapping[str, Any]) -> dict[str, Any]:
    """The columns of one output or error line."""
    response = line.get("response") or {}
    status = response.get("status_code")
    body = response.get("body")
    if status == 200 and not line.get("error") and isinstance(body, Mapping):
        answer = read_response({"http_response": body})
        return {column: answer.get(column) for column in ANSWER_COLUMNS}
    detail = line.get("error")
    if not detail and isinstance(body, Mapping):
        detail = body.get("error")
    if isinstance(detail, Mapping):
        detail = detail.get("message") or json.dumps(detail)
    where = f"provider error {status}" if status is not None else "provider error"
    return error_answer(f"{where}: {detail or json.dumps(body)[:300]}")


def read_lines(text: str) -> dict[str, dict[str, Any]]:
    """Each line of an output or error file that its batch ran, by ``custom_id``
    (blank lines and lines of :data:`UNFINISHED_CODES` skipped)."""
    found = {}
    for raw in text.splitlines():
        if raw.strip():
            line = json.loads(raw)
            error = line.get("error")
            if isinstance(error, Mapping) and error.get("code") in UNFINISHED_CODES:
                continue
            found[str(line.get("custom_id"))] = line
    return found
