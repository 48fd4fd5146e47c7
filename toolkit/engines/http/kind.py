"""kind: http — an OpenAI-compatible server that already serves the model (vLLM's
``vllm serve``, Ray Serve LLM, ``transformers serve``, a hosted API), through Ray
Data LLM's HTTP processor. No GPU on the cluster: the server holds the model."""

from __future__ import annotations

from typing import TYPE_CHECKING

from toolkit.engines.engine_kind import EngineCapabilities, EngineKind
from toolkit.engines.http.settings import HttpSettings

if TYPE_CHECKING:
    from ray.data import Dataset

    from toolkit.engines import StageInputs


def apply_http(ds: "Dataset", settings: HttpSettings, stage: "StageInputs") -> "Dataset":
    from toolkit.engines.http.chat_stage import apply_http_engine

    return apply_http_engine(ds, settings, multimodal=stage.multimodal, model=stage.model)


def check_server(settings: HttpSettings) -> None:
    """The server answers, checked on the driver before any row is read."""
    from toolkit.engines.http.chat_stage import check_endpoint

    check_endpoint(settings)


KIND = EngineKind(
    name="http",
    settings=HttpSettings,
    tasks=("generate",),
    summary="http (an OpenAI-compatible server at engine.base_url)",
    apply=apply_http,
    capabilities=EngineCapabilities(
        # Ray Data LLM's HTTP stage sends with aiohttp.
        packages={"aiohttp": "aiohttp"},
        install_extra="http",
        missing_hint="Install the toolkit's http extra: pip install 'batch-llm-toolkit[http]'.",
        preflight=check_server,
    ),
)
