"""text-classify: label each text with a Hugging Face classifier (sentiment by default).

The model stage is ``engine.task: classify``: on ``transformers`` a
``pipeline("text-classification")`` loaded once per engine worker and fed whole
batches (on the worker's GPU when ``accelerator_type`` is set); on ``vllm`` Ray
Data LLM's ``task_type: classify``. Results: ``label`` (the top class) and
``score`` (its probability). A blank text is an error row.
"""

from __future__ import annotations

from typing import Any

from pydantic import Field

from toolkit.spec.job_definition import JobDefinition
from toolkit.spec.models import JobSpec, StrictModel
from toolkit.spec.row_contract import engine_results


class TextOptions(StrictModel):
    text_column: str = Field(
        "review", description="Input column holding the text to classify (or embed)."
    )


class TextClassifySpec(JobSpec):
    options: TextOptions


def preprocess(row: dict[str, Any], options: TextOptions) -> dict[str, Any]:
    text = row.get(options.text_column)
    if text is None or not str(text).strip():
        raise ValueError(f"column {options.text_column!r} is empty")
    return {"prompt": str(text)}


def postprocess(row: dict[str, Any], options: TextOptions) -> dict[str, Any]:
    return engine_results(row, ("label", "score"))


JOB = JobDefinition(
    name="text-classify",
    description="Label each text with a Hugging Face classifier (sentiment by default).",
    spec_model=TextClassifySpec,
    preprocess=preprocess,
    postprocess=postprocess,
    required_columns=lambda options: [options.text_column],
    result_columns=lambda options: {"label": "string", "score": "double"},
    smoke_overrides={
        "data.input": "sample:reviews",
        "engine.model": "sample:tiny-classifier",
    },
)
