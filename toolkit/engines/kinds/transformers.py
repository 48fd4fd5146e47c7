"""kind: transformers — our own Ray Data actor pools over Hugging Face transformers
(chat, vision chat, classify, embed, image-classify), on CPUs or small GPUs."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from pydantic import model_validator

from toolkit.spec.engine_kinds import (
    EngineKind,
    EngineSettings,
    chat_template_kwargs_field,
    register_engine,
)
from toolkit.spec.engine_support import (
    TRANSFORMERS_ENGINE_KWARGS,
    unknown_transformers_kwargs,
    unused_vllm_kwargs,
)

if TYPE_CHECKING:
    from ray.data import Dataset

    from toolkit.engines import StageInputs


class TransformersSettings(EngineSettings):
    chat_template_kwargs: dict[str, Any] = chat_template_kwargs_field()

    @model_validator(mode="after")
    def _what_it_can_honour(self) -> "TransformersSettings":
        parallel = int(self.engine_kwargs.get("tensor_parallel_size", 1)) * int(
            self.engine_kwargs.get("pipeline_parallel_size", 1))
        if self.accelerator_type is not None and parallel > 1:
            raise ValueError(
                "the transformers engine can't honour engine_kwargs.tensor_parallel_size / "
                "pipeline_parallel_size (a transformers worker uses one GPU); remove it or "
                "use kind: vllm"
            )
        unknown = unknown_transformers_kwargs(self.engine_kwargs)
        if unknown:
            raise ValueError(
                f"engine_kwargs {', '.join(unknown)}: no engine reads "
                f"{'these' if len(unknown) > 1 else 'this'} (check the spelling). The "
                f"transformers engine reads {', '.join(TRANSFORMERS_ENGINE_KWARGS)}; "
                "vLLM's engine arguments (gpu_memory_utilization, max_num_seqs, ...) are "
                "accepted too and apply with kind: vllm"
            )
        return self

    def engine_warnings(self) -> list[str]:
        unused = unused_vllm_kwargs(self.engine_kwargs)
        if not unused:
            return []
        return [
            f"engine.engine_kwargs {', '.join(unused)}: vLLM "
            f"setting{'s' if len(unused) > 1 else ''} the transformers engine doesn't use "
            f"(it reads {', '.join(TRANSFORMERS_ENGINE_KWARGS)}); "
            f"{'they apply' if len(unused) > 1 else 'it applies'} with kind: vllm."
        ]


def apply_transformers(ds: "Dataset", settings: TransformersSettings,
                       stage: "StageInputs") -> "Dataset":
    if settings.task == "generate" and stage.multimodal:
        from toolkit.engines.transformers_vision_engine import apply_transformers_vision_engine

        return apply_transformers_vision_engine(ds, settings, samples=stage.samples)
    if settings.task == "generate":
        from toolkit.engines.transformers_engine import apply_transformers_engine

        return apply_transformers_engine(ds, settings, samples=stage.samples)
    if settings.task == "image-classify":
        from toolkit.engines.image_stage import apply_image_stage

        return apply_image_stage(ds, settings, samples=stage.samples)
    from toolkit.engines.text_stages import apply_text_stage

    return apply_text_stage(ds, settings, samples=stage.samples)


register_engine(EngineKind(
    name="transformers",
    settings=TransformersSettings,
    tasks=("generate", "classify", "embed", "image-classify"),
    summary="transformers (CPU/small GPU)",
    apply=apply_transformers,
    packages={"torch": "torch", "transformers": "transformers", "xgrammar": "xgrammar"},
    install_extra="local",
    missing_hint="Install the toolkit's local extra: pip install torch==2.13.0 && pip "
                 "install 'batch-llm-toolkit[local]' (the CPU torch first).",
    imports_transformers=True,
))
