"""The columns every stage agrees on, and converting Arrow/NumPy values back to Python.

Preprocess adds ``messages`` (OpenAI chat format) and ``sampling_params``; an engine
adds ``generated_text``; every row carries ``error`` (null when fine), so a failed
row is written with its reason instead of killing the job.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    import pyarrow as pa

ERROR_COLUMN = "error"
MESSAGES_COLUMN = "messages"
SAMPLING_PARAMS_COLUMN = "sampling_params"
GENERATED_TEXT_COLUMN = "generated_text"
# Ray Data LLM's name for a failed row's message when should_continue_on_error is on.
RAY_LLM_ERROR_COLUMN = "__inference_error__"
#: Why generation ended: ``stop`` (the model finished), ``length`` (cut off at
#: ``max_tokens``), ``error`` (the row failed). OpenAI's and vLLM's names.
FINISH_REASON_COLUMN = "finish_reason"
#: The generated tokens' summed log-probability, where the engine reports it (after
#: the structured-output mask, so a choice's probability is over the choices).
GENERATED_LOGPROB_COLUMN = "generated_logprob"
#: The checks a row failed, comma-separated (null when it passed every one).
FAILED_CHECKS_COLUMN = "failed_checks"
#: The row's own token budget, kept beside its sampling params: Ray Data LLM's vLLM
#: stage consumes those, and finish_reason is judged against it afterwards.
MAX_TOKENS_COLUMN = "__max_tokens"


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


def prompt_too_long(n_tokens: int, max_model_len: int, at_least: bool = False) -> str:
    """The error of a row whose prompt the model can't take, the same on every engine
    (the transformers engine checks it itself; vLLM's words are read back into it).
    ``at_least``: the count stopped early (vLLM tokenizes one token past the limit)."""
    count = f"at least {n_tokens}" if at_least else str(n_tokens)
    return f"prompt is {count} tokens, longer than max_model_len {max_model_len}"


def row_error(value: Any) -> str | None:
    """An ``error`` cell as text, or None: Arrow nulls can arrive as None or NaN."""
    if isinstance(value, str):
        return value or None
    return None


# -- model stages other than chat generation (engine.task) ---------------------
#: Text for classify/embed (Ray Data LLM's name for a plain-text prompt).
PROMPT_COLUMN = "prompt"
#: image-classify: the decoded, resized picture as raw RGB bytes, and its [width, height].
IMAGE_COLUMN = "image"
IMAGE_SIZE_COLUMN = "image_size"
#: tabular: one row's features as a list of floats, in the model's column order.
FEATURES_COLUMN = "features"
LABEL_COLUMN = "label"
SCORE_COLUMN = "score"
EMBEDDING_COLUMN = "embedding"
PREDICTION_COLUMN = "prediction"
PROBABILITIES_COLUMN = "probabilities"


class TaskContract:
    """What a job's preprocess adds for a task (``inputs``) and what its engine adds
    (``outputs``, with their Arrow type aliases). A good row whose first output is
    null is an error row ("the engine returned no ...")."""

    def __init__(self, inputs: tuple[str, ...], outputs: dict[str, str]) -> None:
        self.inputs = inputs
        self.outputs = outputs

    @property
    def chat(self) -> bool:
        """Reads chat messages (and each row's sampling params): text generation."""
        return MESSAGES_COLUMN in self.inputs

    @property
    def main_output(self) -> str:
        return next(iter(self.outputs))


TASK_CONTRACTS: dict[str, TaskContract] = {
    "generate": TaskContract((MESSAGES_COLUMN,), {
        GENERATED_TEXT_COLUMN: "string", FINISH_REASON_COLUMN: "string",
        GENERATED_LOGPROB_COLUMN: "double", FAILED_CHECKS_COLUMN: "string"}),
    "classify": TaskContract((PROMPT_COLUMN,), {LABEL_COLUMN: "string", SCORE_COLUMN: "double"}),
    "embed": TaskContract((PROMPT_COLUMN,), {EMBEDDING_COLUMN: "list<float>"}),
    "image-classify": TaskContract((IMAGE_COLUMN, IMAGE_SIZE_COLUMN),
                                   {LABEL_COLUMN: "string", SCORE_COLUMN: "double"}),
    "tabular": TaskContract((FEATURES_COLUMN,),
                            {PREDICTION_COLUMN: "string", PROBABILITIES_COLUMN: "list<double>"}),
    # A user's predictor class: the row's input columns in, whatever it returns out
    # (the predictor job's postprocess types them).
    "custom": TaskContract(("inputs",), {"outputs": "string"}),
}


def arrow_type(alias: str) -> Any:
    """``pa.type_for_alias`` plus lists: ``list<float>``, ``list<double>``, ``list<string>``."""
    import pyarrow as pa

    if alias.startswith("list<") and alias.endswith(">"):
        return pa.list_(arrow_type(alias[len("list<"):-1]))
    return pa.type_for_alias(alias)


def engine_results(row: dict[str, Any], columns: Sequence[str]) -> dict[str, Any]:
    """The engine's outputs as result columns: the postprocess of jobs that add nothing."""
    return {column: plain(row.get(column)) for column in columns}


def engine_result_columns(table: "pa.Table", columns: Sequence[str]) -> "pa.Table":
    """:func:`engine_results` for a whole block: the engine's output columns as they are
    (a tensor column as its plain list storage) and no error of its own."""
    import pyarrow as pa

    made: dict[str, Any] = {}
    for name in columns:
        if name not in table.column_names:
            made[name] = pa.nulls(table.num_rows)
            continue
        values = table.column(name)
        if isinstance(values.type, pa.ExtensionType):
            values = pa.chunked_array([chunk.storage for chunk in values.chunks],
                                      values.type.storage_type)
        made[name] = values
    made[ERROR_COLUMN] = pa.nulls(table.num_rows, pa.string())
    return pa.table(made)
