"""Rows between the model stages of a multi-stage job (``JobDefinition.stages``).

After each earlier stage the rows have a fixed shape: the input's columns, the
result columns of every stage so far, and ``error``; whatever the stage's engine
added besides (its inputs, ``messages``, token counts, Ray Data LLM's own columns)
is dropped there, so the next stage starts from the same columns whichever engine
ran. A row that failed in a stage keeps its error through the later stages: they
don't run its preprocess and their engines skip it (``error`` for ours,
``__inference_error__`` for Ray Data LLM's), so no model time goes to it and the
output says which stage rejected it and why.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Callable

from toolkit.spec.row_contract import ERROR_COLUMN, RAY_LLM_ERROR_COLUMN, arrow_type, row_error

if TYPE_CHECKING:
    import pyarrow as pa
    from ray.data import Dataset

Prepare = Callable[..., dict[str, Any]]


def _failed_earlier(row: dict[str, Any], options: Any) -> dict[str, Any]:
    raise ValueError("failed in an earlier stage")


def prepare_after_earlier_stage(
    row: dict[str, Any], prepare: Prepare, preprocess: Callable[..., dict[str, Any]],
    **kwargs: Any,
) -> dict[str, Any]:
    """``prepare`` (``prepare_row`` or ``prepare_task_row``) for a later stage: a row
    an earlier stage failed gets the stage's input columns as null, without its
    preprocess running, and keeps the earlier error."""
    earlier = row_error(row.get(ERROR_COLUMN))
    if earlier is None:
        return prepare(row, preprocess=preprocess, **kwargs)
    out = prepare(row, preprocess=_failed_earlier, **kwargs)
    out[ERROR_COLUMN] = earlier
    out[RAY_LLM_ERROR_COLUMN] = earlier
    return out


def prepare_stage_rows(
    ds: "Dataset", prepare: Prepare, fn_kwargs: dict[str, Any], after_earlier_stage: bool
) -> "Dataset":
    """``ds.map(prepare)``; after an earlier stage, keeping the rows it failed as they are."""
    if not after_earlier_stage:
        return ds.map(prepare, fn_kwargs=fn_kwargs)
    return ds.map(prepare_after_earlier_stage, fn_kwargs={"prepare": prepare, **fn_kwargs})


def between_stages_schema(
    input_schema: "pa.Schema", result_columns: Mapping[str, str]
) -> "pa.Schema":
    """The rows after an earlier stage: input columns, the stages' results so far, ``error``."""
    import pyarrow as pa

    skip = {*result_columns, ERROR_COLUMN}
    fields = [f.with_nullable(True) for f in input_schema if f.name not in skip]
    fields += [pa.field(name, arrow_type(alias)) for name, alias in result_columns.items()]
    fields.append(pa.field(ERROR_COLUMN, pa.string()))
    return pa.schema(fields)


def clashing_result_columns(named_columns: list[tuple[str, Mapping[str, str]]]) -> list[str]:
    """``column (stage a, stage b)`` for each result column two stages both write."""
    owner: dict[str, str] = {}
    clashes = []
    for stage, columns in named_columns:
        for column in columns:
            if column in owner:
                clashes.append(f"{column} ({owner[column]}, {stage})")
            owner.setdefault(column, stage)
    return clashes
