"""Each answer of a generate job, checked: why generation ended, and which checks it failed.

Runs in the pipeline's finish step on the workers, after the job's postprocess, for
the last model stage when it generates text. A row gets:

- ``finish_reason``: ``stop``, ``length`` (cut off at ``max_tokens``) or ``error``,
  from the engine where it says (ours, an HTTP server), else from the token count:
  Ray Data LLM's vLLM stage reports no reason, and vLLM ends a row with ``length``
  exactly when it generated ``max_tokens`` tokens;
- ``failed_checks``: the names of the checks it failed (``spec.checks``), or null.

An answer cut off at ``max_tokens`` that the postprocess then rejects is reported as
cut off, naming the setting, not as an answer off the choices.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from toolkit.spec.quality import ChecksConfig
from toolkit.spec.row_contract import (
    FINISH_REASON_COLUMN,
    MAX_TOKENS_COLUMN,
    SAMPLING_PARAMS_COLUMN,
    plain,
)

if TYPE_CHECKING:
    from pathlib import Path

    from toolkit.spec.job_definition import JobDefinition

#: Result columns ending so hold the model's probability of its answer.
CONFIDENCE_SUFFIX = "_confidence"


@dataclass(frozen=True)
class RowChecks:
    """What the finish step checks on each answer; travels to the workers."""

    enabled: tuple[str, ...] = ("truncated", "empty", "invalid")
    refusal: tuple[str, ...] = ()
    min_confidence: float | None = None
    custom: Callable[[dict[str, Any]], Any] | None = None
    custom_name: str | None = None
    #: The spec's sampling.max_tokens: a row's own (an OpenAI batch line's) wins.
    max_tokens: int | None = None
    _patterns: tuple[re.Pattern[str], ...] = field(default=(), compare=False)

    @classmethod
    def from_config(cls, checks: ChecksConfig, max_tokens: int | None,
                    custom: Callable[[dict[str, Any]], Any] | None = None) -> "RowChecks":
        return cls(enabled=tuple(checks.enabled), refusal=tuple(checks.refusal),
                   min_confidence=checks.min_confidence, custom=custom,
                   custom_name=checks.custom_name if custom is not None else None,
                   max_tokens=max_tokens,
                   _patterns=tuple(re.compile(p, re.IGNORECASE) for p in checks.refusal))

    @property
    def names(self) -> list[str]:
        """Every check a row may record, built-in first."""
        return [*self.enabled, *([self.custom_name] if self.custom_name else [])]

    def row_max_tokens(self, row: Mapping[str, Any]) -> int | None:
        own = row.get(MAX_TOKENS_COLUMN)
        if not own:
            params = plain(row.get(SAMPLING_PARAMS_COLUMN))
            own = params.get("max_tokens") if isinstance(params, Mapping) else None
        return int(own) if own else self.max_tokens

    def finish_reason(self, row: Mapping[str, Any]) -> str:
        """``stop`` or ``length`` for a row the engine answered."""
        reported = row.get(FINISH_REASON_COLUMN)
        if isinstance(reported, str) and reported:
            return reported
        generated, limit = row.get("num_generated_tokens"), self.row_max_tokens(row)
        if isinstance(generated, (int, float)) and limit and generated >= limit:
            return "length"
        return "stop"

    def truncated_error(self, row: Mapping[str, Any], text: str) -> str:
        limit = self.row_max_tokens(row)
        shown = text if len(text) <= 60 else text[:57] + "..."
        return (f"truncated: the answer was cut off at max_tokens={limit} ({shown!r}); "
                "raise sampling.max_tokens")

    def failed(self, row: Mapping[str, Any], text: str, finish_reason: str,
               results: Mapping[str, Any], rejected: bool) -> list[str]:
        """The checks an answered row fails. ``rejected``: the postprocess refused it."""
        enabled = self.enabled
        failed = []
        if "truncated" in enabled and finish_reason == "length":
            failed.append("truncated")
        if "empty" in enabled and not text.strip():
            failed.append("empty")
        if "invalid" in enabled and rejected and finish_reason != "length":
            failed.append("invalid")
        if "refusal" in enabled and any(p.search(text) for p in self._patterns):
            failed.append("refusal")
        if "low_confidence" in enabled and self.min_confidence is not None and any(
                isinstance(v, float) and not math.isnan(v) and v < self.min_confidence
                for k, v in results.items() if k.endswith(CONFIDENCE_SUFFIX)):
            failed.append("low_confidence")
        if self.custom is not None and self.custom_name is not None and not rejected:
            try:
                verdict = self.custom({**row, **results, FINISH_REASON_COLUMN: finish_reason})
            except Exception:  # noqa: BLE001 - a check that can't judge a row fails it
                verdict = "raised"
            if verdict not in (None, True):
                failed.append(self.custom_name)
        return failed


def custom_check_file(checks: ChecksConfig, job: "JobDefinition[Any]") -> "Path | None":
    """The file of the user's own check (``checks.custom``), checked to be a function of
    the project (the job file's folder, or the folder the command runs from)."""
    if checks.custom is None:
        return None
    from pathlib import Path

    from toolkit.spec.jobs.user_classes import check_user_function

    base = job.source_dir or Path.cwd()
    return check_user_function(checks.custom, "checks.custom", base=base,
                               projects=[base, Path.cwd()])


def row_checks(checks: ChecksConfig, max_tokens: int, job: "JobDefinition[Any]") -> RowChecks:
    """The run's ``checks`` for its workers (``max_tokens``: ``sampling.max_tokens``),
    with the user's own function imported."""
    custom = None
    path = custom_check_file(checks, job)
    if path is not None:
        from ray import cloudpickle

        from toolkit.spec.jobs.catalog import import_job_file

        module = import_job_file(path)
        custom = getattr(module, checks.custom_name or "")
        # Workers can't import the user's file: the function goes by value.
        cloudpickle.register_pickle_by_value(module)
    return RowChecks.from_config(checks, max_tokens, custom)
