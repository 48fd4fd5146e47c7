"""Inference engines. Each takes rows with ``messages`` + ``sampling_params`` and adds
``generated_text``; which one runs is configuration (``engine.kind``), not code."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ray.data import Dataset

    from toolkit.spec.models import EngineConfig
    from toolkit.spec.sample_sources import SampleProvider


def apply_engine(
    ds: "Dataset",
    engine: "EngineConfig",
    multimodal: bool = False,
    samples: "SampleProvider | None" = None,
) -> "Dataset":
    """Add the engine stage(s) for ``engine.kind`` to ``ds``.

    ``samples`` resolves a ``sample:`` model (smoke runs); it travels to the engine
    actors, which build the tiny model where they run.
    """
    if engine.kind == "vllm":
        from toolkit.engines.vllm_engine import apply_vllm_engine

        return apply_vllm_engine(ds, engine, multimodal=multimodal, samples=samples)
    if multimodal:
        from toolkit.engines.transformers_vision_engine import apply_transformers_vision_engine

        return apply_transformers_vision_engine(ds, engine, samples=samples)
    from toolkit.engines.transformers_engine import apply_transformers_engine

    return apply_transformers_engine(ds, engine, samples=samples)
