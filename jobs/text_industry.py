"""text-industry: infer a company's industry from its name, as one of a fixed list.

The answer is constrained to ``options.choices`` on both engines (vLLM structured
outputs, our transformers engine through the same grammar), so every written
``inferred_industry`` is exactly one of them.
"""

from __future__ import annotations

from typing import Any

from pydantic import Field, field_validator

from toolkit.run.entrypoint import run_job_main
from toolkit.spec.job_definition import JobDefinition
from toolkit.spec.models import JobSpec, StrictModel


class TextIndustryOptions(StrictModel):
    company_column: str = Field(
        "Company", description="Input column holding the company name the model reads."
    )
    id_column: str = Field(
        "Index", description="Input column that identifies a row; kept in the output."
    )
    choices: list[str] = Field(
        description=(
            "The industries the answer must be one of. Short, distinct names work best: "
            "the model only ever emits one of these strings."
        ),
        min_length=2,
    )
    system_prompt: str = Field(description="Instructions the model gets before each row.")
    user_prompt: str = Field(
        description="Per-row question; {company} and {choices} are filled in for each row."
    )

    @field_validator("choices")
    @classmethod
    def _distinct_non_empty(cls, choices: list[str]) -> list[str]:
        if any(not c.strip() for c in choices):
            raise ValueError("choices must not contain empty strings")
        if len(set(choices)) != len(choices):
            raise ValueError("choices must be distinct")
        return choices

    @field_validator("user_prompt")
    @classmethod
    def _known_placeholders(cls, prompt: str) -> str:
        try:
            prompt.format(company="", choices="")
        except (KeyError, IndexError, ValueError) as exc:
            raise ValueError(
                f"user_prompt may only use the placeholders {{company}} and {{choices}} ({exc})"
            ) from None
        return prompt


class TextIndustrySpec(JobSpec):
    options: TextIndustryOptions


def preprocess(row: dict[str, Any], options: TextIndustryOptions) -> dict[str, Any]:
    """Build the chat messages for one row. A blank company name is an error row."""
    company = row.get(options.company_column)
    if company is None or not str(company).strip():
        raise ValueError(f"column {options.company_column!r} is empty")
    user = options.user_prompt.format(
        company=str(company).strip(), choices=", ".join(options.choices)
    )
    return {
        "messages": [
            {"role": "system", "content": options.system_prompt},
            {"role": "user", "content": user},
        ]
    }


def postprocess(row: dict[str, Any], options: TextIndustryOptions) -> dict[str, Any]:
    """The model's answer as ``inferred_industry``; anything off the list is an error."""
    answer = str(row["generated_text"]).strip()
    if answer not in options.choices:
        raise ValueError(f"model answered {answer!r}, which is not one of the choices")
    return {"inferred_industry": answer}


JOB = JobDefinition(
    name="text-industry",
    description="Infer each company's industry from its name, as one of a fixed list.",
    spec_model=TextIndustrySpec,
    preprocess=preprocess,
    postprocess=postprocess,
    required_columns=lambda options: [options.company_column, options.id_column],
    id_column=lambda options: options.id_column,
    structured_output=lambda options: {"choice": list(options.choices)},
    result_columns={"inferred_industry": "string"},
    smoke_overrides={"data.input": "sample:customers", "engine.model": "sample:tiny-chat"},
)


def main(argv: list[str] | None = None) -> None:
    run_job_main(JOB, argv)


if __name__ == "__main__":
    main()
