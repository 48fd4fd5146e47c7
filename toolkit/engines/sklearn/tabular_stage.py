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

from toolkit.engines import BatchStep, batch_step_resources
from toolkit.engines.batch_stage import error_text, run_model_on_batch, through_numpy
from toolkit.errors import SpecError
from toolkit.spec.row_contract import MESSAGES_COLUMN, SAMPLING_PARAMS_COLUMN, TASK_CONTRACTS

if TYPE_CHECKING:
    import pyarrow as pa
    from ray.data import Dataset

    from toolkit.spec.engine_settings import EngineSettings
    from toolkit.engines.model_source import ModelLocation

#: The file a model directory holds (what the sample and ``joblib.dump`` examples write).
MODEL_FILE = "model.joblib"
_CONTRACT = TASK_CONTRACTS["tabular"]


def model_file(source: "str | ModelLocation") -> Path:
    """The model file ``engine.model`` names: a ``.joblib``/``.pkl`` file, or a
    directory holding ``model.joblib``.

    Raises:
        SpecError: nothing there.
    """
    from toolkit.engines.model_source import model_location

    location = model_location(source)
    source = location.path() if location.is_sample else location.source
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


def load_model(source: "str | ModelLocation") -> Any:
    """Load the fitted model with joblib (this runs code from the file).

    Raises:
        SpecError: the file is missing, does not load, or has no ``predict``.
    """
    import joblib

    path = model_file(source)
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


def predict_tabular(batch: "pa.Table", model: Any) -> "pa.Table":
    """``features`` -> ``prediction`` (+ ``probabilities`` when the model has
    ``predict_proba``): the block's good rows in one call of the model on one numpy
    matrix, as the seeds' pattern makes it. A block the model fails on (or whose rows
    have features of different lengths) goes row by row, which names the failing row."""
    import pyarrow as pa
    import pyarrow.compute as pc

    good = pc.invert(pc.is_valid(error_text(batch)))
    chosen = pc.indices_nonzero(good)
    try:
        if len(chosen) == 0:  # error rows only: the model is not called
            raise ValueError("no row to predict")
        predictions, probabilities = _predicted_together(
            batch.column("features").take(chosen).combine_chunks(), model)
    except Exception:  # noqa: BLE001 - row by row says which row and why
        return through_numpy(batch, lambda numpy: predict_rows(numpy, model))
    if len(chosen) < batch.num_rows:  # error rows get null results
        where = pc.if_else(good, pc.subtract(pc.cumulative_sum(pc.cast(good, pa.int64())), 1),
                           pa.scalar(None, pa.int64()))
        predictions, probabilities = predictions.take(where), probabilities.take(where)
    kept = [name for name in batch.column_names
            if name not in (*_CONTRACT.inputs, MESSAGES_COLUMN, SAMPLING_PARAMS_COLUMN)]
    return (batch.select(kept).append_column("prediction", predictions)
            .append_column("probabilities", probabilities))


def _predicted_together(features: "pa.ListArray", model: Any) -> tuple["pa.Array", "pa.Array"]:
    import pyarrow as pa
    import pyarrow.compute as pc

    lengths = pc.min_max(pc.list_value_length(features)).as_py()
    if lengths["min"] != lengths["max"] or features.null_count:
        raise ValueError("rows with features of different lengths")
    matrix = pc.list_flatten(features).to_numpy(zero_copy_only=False).astype(np.float64)
    matrix = matrix.reshape(len(features), lengths["max"])
    predictions = pa.array(np.asarray(model.predict(matrix)))
    if len(predictions) != len(features):
        raise ValueError(f"model returned {len(predictions)} results for {len(features)} rows")
    if not callable(getattr(model, "predict_proba", None)):
        return predictions, pa.nulls(len(features))
    scores = np.asarray(model.predict_proba(matrix), dtype=np.float64)
    probabilities = pa.FixedSizeListArray.from_arrays(pa.array(scores.ravel()), scores.shape[1])
    return predictions, probabilities.cast(pa.list_(pa.float64()))


def predict_rows(batch: dict[str, np.ndarray], model: Any) -> dict[str, np.ndarray]:
    """:func:`predict_tabular` through Python rows, as every model stage does: the
    batch at once, then row by row where the model fails, that row an error row
    naming the error."""

    def predict(inputs: list[tuple[Any, ...]]) -> list[dict[str, Any]]:
        features = np.asarray([row[0] for row in inputs], dtype=np.float64)
        predictions = model.predict(features)
        probabilities = (model.predict_proba(features).tolist()
                         if callable(getattr(model, "predict_proba", None)) else None)
        return [{"prediction": p.item() if isinstance(p, np.generic) else p,
                 "probabilities": probabilities[i] if probabilities is not None else None}
                for i, p in enumerate(predictions)]

    return run_model_on_batch(batch, _CONTRACT.inputs, tuple(_CONTRACT.outputs), predict)


def tabular_step(engine: "EngineSettings",
                 model: "ModelLocation | None" = None) -> "BatchStep":
    """:func:`predict_tabular` with the model loaded here, on the driver."""
    return predict_tabular, {"model": load_model(model or engine.model)}


def apply_tabular_stage(ds: "Dataset", engine: "EngineSettings",
                        model: "ModelLocation | None" = None) -> "Dataset":
    predict, fn_kwargs = tabular_step(engine, model)
    return ds.map_batches(predict, fn_kwargs=fn_kwargs, batch_size=engine.batch_size,
                          batch_format="pyarrow", **batch_step_resources(engine))
