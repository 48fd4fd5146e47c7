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
from typing import TYPE_CHECKING, Any, Literal

from pydantic import Field

from toolkit.spec.job_definition import JobDefinition
from toolkit.spec.models import JobSpec, StrictModel

if TYPE_CHECKING:
    import pyarrow as pa

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


def preprocess_batch(table: "pa.Table", options: PredictorOptions) -> "pa.Table":
    """:func:`preprocess` for a whole block, in Arrow: ``inputs`` (a struct of the
    input columns) and ``error``, the first missing input column of each row."""
    import pyarrow as pa
    import pyarrow.compute as pc

    error = pa.nulls(table.num_rows, pa.string())
    for column in options.input_columns:
        values = table.column(column)
        missing = pc.is_null(values, nan_is_null=pa.types.is_floating(values.type))
        if pa.types.is_string(values.type) or pa.types.is_large_string(values.type):
            missing = pc.or_(missing, pc.equal(pc.utf8_trim_whitespace(values), ""))
        missing = pc.fill_null(missing, True)
        error = pc.if_else(pc.and_(pc.is_null(error), missing),
                           f"column {column!r} is missing", error)
    inputs = pa.StructArray.from_arrays(
        [table.column(column).combine_chunks() for column in options.input_columns],
        names=list(options.input_columns))
    return pa.table({"inputs": inputs, "error": error})


def postprocess_batch(table: "pa.Table", options: PredictorOptions) -> "pa.Table":
    """:func:`postprocess` for a whole block, where each ``outputs`` field already has
    its column's type (the cast would change nothing); any other block is left to
    :func:`postprocess`, row by row, which says which value is not of its type."""
    import pyarrow as pa
    import pyarrow.compute as pc

    from toolkit.spec.row_contract import arrow_type  # with numpy: not at the CLI's start

    outputs = table.column("outputs")
    columns = {}
    for name, alias in options.output.items():
        values = pc.struct_field(outputs, name)
        if values.type != arrow_type(alias) and not pa.types.is_null(values.type):
            raise TypeError(f"{name}: {values.type}, not {alias}")
        columns[name] = values.cast(arrow_type(alias))
    columns["error"] = pa.nulls(table.num_rows, pa.string())
    return pa.table(columns)


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
        preprocess_batch=preprocess_batch,
        postprocess_batch=postprocess_batch,
        required_columns=lambda options: list(options.input_columns),
        result_columns=lambda options: dict(options.output),
        defaults={**defaults, "engine": engine},
        # --smoke switches engines to transformers; a predictor job keeps its own class.
        smoke_overrides={"engine.kind": "python", **smoke_overrides},
    )
