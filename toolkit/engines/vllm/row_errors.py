"""vLLM's row errors in the toolkit's words, where the toolkit has its own for them:
the same row fails with the same message on every engine."""

from __future__ import annotations

import re

from toolkit.spec.row_contract import prompt_too_long

#: vLLM's refusals of a prompt longer than ``max_model_len``, each giving (prompt
#: tokens, max_model_len): its input processor's, and its renderer's.
_TOO_LONG = (
    (re.compile(r"prompt \(length (?P<tokens>\d+)\) is longer than the maximum model length "
                r"of (?P<limit>\d+)")),
    (re.compile(r"maximum context length is (?P<limit>\d+) tokens\..*?your prompt contains "
                r"(?P<at_least>at least )?(?P<tokens>\d+) input tokens")),
)


def toolkit_row_error(message: str | None) -> str | None:
    """``message`` (Ray Data LLM's ``__inference_error__`` of a row) as the toolkit
    says it where it has words of its own (a prompt over ``max_model_len``); else as
    it was. A prompt within the limit that only fails with its ``max_tokens`` keeps
    vLLM's words, which say so."""
    if not message:
        return message
    for pattern in _TOO_LONG:
        found = pattern.search(message)
        if found and int(found["tokens"]) > int(found["limit"]):
            return prompt_too_long(int(found["tokens"]), int(found["limit"]),
                                   at_least=bool(found.groupdict().get("at_least")))
    return message
