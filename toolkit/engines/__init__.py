"""Inference engines. Each takes rows with ``messages`` + ``sampling_params`` and adds
``generated_text``; which one runs is configuration (``engine.kind``), not code."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ray.data import Dataset

    from toolkit.spec.models import EngineConfig
    from toolkit.spec.sample_sources import SampleProvider


def apply_engine(
    ds: "Dataset",
    engine: "EngineConfig",
    multimodal: bool = False,
    samples: "SampleProvider | None" = None,
    options: Any = None,
) -> "Dataset":
    """Add the engine stage(s) for ``engine.kind`` to ``ds``.

    ``samples`` resolves a ``sample:`` model (smoke runs); it travels to the engine
    actors, which build the tiny model where they run.
    """
    if engine.task != "generate":
        return apply_task_stage(ds, engine, samples=samples, options=options)
    if engine.kind == "vllm":
        from toolkit.engines.vllm_engine import apply_vllm_engine

        return apply_vllm_engine(ds, engine, multimodal=multimodal, samples=samples)
    if engine.kind == "http":
        from toolkit.engines.http_engine import apply_http_engine

        return apply_http_engine(ds, engine, multimodal=multimodal, samples=samples)
    if multimodal:
        from toolkit.engines.transformers_vision_engine import apply_transformers_vision_engine

        return apply_transformers_vision_engine(ds, engine, samples=samples)
    from toolkit.engines.transformers_engine import apply_transformers_engine

    return apply_transformers_engine(ds, engine, samples=samples)


def check_engine_reachable(engine: "EngineConfig") -> None:
    """Fail on the driver, before any row is read, when the engine's server is
    unreachable (kind http; other kinds load their model in their workers).

    Raises:
        BackendUnavailableError: naming the URL (exit code 3).
    """
    if engine.kind == "http":
        from toolkit.engines.http_engine import check_endpoint

        check_endpoint(engine)


def apply_task_stage(
    ds: "Dataset", engine: "EngineConfig", samples: "SampleProvider | None" = None,
    options: Any = None,
) -> "Dataset":
    """The model stage for a task other than chat generation (``engine.task``), one
    module per kind: text (classify, embed), image-classify, tabular; vLLM through
    Ray Data LLM's ``task_type``."""
    if engine.task == "custom":  # the job's options say what the user's class reads
        from toolkit.engines.python_stage import apply_python_stage

        return apply_python_stage(ds, engine, options)
    if engine.task == "tabular":
        from toolkit.engines.tabular_stage import apply_tabular_stage

        return apply_tabular_stage(ds, engine, samples=samples)
    if engine.kind == "vllm":
        from toolkit.engines.vllm_tasks import apply_vllm_task

        return apply_vllm_task(ds, engine, samples=samples)
    if engine.task == "image-classify":
        from toolkit.engines.image_stage import apply_image_stage

        return apply_image_stage(ds, engine, samples=samples)
    from toolkit.engines.text_stages import apply_text_stage

    return apply_text_stage(ds, engine, samples=samples)
