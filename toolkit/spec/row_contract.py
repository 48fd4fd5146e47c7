"""The columns every stage agrees on, and converting Arrow/NumPy values back to Python.

Preprocess adds ``messages`` (OpenAI chat format) and ``sampling_params``; an engine
adds ``generated_text``; every row carries ``error`` (null when fine), so a failed
row is written with its reason instead of killing the job.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

ERROR_COLUMN = "error"
MESSAGES_COLUMN = "messages"
SAMPLING_PARAMS_COLUMN = "sampling_params"
GENERATED_TEXT_COLUMN = "generated_text"
# Ray Data LLM's name for a failed row's message when should_continue_on_error is on.
RAY_LLM_ERROR_COLUMN = "__inference_error__"


def plain(value: Any) -> Any:
    """Recursively turn NumPy arrays/scalars (as Ray hands batches over) into Python."""
    if isinstance(value, np.ndarray):
        return [plain(v) for v in value.tolist()] if value.dtype == object else value.tolist()
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, Mapping):
        return {k: plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    return value


def object_column(values: Sequence[Any]) -> np.ndarray:
    """A 1-D object array, even when every value is a same-length list."""
    column = np.empty(len(values), dtype=object)
    for i, value in enumerate(values):
        column[i] = value
    return column


def row_error(value: Any) -> str | None:
    """An ``error`` cell as text, or None: Arrow nulls can arrive as None or NaN."""
    if isinstance(value, str):
        return value or None
    return None
