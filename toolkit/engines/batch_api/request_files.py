"""Rows as a Batch API's request lines, cut into files within the provider's limits.

A line is what the ``openai-batch`` job reads (:mod:`toolkit.run.input.openai_batch`):
``{"custom_id", "method": "POST", "url", "body"}``, its body the chat-completions (or
completions) request the http engine sends for the same row
(:func:`toolkit.engines.http.chat_stage.chat_payload`), so a job gives the same
requests on both engines. ``custom_id`` is the row's id, as text.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import Any

from toolkit.engines.http.chat_stage import chat_payload

CHAT_COMPLETIONS_URL = "/v1/chat/completions"
COMPLETIONS_URL = "/v1/completions"


def endpoint(apply_chat_template: bool) -> str:
    """The batches' endpoint: chat completions, or completions for prompts sent as
    written."""
    return CHAT_COMPLETIONS_URL if apply_chat_template else COMPLETIONS_URL


def request_line(custom_id: str, row: Mapping[str, Any], model: str, via: str | None,
                 apply_chat_template: bool = True) -> bytes:
    """One request line (newline included) for a prepared row.

    Raises:
        ValueError: the row's structured output can't be sent (``via``).
    """
    body = chat_payload(row, model, via, None, apply_chat_template)
    return (json.dumps({"custom_id": custom_id, "method": "POST",
                        "url": endpoint(apply_chat_template), "body": body},
                       ensure_ascii=False, separators=(",", ":")) + "\n").encode()


def split_files(lines: Iterable[tuple[str, bytes]], max_lines: int,
                max_bytes: int) -> list[list[tuple[str, bytes]]]:
    """``(custom_id, line)`` pairs in order, cut into files of at most ``max_lines``
    lines and ``max_bytes`` bytes (a line over ``max_bytes`` alone is the caller's to
    refuse: see :func:`too_large`)."""
    files: list[list[tuple[str, bytes]]] = []
    size = 0
    for custom_id, line in lines:
        if not files or len(files[-1]) >= max_lines or size + len(line) > max_bytes:
            files.append([])
            size = 0
        files[-1].append((custom_id, line))
        size += len(line)
    return files


def too_large(line: bytes, max_bytes: int) -> str | None:
    """Why a line can't go in any file, or None."""
    if len(line) <= max_bytes:
        return None
    return (f"engine: the request is {len(line):,} bytes, more than a provider file may "
            f"hold (engine.bytes_per_file {max_bytes:,})")
