"""Tabular models: a scikit-learn-compatible model file applied to feature columns
(``engine.kind: sklearn``, ``engine.task: tabular``).

Following the seeds' pattern for light models, this is a *function* UDF on CPU
tasks (no actor pool, no GPU) with the fitted model passed in ``fn_kwargs``: the
driver loads the file once (so a bad file fails before any row runs), Ray puts
it in the object store once, and each task unpickles it with its batch, which
with large batches (10,000 rows) costs little next to ``predict``. Any object
with ``predict`` works (scikit-learn estimators and pipelines, XGBoost and
LightGBM's sklearn wrappers); ``predict_proba`` adds class probabilities.

**Loading a joblib or pickle file runs code from it.** Only point
``engine.model`` at a model file you made or trust.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from toolkit.engines.model_stage import run_model_on_batch
from toolkit.errors import SpecError
from toolkit.spec.row_contract import TASK_CONTRACTS
from toolkit.spec.sample_sources import sample_name

if TYPE_CHECKING:
    from ray.data import Dataset

    from toolkit.spec.engine_settings import EngineSettings
    from toolkit.spec.sample_sources import SampleProvider

#: The file a model directory holds (what the sample and ``joblib.dump`` examples write).
MODEL_FILE = "model.joblib"
_CONTRACT = TASK_CONTRACTS["tabular"]


def model_file(source: str, samples: "SampleProvider | None" = None) -> Path:
    """The model file ``engine.model`` names: a ``.joblib``/``.pkl`` file, or a
    directory holding ``model.joblib``.

    Raises:
        SpecError: nothing there.
    """
    if sample_name(source) is not None:
        from toolkit.engines.model_source import resolve_model_source

        source = resolve_model_source(source, samples)
    path = Path(source).expanduser()
    if path.is_dir():
        path = path / MODEL_FILE
    if not path.is_file():
        raise SpecError(
            f"engine.model: model file {source} does not exist.",
            hint="Name a file written with joblib.dump(model, 'model.joblib') (or a folder "
            "holding model.joblib). Loading it runs code: only use files you trust.",
        )
    return path


def load_model(source: str, samples: "SampleProvider | None" = None) -> Any:
    """Load the fitted model with joblib (this runs code from the file).

    Raises:
        SpecError: the file is missing, does not load, or has no ``predict``.
    """
    import joblib

    path = model_file(source, samples)
    try:
        model = joblib.load(path)
    except Exception as exc:  # noqa: BLE001 - any unpickling failure is a bad model file
        raise SpecError(f"engine.model: {path} does not load with joblib: "
                        f"{type(exc).__name__}: {exc}",
                        hint="Save the model with joblib.dump(model, path) using the same "
                        "scikit-learn version as here.") from None
    if not callable(getattr(model, "predict", None)):
        raise SpecError(f"engine.model: {path} holds a {type(model).__name__}, which has no "
                        "predict(); give a fitted scikit-learn-compatible model.")
    return model


def predict_tabular(batch: dict[str, np.ndarray], model: Any) -> dict[str, np.ndarray]:
    """``features`` -> ``prediction`` (+ ``probabilities`` when the model has predict_proba)."""

    def predict(inputs: list[tuple[Any, ...]]) -> list[dict[str, Any]]:
        features = np.asarray([row[0] for row in inputs], dtype=np.float64)
        predictions = model.predict(features)
        probabilities = (model.predict_proba(features).tolist()
                         if callable(getattr(model, "predict_proba", None)) else None)
        return [{"prediction": p.item() if isinstance(p, np.generic) else p,
                 "probabilities": probabilities[i] if probabilities is not None else None}
                for i, p in enumerate(predictions)]

    return run_model_on_batch(batch, _CONTRACT.inputs, tuple(_CONTRACT.outputs), predict)


def apply_tabular_stage(ds: "Dataset", engine: "EngineSettings",
                        samples: "SampleProvider | None" = None) -> "Dataset":
    _, tasks = engine.pool_size
    return ds.map_batches(
        predict_tabular,
        fn_kwargs={"model": load_model(engine.model, samples)},
        batch_size=engine.batch_size,
        batch_format="numpy",
        num_cpus=engine.num_cpus,
        concurrency=tasks,
    )
