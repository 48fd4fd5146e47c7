"""text-classify: label each text with a Hugging Face classifier (sentiment by default).

The model stage is ``engine.task: classify``: on ``transformers`` a
``pipeline("text-classification")`` loaded once per engine worker and fed whole
batches (on the worker's GPU when ``accelerator_type`` is set); on ``vllm`` Ray
Data LLM's ``task_type: classify``. Results: ``label`` (the top class) and
``score`` (its probability). A blank text is an error row.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from pydantic import Field

from toolkit.spec.job_definition import JobDefinition
from toolkit.spec.models import JobSpec, StrictModel
from toolkit.spec.row_contract import engine_result_columns, engine_results
from toolkit.spec.text_prompts import text_prompt, text_prompts

if TYPE_CHECKING:
    import pyarrow as pa


class TextOptions(StrictModel):
    text_column: str = Field(
        "review", description="Input column holding the text to classify (or embed)."
    )


class TextClassifySpec(JobSpec):
    options: TextOptions


def preprocess(row: dict[str, Any], options: TextOptions) -> dict[str, Any]:
    return text_prompt(row, options.text_column)


def preprocess_batch(table: "pa.Table", options: TextOptions) -> "pa.Table":
    return text_prompts(table, options.text_column)


def postprocess(row: dict[str, Any], options: TextOptions) -> dict[str, Any]:
    return engine_results(row, ("label", "score"))


def postprocess_batch(table: "pa.Table", options: TextOptions) -> "pa.Table":
    return engine_result_columns(table, ("label", "score"))


JOB = JobDefinition(
    name="text-classify",
    description="Label each text with a Hugging Face classifier (sentiment by default).",
    spec_model=TextClassifySpec,
    preprocess=preprocess,
    postprocess=postprocess,
    preprocess_batch=preprocess_batch,
    postprocess_batch=postprocess_batch,
    required_columns=lambda options: [options.text_column],
    result_columns=lambda options: {"label": "string", "score": "double"},
    smoke_overrides={
        "data.input": "sample:reviews",
        "engine.model": "sample:tiny-classifier",
    },
)
