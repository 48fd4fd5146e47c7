"""Predictor jobs: a YAML job whose model stage is the user's own Python class.

The seeds' Predictor pattern, with everything else the toolkit does: the class
(``predictor: my_model.py:Scorer`` in the job file, or ``my_package.models:Scorer``)
is constructed once per engine worker with ``options.init_kwargs`` and called on
batches, ``{column: numpy array}`` of ``options.input_columns`` for the batch's
good rows; it returns ``{column: values}``, one value per row, for every column
of ``options.output``. It runs as ``engine.kind: python`` / ``engine.task: custom``
with ``engine.model`` naming the class, so batch size, concurrency and
accelerator mean what they mean for every engine. A row with a missing input is
an error row; a batch that raises is retried row by row, so one bad row is one
error row.
"""

from __future__ import annotations

import math
from typing import Any, Literal

from pydantic import Field

from toolkit.spec.job_definition import JobDefinition
from toolkit.spec.models import JobSpec, StrictModel

OutputType = Literal["string", "int64", "double", "bool", "list<float>", "list<double>",
                     "list<string>"]


class PredictorOptions(StrictModel):
    input_columns: list[str] = Field(
        min_length=1,
        description="Input columns handed to the predictor, as numpy arrays (checked "
        "against the input before any model loads). A row where one is null or blank (CSV has "
        "no nulls) is an error row.",
    )
    output: dict[str, OutputType] = Field(
        min_length=1,
        description="The columns the predictor returns, one value per row, and their types "
        "(string, int64, double, bool, list<float>, list<double>, list<string>).",
    )
    init_kwargs: dict[str, Any] = Field(
        default_factory=dict,
        description="Keyword arguments for the class's constructor (a model path, a threshold...).",
    )


class PredictorJobSpec(JobSpec):
    options: PredictorOptions


def preprocess(row: dict[str, Any], options: PredictorOptions) -> dict[str, Any]:
    values = {}
    for column in options.input_columns:
        value = row.get(column)
        if (value is None or (isinstance(value, float) and math.isnan(value))
                or (isinstance(value, str) and not value.strip())):
            raise ValueError(f"column {column!r} is missing")
        values[column] = value
    return {"inputs": values}


_CASTS = {"string": str, "int64": int, "double": float, "bool": bool}


def postprocess(row: dict[str, Any], options: PredictorOptions) -> dict[str, Any]:
    produced = row["outputs"]
    results = {}
    for name, alias in options.output.items():
        value = produced.get(name)
        try:
            if value is None:
                results[name] = None
            elif alias.startswith("list<"):
                cast = _CASTS[alias[len("list<"):-1].replace("float", "double")]
                results[name] = [cast(v) for v in value]
            else:
                results[name] = _CASTS[alias](value)
        except (TypeError, ValueError):
            raise ValueError(f"predictor column {name!r}: {value!r} is not {alias}") from None
    return results


def predictor_job_definition(name: str, description: str, predictor: str,
                             defaults: dict[str, Any],
                             smoke_overrides: dict[str, Any]) -> JobDefinition[PredictorOptions]:
    """The pipeline contract for a YAML job naming ``predictor`` (``file.py:Class``)."""
    engine = {**defaults.get("engine", {}), "kind": "python", "task": "custom", "model": predictor}
    return JobDefinition(
        name=name,
        description=description,
        spec_model=PredictorJobSpec,
        preprocess=preprocess,
        postprocess=postprocess,
        required_columns=lambda options: list(options.input_columns),
        result_columns=lambda options: dict(options.output),
        defaults={**defaults, "engine": engine},
        # --smoke switches engines to transformers; a predictor job keeps its own class.
        smoke_overrides={"engine.kind": "python", **smoke_overrides},
    )
