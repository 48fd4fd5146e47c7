"""Preparing rows for the model stages other than chat generation (``engine.task``).

The same as :func:`toolkit.run.row_steps.prepare_row` for chat, with the task's own
input columns: the job's preprocess gives them (``prompt``; ``image`` +
``image_size``; ``features``), and a row it rejects becomes an error row whose
input columns are null, so every row of a block has the same columns and no
model time is spent on it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Callable

from toolkit.spec.row_contract import ERROR_COLUMN, RAY_LLM_ERROR_COLUMN


def prepare_task_row(
    row: dict[str, Any],
    preprocess: Callable[[dict[str, Any], Any], dict[str, Any]],
    options: Any,
    input_columns: Sequence[str],
) -> dict[str, Any]:
    """Run the job's preprocess; the row gets exactly ``input_columns`` (null on error)."""
    out = dict(row)
    try:
        produced = preprocess(row, options)
        missing = [c for c in input_columns if produced.get(c) is None]
        if missing:
            raise ValueError(f"preprocess returned no {', '.join(missing)}")
        out.update(produced)
        out[ERROR_COLUMN] = None
    except Exception as exc:  # noqa: BLE001 - recorded on the row
        out.update(dict.fromkeys(input_columns))
        out[ERROR_COLUMN] = f"preprocess: {exc}"
    # Ray Data LLM's stages (vLLM embed/classify) skip rows where this is non-empty.
    out[RAY_LLM_ERROR_COLUMN] = out[ERROR_COLUMN] or ""
    return out
