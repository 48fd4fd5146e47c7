"""What makes an answer bad, and when a run should stop: the spec's ``checks`` and
``stop_loss`` sections.

Checks run on every row of a generate job after its postprocess; a row records the
checks it failed in ``failed_checks``. The stop-loss watches the rows a run writes
and stops it (exit 8) when too many of its first rows fail, so a wrong setting costs
minutes instead of the whole budget. Both sections are left out of the spec's dump
while they hold the defaults, so specs written before them keep their fingerprints.
"""

from __future__ import annotations

import re

from pydantic import Field, field_validator

from toolkit.spec.strict_model import StrictModel

#: The built-in checks, by the name a row records, and what failing one means.
BUILTIN_CHECKS: dict[str, str] = {
    "truncated": "the answer was cut off at sampling.max_tokens (finish_reason length)",
    "empty": "the model answered nothing (blank text)",
    "invalid": "the answer broke the job's output shape (choice, regex or JSON schema), "
               "e.g. from an HTTP server that did not enforce it",
    "refusal": "the answer matched one of checks.refusal",
    "low_confidence": "a *_confidence column is below checks.min_confidence",
}


class ChecksConfig(StrictModel):
    """Checks every answer of a generate job must pass; a row that fails one is
    counted (progress, status, summary), can stop the run (``stop_loss``) and is
    redone by ``toolkit retry``."""

    truncated: bool = Field(True, description=BUILTIN_CHECKS["truncated"] + ".")
    empty: bool = Field(True, description=BUILTIN_CHECKS["empty"] + ".")
    invalid: bool = Field(True, description=BUILTIN_CHECKS["invalid"] + ".")
    refusal: list[str] = Field(
        default_factory=list,
        description="Regular expressions (case-insensitive, searched anywhere in the "
        "answer) that mark a refusal, e.g. [\"I can(no|')t help\", \"as an AI\"]. "
        "Empty: no refusal check.",
    )
    min_confidence: float | None = Field(
        None, ge=0, le=1,
        description="Flag rows whose answer's probability (a *_confidence column, e.g. "
        "inferred_industry_confidence) is below this. Unset: no confidence check.",
    )
    custom: str | None = Field(
        None,
        description="Your own check: a function in a .py file of your project, "
        "my_checks.py:plausible (relative to the job file's folder). It gets the row "
        "(input columns, result columns, generated_text, finish_reason) and returns "
        "None when the row passes, or a short reason when it fails; the row records "
        "the function's name.",
    )

    @field_validator("refusal")
    @classmethod
    def _patterns_compile(cls, patterns: list[str]) -> list[str]:
        for pattern in patterns:
            try:
                re.compile(pattern)
            except re.error as exc:
                raise ValueError(f"{pattern!r} is not a valid regular expression: {exc}") \
                    from None
        return patterns

    @property
    def enabled(self) -> list[str]:
        """The built-in checks this run applies, in :data:`BUILTIN_CHECKS` order."""
        on = {"truncated": self.truncated, "empty": self.empty, "invalid": self.invalid,
              "refusal": bool(self.refusal), "low_confidence": self.min_confidence is not None}
        return [name for name in BUILTIN_CHECKS if on[name]]

    @property
    def custom_name(self) -> str | None:
        """The name a row records for the custom check: its function's name."""
        return self.custom.rpartition(":")[2] if self.custom else None


class StopLossConfig(StrictModel):
    """When a run stops early: more than ``failure_rate`` of its rows failing (error
    rows plus rows that failed a check) once it has written ``min_rows``."""

    failure_rate: float | None = Field(
        0.5, gt=0, le=1,
        description="Stop when more than this share of the rows written so far failed "
        "(an error or a failed check). null: never stop early.",
    )
    min_rows: int = Field(
        200, ge=1,
        description="Judge only after this many rows were written, so a few early "
        "failures don't stop a good run.",
    )
