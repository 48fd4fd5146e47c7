"""kind: sklearn — a scikit-learn-compatible model file (task tabular) on CPUs."""

from __future__ import annotations

from typing import TYPE_CHECKING

from toolkit.spec.engine_kinds import EngineKind, EngineSettings, register_engine

if TYPE_CHECKING:
    from ray.data import Dataset

    from toolkit.engines import StageInputs


class SklearnSettings(EngineSettings):
    @property
    def workers_at_start(self) -> int:
        """One: the model runs in Ray tasks, which start as CPUs free up, not a pool."""
        return 1


def apply_sklearn(ds: "Dataset", settings: SklearnSettings, stage: "StageInputs") -> "Dataset":
    from toolkit.engines.tabular_stage import apply_tabular_stage

    return apply_tabular_stage(ds, settings, samples=stage.samples)


register_engine(EngineKind(
    name="sklearn",
    settings=SklearnSettings,
    tasks=("tabular",),
    summary="sklearn (a model file, for engine.task tabular)",
    apply=apply_sklearn,
    packages={"sklearn": "scikit-learn", "joblib": "joblib"},
    install_extra="local",
    missing_hint="Install the toolkit's local extra: pip install 'batch-llm-toolkit[local]'.",
    loads_checkpoint=False,  # a joblib file, checked as it loads
))
