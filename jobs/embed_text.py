"""embed: one embedding vector per text (a fixed-size list of floats).

The model stage is ``engine.task: embed``: on ``vllm`` Ray Data LLM's
``task_type: embed`` (the model's own pooling); on ``transformers`` the encoder's
last hidden states mean-pooled over the tokens, L2-normalised. A blank text is
an error row.
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


class EmbedOptions(StrictModel):
    text_column: str = Field("review", description="Input column holding the text to embed.")


class EmbedSpec(JobSpec):
    options: EmbedOptions


def preprocess(row: dict[str, Any], options: EmbedOptions) -> dict[str, Any]:
    return text_prompt(row, options.text_column)


def preprocess_batch(table: "pa.Table", options: EmbedOptions) -> "pa.Table":
    return text_prompts(table, options.text_column)


def postprocess(row: dict[str, Any], options: EmbedOptions) -> dict[str, Any]:
    return engine_results(row, ("embedding",))


def postprocess_batch(table: "pa.Table", options: EmbedOptions) -> "pa.Table":
    return engine_result_columns(table, ("embedding",))


def dimensions(table: Any) -> dict[str, int | float]:
    """The embedding size (the same for every row of one model)."""
    import pyarrow.compute as pc

    lengths = pc.list_value_length(table["embedding"]).drop_null()
    return {"embedding_dimensions": int(pc.max(lengths).as_py() or 0)}


JOB = JobDefinition(
    name="embed",
    description="One embedding vector per text (vLLM on GPUs, or a transformers encoder).",
    spec_model=EmbedSpec,
    preprocess=preprocess,
    postprocess=postprocess,
    preprocess_batch=preprocess_batch,
    postprocess_batch=postprocess_batch,
    required_columns=lambda options: [options.text_column],
    result_columns=lambda options: {"embedding": "list<float>"},
    summary_columns=("embedding",),
    summarize=dimensions,
    smoke_overrides={
        "data.input": "sample:reviews",
        "engine.model": "sample:tiny-encoder",
    },
)
