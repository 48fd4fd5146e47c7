"""kind: sklearn — a scikit-learn-compatible model file (task tabular) on CPUs."""

from __future__ import annotations

from typing import TYPE_CHECKING

from toolkit.engines.engine_kind import EngineCapabilities, EngineKind
from toolkit.engines.sklearn.settings import SklearnSettings

if TYPE_CHECKING:
    from ray.data import Dataset

    from toolkit.engines import BatchStep, StageInputs


def apply_sklearn(ds: "Dataset", settings: SklearnSettings, stage: "StageInputs") -> "Dataset":
    from toolkit.engines.sklearn.tabular_stage import apply_tabular_stage

    return apply_tabular_stage(ds, settings, model=stage.model)


def sklearn_step(settings: SklearnSettings, stage: "StageInputs") -> "BatchStep":
    from toolkit.engines.sklearn.tabular_stage import tabular_step

    return tabular_step(settings, model=stage.model)


KIND = EngineKind(
    name="sklearn",
    settings=SklearnSettings,
    tasks=("tabular",),
    summary="sklearn (a model file, for engine.task tabular)",
    apply=apply_sklearn,
    capabilities=EngineCapabilities(
        packages={"sklearn": "scikit-learn", "joblib": "joblib"},
        install_extra="local",
        missing_hint="Install the toolkit's local extra: pip install 'batch-llm-toolkit[local]'.",
        loads_checkpoint=False,  # a joblib file, checked as it loads
        fuses_row_steps=True,
        batch_step=sklearn_step,
    ),
)
