"""Rows through a cascade: the small model's answers, which go on, and the final row.

A cascade is two model stages in the job's stage list with a rule between them
(:mod:`toolkit.spec.cascade`). The small model's stage answers every row and its
answers are checked as the main stage's would be; then :func:`route_first_answers`
decides, row by row in Arrow, which go on. Its answers move to ``<column>_first``
columns on every row it answered, so they ride through the main stage untouched. A
row it keeps is marked as a row that failed earlier (:data:`KEPT`), the same mark
every later stage already skips (no preprocess, no model time, on every engine); a
row it escalates has its error cleared so the main model runs it. After the main
stage :func:`settle_cascade` puts a kept row's answer back, clears its mark and says
who answered. Both are Ray Data ``map_batches`` steps fused with the stages' own, so
the rows stream through both models' worker pools and each model loads only in its
own stage's workers.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

from toolkit.run.output.summary import FIRST_TOKEN_COLUMNS, TOKEN_COLUMNS
from toolkit.spec.cascade import ANSWERED_BY_COLUMN, confidence_columns, first_columns
from toolkit.spec.row_contract import (
    ERROR_COLUMN,
    FAILED_CHECKS_COLUMN,
    FINISH_REASON_COLUMN,
)

if TYPE_CHECKING:
    import pyarrow as pa

#: The ``error`` of a row the small model kept while it passes the main stage, which
#: skips it as it skips a row an earlier stage failed. Never written.
KEPT = "cascade: answered by the small model"
#: Rows before the small model's engine that it could answer (no earlier error).
REACHED = "__cascade_reached"
#: What rides from the small model's stage to the end of the main one.
KEPT_FLAG = "__cascade_kept"
ESCALATED_FLAG = "__cascade_escalated"
FIRST_FINISH = "__cascade_first_finish_reason"
FIRST_TOKENS = {name: f"__cascade_first_{name}" for name in TOKEN_COLUMNS}


def mark_reached(batch: "pa.Table") -> "pa.Table":
    """Before the small model: which rows it will answer (those with no error yet), so
    a row rejected before it (preprocess, an earlier stage) is never escalated."""
    import pyarrow.compute as pc

    return batch.append_column(REACHED, pc.is_null(batch.column(ERROR_COLUMN)))


def first_answers_fields() -> list["pa.Field"]:
    """The column the small model's finished rows carry besides the output's own."""
    import pyarrow as pa

    return [pa.field(REACHED, pa.bool_())]


def transit_fields() -> list["pa.Field"]:
    """The columns that ride from the small model's stage to :func:`settle_cascade`."""
    import pyarrow as pa

    return [pa.field(KEPT_FLAG, pa.bool_()), pa.field(ESCALATED_FLAG, pa.bool_()),
            pa.field(FIRST_FINISH, pa.string()),
            *(pa.field(name, pa.int64()) for name in FIRST_TOKENS.values())]


def cascade_columns(results: Mapping[str, str]) -> dict[str, str]:
    """The output columns a cascade adds after the results: ``answered_by``, then the
    small model's overruled answers (``<column>_first``, ``<column>_first_confidence``)
    and its token counts on those rows (``num_input_tokens_first``, ...)."""
    return {ANSWERED_BY_COLUMN: "string",
            **{first: results[column] for column, first in first_columns(results).items()},
            **dict.fromkeys(FIRST_TOKEN_COLUMNS.values(), "int64")}


def route_first_answers(batch: "pa.Table", results: Mapping[str, str],
                        escalate_below: float | None) -> "pa.Table":
    """The small model's finished rows, routed: each row it answered keeps its answers
    in ``<column>_first``; a row goes on (error cleared) when it errored, failed a
    check or its confidence is under ``escalate_below`` (or unknown), else it is kept
    (error :data:`KEPT`). The answer columns are dropped: the main stage writes them."""
    import pyarrow as pa
    import pyarrow.compute as pc

    reached = pc.fill_null(batch.column(REACHED), False)
    doubtful = pc.or_(pc.is_valid(batch.column(ERROR_COLUMN)),
                      pc.is_valid(batch.column(FAILED_CHECKS_COLUMN)))
    if escalate_below is not None:
        for column in confidence_columns(results):
            unsure = pc.fill_null(pc.less(batch.column(column), escalate_below), True)
            doubtful = pc.or_(doubtful, unsure)
    escalated = pc.and_(reached, doubtful)
    kept = pc.and_(reached, pc.invert(doubtful))
    error = pc.if_else(kept, pa.scalar(KEPT),
                       pc.if_else(escalated, pa.scalar(None, pa.string()),
                                  batch.column(ERROR_COLUMN)))
    added = {KEPT_FLAG: kept, ESCALATED_FLAG: escalated,
             FIRST_FINISH: batch.column(FINISH_REASON_COLUMN),
             **{FIRST_TOKENS[name]: batch.column(name) for name in TOKEN_COLUMNS}}
    for column, first in first_columns(results).items():
        added[first] = batch.column(column)
    gone = {*results, FINISH_REASON_COLUMN, FAILED_CHECKS_COLUMN, *TOKEN_COLUMNS, REACHED,
            ERROR_COLUMN}
    kept_columns = [name for name in batch.column_names if name not in gone]
    table = batch.select(kept_columns)
    for name, column in added.items():
        table = table.append_column(name, column)
    return table.append_column(ERROR_COLUMN, error)


def settle_cascade(batch: "pa.Table", results: Mapping[str, str], schema: "pa.Schema",
                   small_model: str, big_model: str) -> "pa.Table":
    """The main stage's finished rows as the output has them: a kept row gets its small
    model's answer (and finish reason, token counts) back, its mark cleared and its
    ``<column>_first`` columns null; an escalated row keeps the small model's token
    counts in ``num_input_tokens_first``/``num_generated_tokens_first``; ``answered_by``
    names the model whose answer (or error) each row carries; null on a row no model
    ran."""
    import pyarrow as pa
    import pyarrow.compute as pc

    kept = pc.fill_null(batch.column(KEPT_FLAG), False)
    escalated = pc.fill_null(batch.column(ESCALATED_FLAG), False)
    columns = {name: batch.column(name) for name in batch.column_names}
    for column, first in first_columns(results).items():
        answer = columns[first]
        if pa.types.is_floating(answer.type):
            # A null rode through the main stage's engine as NumPy's NaN.
            answer = pc.if_else(pc.is_nan(answer), pa.scalar(None, answer.type), answer)
        columns[column] = pc.if_else(kept, answer, columns[column])
        columns[first] = pc.if_else(kept, pa.scalar(None, answer.type), answer)
    columns[ERROR_COLUMN] = pc.if_else(kept, pa.scalar(None, pa.string()),
                                       columns[ERROR_COLUMN])
    columns[FINISH_REASON_COLUMN] = pc.if_else(kept, columns[FIRST_FINISH],
                                               columns[FINISH_REASON_COLUMN])
    for name, first in FIRST_TOKENS.items():
        columns[name] = pc.if_else(kept, columns[first], columns[name])
        columns[FIRST_TOKEN_COLUMNS[name]] = pc.if_else(
            escalated, columns[first], pa.scalar(None, columns[first].type))
    columns[ANSWERED_BY_COLUMN] = pc.if_else(
        kept, pa.scalar(small_model),
        pc.if_else(escalated, pa.scalar(big_model), pa.scalar(None, pa.string())))
    return pa.Table.from_arrays([columns[field.name].cast(field.type) for field in schema],
                                schema=schema)
