"""kind: transformers — our own Ray Data actor pools over Hugging Face transformers
(chat, vision chat, classify, embed, image-classify), on CPUs or small GPUs."""

from __future__ import annotations

from typing import TYPE_CHECKING

from toolkit.engines.engine_kind import EngineCapabilities, EngineKind
from toolkit.engines.transformers.settings import TransformersSettings

if TYPE_CHECKING:
    from ray.data import Dataset

    from toolkit.engines import StageInputs


def apply_transformers(ds: "Dataset", settings: TransformersSettings,
                       stage: "StageInputs") -> "Dataset":
    if settings.task == "generate" and stage.multimodal:
        from toolkit.engines.transformers.vision_engine import apply_transformers_vision_engine

        return apply_transformers_vision_engine(ds, settings, model=stage.model)
    if settings.task == "generate":
        from toolkit.engines.transformers.chat_engine import apply_transformers_engine

        return apply_transformers_engine(ds, settings, model=stage.model)
    if settings.task == "image-classify":
        from toolkit.engines.transformers.image_stage import apply_image_stage

        return apply_image_stage(ds, settings, model=stage.model)
    from toolkit.engines.transformers.text_stages import apply_text_stage

    return apply_text_stage(ds, settings, model=stage.model)


KIND = EngineKind(
    name="transformers",
    settings=TransformersSettings,
    tasks=("generate", "classify", "embed", "image-classify"),
    summary="transformers (CPU/small GPU)",
    apply=apply_transformers,
    capabilities=EngineCapabilities(
        packages={"torch": "torch", "transformers": "transformers", "llguidance": "llguidance"},
        install_extra="local",
        missing_hint="Install the toolkit's local extra: pip install torch==2.13.0 && pip "
                     "install 'batch-llm-toolkit[local]' (the CPU torch first).",
        imports_transformers=True,
        # Its workers' restarts are bounded (engine.max_restarts), an actor-only option
        # that a task step can't be given to match; beside a model, that step is noise.
        fuses_row_steps=False,
    ),
)
