"""kind: python — the user's own predictor class (``model: file.py:Class``, task custom)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from toolkit.engines.engine_kind import EngineCapabilities, EngineKind
from toolkit.engines.python.settings import PythonSettings

if TYPE_CHECKING:
    from ray.data import Dataset

    from toolkit.engines import StageInputs


def apply_python(ds: "Dataset", settings: PythonSettings, stage: "StageInputs") -> "Dataset":
    # The job's options say which columns the user's class reads and writes.
    from toolkit.engines.python.predictor_stage import apply_python_stage

    return apply_python_stage(ds, settings, stage.options)


KIND = EngineKind(
    name="python",
    settings=PythonSettings,
    tasks=("custom",),
    summary="python (your own class, engine.model file.py:Class)",
    apply=apply_python,
    capabilities=EngineCapabilities(
        loads_checkpoint=False,  # a class of the user's, checked when the job loads
        fuses_row_steps=True,
    ),
)
