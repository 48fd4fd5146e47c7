"""The vLLM engine, through Ray Data LLM (``ray.data.llm``).

We only build the processor from the spec; Ray Data LLM owns the stages (chat
template, tokenize, vLLM, detokenize, and for images prepare-multimodal), the
actor pools and the GPU scheduling. vLLM itself is imported on the GPU workers,
so building (and testing) the processor needs neither vLLM nor a GPU.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from toolkit.engines.model_source import resolve_model_source

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
    that into our ``error`` column.
    """
    from ray.data.llm import build_processor, vLLMEngineProcessorConfig

    config = vLLMEngineProcessorConfig(
        # A sample model is built here on the driver: vLLM workers need a path they
        # can read, which only a shared filesystem or a local head gives them.
        model_source=resolve_model_source(engine.model, samples),
        engine_kwargs=dict(engine.engine_kwargs),
        batch_size=engine.batch_size,
        concurrency=engine.concurrency,
        accelerator_type=engine.accelerator_type,
        should_continue_on_error=True,
        prepare_multimodal_stage=multimodal,
    )
    return build_processor(config)


def apply_vllm_engine(
    ds: "Dataset",
    engine: "EngineConfig",
    multimodal: bool = False,
    samples: "SampleProvider | None" = None,
) -> "Dataset":
    return build_vllm_processor(engine, multimodal=multimodal, samples=samples)(ds)
