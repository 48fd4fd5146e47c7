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
from typing import Any, Literal

from pydantic import Field

from toolkit.spec.job_definition import JobDefinition
from toolkit.spec.models import JobSpec, StrictModel


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


JOB = JobDefinition(
    name="tabular-predict",
    description="Apply a scikit-learn-compatible model file (joblib) to feature columns.",
    spec_model=TabularSpec,
    preprocess=preprocess,
    postprocess=postprocess,
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
