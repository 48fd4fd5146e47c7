"""Embeddings and classification on vLLM, through Ray Data LLM (``task_type``).

Ray Data LLM runs vLLM's pooling runner when ``vLLMEngineProcessorConfig.task_type``
is ``embed`` or ``classify``: rows carry ``prompt`` (no chat template), its
tokenize stage runs on CPU, and the engine stage adds ``embeddings`` (the vector,
or for ``classify`` the class probabilities). We turn that into the same columns
the transformers engines write: ``embedding``, or ``label`` + ``score`` (the
model config's ``id2label``). Rows that failed before the engine carry
``__inference_error__`` and every Ray Data LLM stage passes them by.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from toolkit.engines.model_source import ModelLocation, model_location
from toolkit.engines.vllm.chat_stage import (
    cpu_stage_settings,
    keep_triton_out_of_the_driver,
    vllm_engine_settings,
)
from toolkit.engines.vllm.row_errors import toolkit_row_error
from toolkit.spec.row_contract import (
    EMBEDDING_COLUMN,
    ERROR_COLUMN,
    LABEL_COLUMN,
    PROMPT_COLUMN,
    RAY_LLM_ERROR_COLUMN,
    SCORE_COLUMN,
    object_column,
    row_error,
)

if TYPE_CHECKING:
    from ray.data import Dataset
    from ray.data.llm import Processor

    from toolkit.engines.vllm.settings import VllmSettings

#: What Ray Data LLM's vLLM stage calls its pooling output.
VLLM_EMBEDDINGS_COLUMN = "embeddings"
# Columns Ray Data LLM's stages add that the output doesn't keep.
_ENGINE_COLUMNS = (VLLM_EMBEDDINGS_COLUMN, PROMPT_COLUMN, "tokenized_prompt", "prompt_token_ids",
                   "generated_tokens", "generated_text", "metrics", "logprobs",
                   "prompt_logprobs", "time_taken_llm", "params", "request_id", "batch_uuid")


def build_vllm_task_processor(engine: "VllmSettings",
                              model: ModelLocation | None = None) -> "Processor":
    """A Ray Data LLM processor running ``engine.task`` (embed or classify) on vLLM."""
    keep_triton_out_of_the_driver()
    from ray.data.llm import build_processor, vLLMEngineProcessorConfig

    from toolkit.engines.vllm.engine_stage import with_start_check

    config = vLLMEngineProcessorConfig(
        **vllm_engine_settings(engine, model),
        task_type=engine.task,
        chat_template_stage={"enabled": False},
        tokenize_stage=cpu_stage_settings(engine),
        detokenize_stage={"enabled": False},
        prepare_multimodal_stage={"enabled": False},
    )
    return with_start_check(build_processor(config), max_restarts=engine.restarts)


def model_labels(model: str) -> dict[int, str]:
    """``id2label`` of a classifier's config (read on the driver; no weights)."""
    from transformers import AutoConfig

    return {int(k): str(v) for k, v in (AutoConfig.from_pretrained(model).id2label or {}).items()}


def vllm_task_outputs(batch: dict[str, np.ndarray], task: str,
                      labels: dict[int, str]) -> dict[str, np.ndarray]:
    """Ray Data LLM's ``embeddings`` -> ``embedding``, or ``label`` + ``score``."""
    size = len(next(iter(batch.values())))
    vectors = batch.get(VLLM_EMBEDDINGS_COLUMN, [None] * size)
    errors = [row_error(batch[ERROR_COLUMN][i]) if ERROR_COLUMN in batch else None
              for i in range(size)]
    engine_errors = batch.get(RAY_LLM_ERROR_COLUMN, [None] * size)
    embeddings: list[Any] = [None] * size
    label_column: list[Any] = [None] * size
    scores: list[Any] = [None] * size
    for i in range(size):
        errors[i] = errors[i] or toolkit_row_error(row_error(engine_errors[i]))
        if errors[i] or vectors[i] is None:
            continue
        vector = np.asarray(vectors[i], dtype=np.float32).reshape(-1)
        if task == "embed":
            embeddings[i] = vector.tolist()
        else:
            top = int(vector.argmax())
            label_column[i], scores[i] = labels.get(top, str(top)), float(vector[top])
    for column in _ENGINE_COLUMNS:
        batch.pop(column, None)
    if task == "embed":
        batch[EMBEDDING_COLUMN] = object_column(embeddings)
    else:
        batch[LABEL_COLUMN], batch[SCORE_COLUMN] = object_column(label_column), object_column(scores)
    batch[ERROR_COLUMN] = object_column(errors)
    return batch


def apply_vllm_task(ds: "Dataset", engine: "VllmSettings",
                    model: ModelLocation | None = None) -> "Dataset":
    processor = build_vllm_task_processor(engine, model)
    labels = model_labels(model_location(model or engine.model).path()) \
        if engine.task == "classify" else {}
    return processor(ds).map_batches(
        vllm_task_outputs, fn_kwargs={"task": engine.task, "labels": labels},
        batch_format="numpy",
    )
