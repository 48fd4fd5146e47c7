"""A text column as the prompt of a classify or embed stage, a row or a block at a time.

text-classify and embed (and any job whose stage reads one text column) reject a blank
text with the same words either way, so a block taken in Arrow reads exactly as its
rows taken one by one.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from toolkit.spec.row_contract import ERROR_COLUMN, PROMPT_COLUMN

if TYPE_CHECKING:
    import pyarrow as pa


def text_prompt(row: dict[str, Any], column: str) -> dict[str, Any]:
    """``{"prompt": text}`` from the row's ``column``.

    Raises:
        ValueError: the text is missing or blank (the row becomes an error row).
    """
    text = row.get(column)
    if text is None or not str(text).strip():
        raise ValueError(f"column {column!r} is empty")
    return {PROMPT_COLUMN: str(text)}


def text_prompts(table: "pa.Table", column: str) -> "pa.Table":
    """:func:`text_prompt` for a whole block: ``prompt`` and ``error`` in Arrow.

    Text and whole numbers are read in Arrow (its cast of an integer is Python's
    ``str``); any other type (``str(1.0)`` is ``"1.0"`` where Arrow writes ``"1"``) goes
    through :func:`text_prompt` row by row.
    """
    import pyarrow as pa
    import pyarrow.compute as pc

    values = table.column(column)
    kind = values.type
    if not (pa.types.is_string(kind) or pa.types.is_large_string(kind)
            or pa.types.is_integer(kind) or pa.types.is_null(kind)):
        return _row_by_row(table, column)
    text = values.cast(pa.string())
    blank = pc.fill_null(pc.equal(pc.utf8_trim_whitespace(text), ""), True)
    return pa.table({
        PROMPT_COLUMN: pc.if_else(blank, pa.scalar(None, pa.string()), text),
        ERROR_COLUMN: pc.if_else(blank, f"column {column!r} is empty",
                                 pa.scalar(None, pa.string())),
    })


def _row_by_row(table: "pa.Table", column: str) -> "pa.Table":
    import pyarrow as pa

    prompts: list[str | None] = []
    errors: list[str | None] = []
    for value in table.column(column).to_pylist():
        try:
            prompts.append(text_prompt({column: value}, column)[PROMPT_COLUMN])
            errors.append(None)
        except ValueError as exc:
            prompts.append(None)
            errors.append(str(exc))
    return pa.table({PROMPT_COLUMN: pa.array(prompts, pa.string()),
                     ERROR_COLUMN: pa.array(errors, pa.string())})
