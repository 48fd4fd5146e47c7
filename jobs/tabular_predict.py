"""tabular-predict: apply a scikit-learn-compatible model file to feature columns.

``engine.kind: sklearn`` / ``engine.task: tabular``: the model (``joblib.dump``
of a fitted estimator or pipeline; XGBoost/LightGBM sklearn wrappers work too)
runs as a function UDF on CPU tasks with large batches, as the seeds' tabular
pattern does. Results: ``prediction`` and, for classifiers, ``probabilities``
(in the order of the model's ``classes_``). A row with a missing or non-numeric
feature is an error row naming the column.

Loading a joblib/pickle file runs code from it: only use model files you trust.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any, Literal

from pydantic import Field

from toolkit.spec.job_definition import JobDefinition
from toolkit.spec.models import JobSpec, StrictModel

if TYPE_CHECKING:
    import pyarrow as pa


class TabularOptions(StrictModel):
    feature_columns: list[str] = Field(
        min_length=1,
        description="Input columns the model reads, in the order it was fitted on.",
    )
    prediction_type: Literal["string", "int64", "double"] = Field(
        "string",
        description="Type of the prediction column: 'string' for class labels, 'double' "
        "for a regressor, 'int64' for integer classes.",
    )


class TabularSpec(JobSpec):
    options: TabularOptions


def preprocess(row: dict[str, Any], options: TabularOptions) -> dict[str, Any]:
    features = []
    for column in options.feature_columns:
        value = row.get(column)
        if value is None or (isinstance(value, str) and not value.strip()):
            raise ValueError(f"column {column!r} is missing")
        try:
            number = float(value)
        except (TypeError, ValueError):
            raise ValueError(f"column {column!r}: {value!r} is not a number") from None
        if math.isnan(number):
            raise ValueError(f"column {column!r} is missing")
        features.append(number)
    return {"features": features}


def postprocess(row: dict[str, Any], options: TabularOptions) -> dict[str, Any]:
    prediction = row["prediction"]
    cast = {"string": str, "int64": int, "double": float}[options.prediction_type]
    try:
        prediction = cast(prediction)
    except (TypeError, ValueError):
        raise ValueError(f"prediction {prediction!r} is not {options.prediction_type}") from None
    probabilities = row.get("probabilities")
    return {"prediction": prediction,
            "probabilities": [float(p) for p in probabilities] if probabilities is not None
            else None}


def preprocess_batch(table: "pa.Table", options: TabularOptions) -> "pa.Table":
    """:func:`preprocess` for a whole block, in Arrow: ``features`` and ``error``, the
    first missing feature of each row. A block with a value Arrow doesn't read as a
    number goes through :func:`preprocess` row by row, which names the value."""
    import pyarrow as pa

    try:
        return _features_in_arrow(table, options)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError):
        rows = table.select(list(options.feature_columns)).to_pylist()
        features: list[list[float] | None] = []
        errors: list[str | None] = []
        for row in rows:
            try:
                features.append(preprocess(row, options)["features"])
                errors.append(None)
            except ValueError as exc:
                features.append(None)
                errors.append(str(exc))
        return pa.table({"features": pa.array(features, pa.list_(pa.float64())),
                         "error": pa.array(errors, pa.string())})


def _features_in_arrow(table: "pa.Table", options: TabularOptions) -> "pa.Table":
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc

    error = pa.nulls(table.num_rows, pa.string())
    numbers = []
    for column in options.feature_columns:
        values = table.column(column)
        if pa.types.is_string(values.type) or pa.types.is_large_string(values.type):
            blank = pc.equal(pc.utf8_trim_whitespace(values), "")
            values = pc.if_else(blank, pa.scalar(None, values.type), values)
        number = values.cast(pa.float64())  # a value that isn't a number: raises
        missing = pc.fill_null(pc.is_nan(number), True)
        error = pc.if_else(pc.and_(pc.is_null(error), missing),
                           f"column {column!r} is missing", error)
        numbers.append(pc.fill_null(number, 0.0).to_numpy())
    rows = np.column_stack(numbers).ravel() if numbers else np.empty(0)
    features = pa.FixedSizeListArray.from_arrays(pa.array(rows), len(numbers))
    return pa.table({"features": features.cast(pa.list_(pa.float64())), "error": error})


#: Prediction types Arrow casts to each result type exactly as :func:`postprocess`
#: does (``str(7) == "7"``, but ``str(7.0)`` is ``"7.0"`` where Arrow writes ``"7"``).
_SAME_CAST = {"string": ("string", "large_string", "integer"), "int64": ("integer",),
              "double": ("floating", "integer")}


def postprocess_batch(table: "pa.Table", options: TabularOptions) -> "pa.Table":
    """:func:`postprocess` for a whole block, where Arrow's cast of the predictions is
    Python's; any other block is left to :func:`postprocess`, row by row."""
    import pyarrow as pa

    prediction = table.column("prediction")
    kinds = _SAME_CAST[options.prediction_type]
    if not any(getattr(pa.types, f"is_{kind}")(prediction.type) for kind in kinds) \
            and not pa.types.is_null(prediction.type):
        raise TypeError(f"prediction: {prediction.type}, not {options.prediction_type}")
    probabilities = (table.column("probabilities") if "probabilities" in table.column_names
                     else pa.nulls(table.num_rows))
    return pa.table({
        "prediction": prediction.cast({"string": pa.string(), "int64": pa.int64(),
                                       "double": pa.float64()}[options.prediction_type]),
        "probabilities": probabilities.cast(pa.list_(pa.float64())),
        "error": pa.nulls(table.num_rows, pa.string()),
    })


JOB = JobDefinition(
    name="tabular-predict",
    description="Apply a scikit-learn-compatible model file (joblib) to feature columns.",
    spec_model=TabularSpec,
    preprocess=preprocess,
    postprocess=postprocess,
    preprocess_batch=preprocess_batch,
    postprocess_batch=postprocess_batch,
    required_columns=lambda options: list(options.feature_columns),
    result_columns=lambda options: {"prediction": options.prediction_type,
                                    "probabilities": "list<double>"},
    smoke_overrides={
        "data.input": "sample:accounts",
        "engine.kind": "sklearn",
        "engine.model": "sample:tiny-tabular",
        "engine.batch_size": 10_000,
    },
)
