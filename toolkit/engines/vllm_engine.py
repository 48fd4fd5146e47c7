"""The vLLM engine, through Ray Data LLM (``ray.data.llm``).

We only build the processor from the spec; Ray Data LLM owns the stages (chat
template, tokenize, vLLM, detokenize, and for images prepare-multimodal), the
actor pools and the GPU scheduling. vLLM itself is imported on the GPU workers,
so building (and testing) the processor needs neither vLLM nor a GPU.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from toolkit.engines.model_source import resolve_model_source

logger = logging.getLogger(__name__)

if TYPE_CHECKING:
    from ray.data import Dataset
    from ray.data.llm import Processor

    from toolkit.spec.models import EngineConfig
    from toolkit.spec.sample_sources import SampleProvider


def build_vllm_processor(
    engine: "EngineConfig", multimodal: bool = False, samples: "SampleProvider | None" = None
) -> "Processor":
    """A Ray Data LLM processor for ``engine``; apply it with ``processor(ds)``.

    Rows that fail in the engine come back with ``__inference_error__`` set
    (``should_continue_on_error``) rather than failing the job; the pipeline turns
    that into our ``error`` column. Rows that already failed in preprocess arrive
    with ``__inference_error__`` set and every stage passes them by.

    Our settings mean here what they mean for the transformers engine:

    - ``concurrency``: Ray Data LLM reads a plain ``n`` as an autoscaling pool of
      1 to n engine workers (``ProcessorConfig.get_concurrency``, called with
      ``autoscaling_enabled=True`` in ``vllm_engine_proc.py``), so a fixed pool is
      sent as ``(n, n)``. The CPU stages (chat template, tokenize, detokenize) keep
      Ray's default, autoscaling from 1 up to the engine's upper end.
    - ``num_cpus``: CPUs beside each GPU of a worker, through ``placement_group_config``
      (``bundle_per_worker``, replicated tensor x pipeline parallel times).
    """
    from ray.data.llm import build_processor, vLLMEngineProcessorConfig

    for warning in engine.engine_warnings():
        logger.warning(warning)
    cpu_stage = {"concurrency": (1, engine.pool_size[1])}
    config = vLLMEngineProcessorConfig(
        **vllm_engine_settings(engine, samples),
        chat_template_stage={
            **cpu_stage, "chat_template_kwargs": dict(engine.chat_template_kwargs) or None
        },
        tokenize_stage=dict(cpu_stage),
        detokenize_stage=dict(cpu_stage),
        prepare_multimodal_stage={**cpu_stage, "enabled": multimodal},
    )
    return build_processor(config)


def vllm_engine_settings(
    engine: "EngineConfig", samples: "SampleProvider | None" = None
) -> dict[str, Any]:
    """``vLLMEngineProcessorConfig`` arguments for the engine stage itself, the same
    for every task (chat generation, embed, classify); the stages around it differ."""
    low, high = engine.pool_size
    settings: dict[str, Any] = {
        # A sample model is built here on the driver: vLLM workers need a path they
        # can read, which only a shared filesystem or a local head gives them.
        "model_source": resolve_model_source(engine.model, samples),
        "engine_kwargs": dict(engine.engine_kwargs),
        "batch_size": engine.batch_size,
        "concurrency": (low, high),
        "accelerator_type": engine.accelerator_type,
        "placement_group_config": {"bundle_per_worker": {"CPU": engine.num_cpus, "GPU": 1}},
        "should_continue_on_error": True,
    }
    if engine.max_concurrent_batches is not None:
        settings["max_concurrent_batches"] = engine.max_concurrent_batches
    return settings


def apply_vllm_engine(
    ds: "Dataset",
    engine: "EngineConfig",
    multimodal: bool = False,
    samples: "SampleProvider | None" = None,
) -> "Dataset":
    return build_vllm_processor(engine, multimodal=multimodal, samples=samples)(ds)
