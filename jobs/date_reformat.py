"""date-reformat: rewrite a date column as MM-DD-YYYY with an LLM, and check it.

The check is what peers lack: every row also gets ``reference`` (the same date
parsed deterministically) and ``matches_reference``, and the summary reports the
accuracy. Dates no format can parse are error rows, not crashes.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from pydantic import Field, field_validator

from toolkit.spec.job_definition import JobDefinition
from toolkit.spec.models import JobSpec, Regex, StrictModel

REFERENCE_FORMAT = "%m-%d-%Y"


class DateReformatOptions(StrictModel):
    date_column: str = Field(
        "Subscription Date", description="Input column holding the date to rewrite."
    )
    input_formats: list[str] = Field(
        description=(
            "strptime formats the source dates may be in, tried in order, for the "
            "deterministic reference. A date none of them parses becomes an error row."
        ),
        min_length=1,
    )
    system_prompt: str = Field(description="Instructions the model gets before each row.")
    user_prompt: str = Field(description="Per-row request; {date} is filled in for each row.")
    answer_regex: Regex = Field(
        description=(
            "Regular expression the answer must match (vLLM structured outputs, and the "
            "same grammar in the transformers engine). It fixes the shape, not the value."
        )
    )

    @field_validator("user_prompt")
    @classmethod
    def _known_placeholders(cls, prompt: str) -> str:
        try:
            prompt.format(date="")
        except (KeyError, IndexError, ValueError) as exc:
            raise ValueError(f"user_prompt may only use the placeholder {{date}} ({exc})") from None
        return prompt


class DateReformatSpec(JobSpec):
    options: DateReformatOptions


def reference_date(text: Any, formats: list[str]) -> str:
    """The date in MM-DD-YYYY, parsed without a model; ValueError if no format fits."""
    value = "" if text is None else str(text).strip()
    if not value:
        raise ValueError("the date is empty")
    for fmt in formats:
        try:
            return datetime.strptime(value, fmt).strftime(REFERENCE_FORMAT)
        except ValueError:
            continue
    raise ValueError(f"{value!r} matches none of the input_formats {formats}")


def preprocess(row: dict[str, Any], options: DateReformatOptions) -> dict[str, Any]:
    source = row.get(options.date_column)
    try:
        reference = reference_date(source, options.input_formats)
    except ValueError as exc:
        raise ValueError(f"column {options.date_column!r}: {exc}") from None
    return {
        "messages": [
            {"role": "system", "content": options.system_prompt},
            {"role": "user", "content": options.user_prompt.format(date=str(source).strip())},
        ],
        "reference": reference,
    }


def postprocess(row: dict[str, Any], options: DateReformatOptions) -> dict[str, Any]:
    answer = str(row["generated_text"]).strip()
    reference = row["reference"]
    return {"resp": answer, "reference": reference, "matches_reference": answer == reference}


def accuracy(table: Any) -> dict[str, int | float]:
    """Share of written rows whose answer equals the reference (error rows count as misses)."""
    import pyarrow.compute as pc

    rows = table.num_rows
    matching = int(pc.sum(pc.fill_null(table["matches_reference"], False)).as_py() or 0)
    return {"accuracy": round(matching / rows, 4) if rows else 0.0, "matching_rows": matching}


JOB = JobDefinition(
    name="date-reformat",
    description="Rewrite 'Subscription Date' as MM-DD-YYYY, checked against a parsed reference.",
    spec_model=DateReformatSpec,
    preprocess=preprocess,
    postprocess=postprocess,
    required_columns=lambda options: [options.date_column],
    structured_output=lambda options: {"regex": options.answer_regex},
    result_columns=lambda options: {
        "resp": "string", "reference": "string", "matches_reference": "bool",
    },
    summary_columns=("matches_reference",),
    summarize=accuracy,
    smoke_overrides={"data.input": "sample:customers", "engine.model": "sample:tiny-chat"},
)

