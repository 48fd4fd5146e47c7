"""kind: batch-api — any OpenAI-compatible Batch API (OpenAI, Azure OpenAI, Groq,
Together, ``toolkit serve``): rows go as request files, answers come back when the
provider's batches end, at its batch price. No GPU on the cluster: the provider
holds the model."""

from __future__ import annotations

from typing import TYPE_CHECKING

from toolkit.engines.batch_api.settings import BatchApiSettings
from toolkit.engines.engine_kind import EngineCapabilities, EngineKind

if TYPE_CHECKING:
    from ray.data import Dataset

    from toolkit.engines import StageInputs


def apply_batch_api(ds: "Dataset", settings: BatchApiSettings,
                    stage: "StageInputs") -> "Dataset":
    from toolkit.engines.batch_api.provider_stage import apply_batch_api_engine

    return apply_batch_api_engine(ds, settings, stage)


def check_provider(settings: BatchApiSettings) -> None:
    """The provider answers with our key, checked on the driver before any row is read."""
    from toolkit.engines.batch_api.batch_client import check_provider as check

    check(settings)


KIND = EngineKind(
    name="batch-api",
    settings=BatchApiSettings,
    tasks=("generate",),
    summary="batch-api (an OpenAI-compatible Batch API at engine.base_url)",
    apply=apply_batch_api,
    capabilities=EngineCapabilities(
        packages={"openai": "openai"},
        install_extra="batch-api",
        missing_hint="Install the toolkit's batch-api extra: pip install "
                     "'batch-llm-toolkit[batch-api]'.",
        loads_checkpoint=False,  # the provider holds the model; it names it
        preflight=check_provider,
    ),
)
