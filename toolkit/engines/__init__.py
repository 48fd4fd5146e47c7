"""Inference engines. Each takes rows with ``messages`` + ``sampling_params`` and adds
``generated_text``; which one runs is configuration (``engine.kind``), not code."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ray.data import Dataset

    from toolkit.spec.models import EngineConfig


def apply_engine(ds: "Dataset", engine: "EngineConfig", multimodal: bool = False) -> "Dataset":
    """Add the engine stage(s) for ``engine.kind`` to ``ds``."""
    if engine.kind == "vllm":
        from toolkit.engines.vllm_engine import apply_vllm_engine

        return apply_vllm_engine(ds, engine, multimodal=multimodal)
    if multimodal:
        from toolkit.engines.transformers_vision_engine import apply_transformers_vision_engine

        return apply_transformers_vision_engine(ds, engine)
    from toolkit.engines.transformers_engine import apply_transformers_engine

    return apply_transformers_engine(ds, engine)
