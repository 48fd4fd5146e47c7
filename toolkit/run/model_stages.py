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

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, Callable

from toolkit.engines import BatchStep
from toolkit.spec.row_contract import ERROR_COLUMN, RAY_LLM_ERROR_COLUMN, arrow_type, row_error

if TYPE_CHECKING:
    import pyarrow as pa

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


def stage_rows_step(prepare: Prepare, fn_kwargs: dict[str, Any],
                    after_earlier_stage: bool) -> BatchStep:
    """``prepare`` on every row of a batch (:func:`prepare_batch`); after an earlier
    stage, keeping the rows it failed as they are."""
    if after_earlier_stage:
        fn_kwargs = {"prepare": prepare_after_earlier_stage, "inner": prepare, **fn_kwargs}
    else:
        fn_kwargs = {"prepare": prepare, **fn_kwargs}
    return prepare_batch, fn_kwargs


def prepare_batch(batch: "pa.Table", prepare: Prepare, inner: Prepare | None = None,
                  **fn_kwargs: Any) -> "pa.Table":
    """``prepare`` (a row -> the row with the stage's inputs) on each row of ``batch``,
    with only what it changed or added built back from Python: the columns it left
    alone pass through as Arrow, untouched.

    The new columns are built as Ray Data builds a row-wise ``map``'s
    (``BlockAccessor.batch_to_arrow_block``), so a stage's engine sees the same types.
    """
    from ray.data.block import BlockAccessor

    rows = batch.to_pylist()
    if inner is not None:
        fn_kwargs = {"prepare": inner, **fn_kwargs}
    outs = [prepare(row, **fn_kwargs) for row in rows]
    changed: dict[str, None] = {}
    for row, out in zip(rows, outs):
        for key, value in out.items():
            # ``prepare`` copies the row: a value it left alone is the very same object.
            if key not in changed and (key not in row or value is not row[key]):
                changed[key] = None
    if not changed:
        return batch
    built = BlockAccessor.batch_to_arrow_block(
        {key: [out.get(key) for out in outs] for key in changed})
    names = batch.column_names
    for key in changed:
        if key in names:
            batch = batch.set_column(names.index(key), key, built.column(key))
        else:
            batch = batch.append_column(key, built.column(key))
    return batch


def prepare_table(batch: "pa.Table", preprocess_batch: Callable[..., "pa.Table"],
                  options: Any, input_columns: Sequence[str]) -> "pa.Table":
    """A job's ``preprocess_batch`` on a whole block: the task's input columns (null on
    the rows it rejects) and ``error`` (``preprocess: <why>``), all in Arrow, as
    :func:`toolkit.run.task_rows.prepare_task_row` makes them row by row."""
    import pyarrow as pa
    import pyarrow.compute as pc

    made = preprocess_batch(batch, options)
    if made.num_rows != batch.num_rows:
        raise RuntimeError(f"preprocess_batch returned {made.num_rows} rows for "
                           f"{batch.num_rows}")
    why = made.column(ERROR_COLUMN).cast(pa.string())
    rejected = pc.is_valid(why)
    columns = {name: pc.if_else(rejected, pa.scalar(None, made.column(name).type),
                                made.column(name)) for name in input_columns}
    errors = pc.binary_join_element_wise("preprocess: ", why, "")
    columns[ERROR_COLUMN] = errors
    # Ray Data LLM's stages skip rows where this is non-empty.
    columns[RAY_LLM_ERROR_COLUMN] = pc.fill_null(errors, "")
    names = batch.column_names
    for name, column in columns.items():
        batch = (batch.set_column(names.index(name), name, column) if name in names
                 else batch.append_column(name, column))
        names = batch.column_names
    return batch


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
