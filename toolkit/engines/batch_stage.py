"""What every non-chat model stage does with a batch, whichever model runs it.

A stage reads its task's input columns (``toolkit.spec.row_contract.TASK_CONTRACTS``),
passes error rows by without model time, runs the model once on the rest of the
batch, and adds its output columns. When the whole batch fails, each row is
retried alone, so one bad row becomes one error row instead of a failed batch.
The input columns are consumed here: carrying pixels or features on to the
writer only costs memory.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from toolkit.spec.row_contract import (
    ERROR_COLUMN,
    MESSAGES_COLUMN,
    SAMPLING_PARAMS_COLUMN,
    object_column,
    plain,
    row_error,
)

if TYPE_CHECKING:
    import pyarrow as pa

#: ``inputs per row -> one result dict per row`` (same order and length).
Predict = Callable[[list[tuple[Any, ...]]], list[dict[str, Any]]]


def run_model_on_batch(
    batch: dict[str, np.ndarray],
    input_columns: Sequence[str],
    output_columns: Sequence[str],
    predict: Predict,
) -> dict[str, np.ndarray]:
    """Apply ``predict`` to the batch's good rows; fold failures into ``error``."""
    size = len(batch[input_columns[0]])
    errors = [row_error(v) for v in batch.get(ERROR_COLUMN, [None] * size)]
    todo = [i for i in range(size) if not errors[i]]
    outputs: dict[str, list[Any]] = {c: [None] * size for c in output_columns}
    inputs = [tuple(plain(batch[c][i]) if c in batch else None for c in input_columns)
              for i in todo]
    for i, result in zip(todo, _isolating_failures(predict, inputs)):
        if isinstance(result, BaseException):
            errors[i] = f"engine error: {type(result).__name__}: {result}"
        else:
            for column in output_columns:
                outputs[column][i] = result.get(column)
    for column in (*input_columns, MESSAGES_COLUMN, SAMPLING_PARAMS_COLUMN):
        batch.pop(column, None)
    for column, values in outputs.items():
        batch[column] = object_column(values)
    batch[ERROR_COLUMN] = object_column(errors)
    return batch


def error_text(batch: "pa.Table") -> "pa.ChunkedArray":
    """The rows' ``error`` as :func:`row_error` reads it: null, or a non-empty text."""
    import pyarrow as pa
    import pyarrow.compute as pc

    if ERROR_COLUMN not in batch.column_names:
        return pa.chunked_array([pa.nulls(batch.num_rows, pa.string())])
    error = batch.column(ERROR_COLUMN).cast(pa.string())
    return pc.if_else(pc.equal(error, ""), pa.scalar(None, pa.string()), error)


def through_numpy(batch: "pa.Table", call: Callable[[dict[str, np.ndarray]], Any]) -> "pa.Table":
    """A block through the numpy path every model stage takes (:func:`run_model_on_batch`:
    row by row where the model fails), back as Arrow."""
    from ray.data.block import BlockAccessor

    numpy = {name: batch.column(name).to_numpy(zero_copy_only=False)
             for name in batch.column_names}
    return BlockAccessor.batch_to_arrow_block(call(numpy))


def _isolating_failures(predict: Predict, inputs: list[tuple[Any, ...]]) -> list[Any]:
    if not inputs:
        return []
    try:
        results = predict(inputs)
        if len(results) != len(inputs):
            raise RuntimeError(f"model returned {len(results)} results for {len(inputs)} rows")
        return results
    except Exception as exc:  # noqa: BLE001 - retried row by row to find the culprit
        if len(inputs) == 1:
            return [exc]
    found: list[Any] = []
    for one in inputs:
        try:
            found.extend(predict([one]))
        except Exception as exc:  # noqa: BLE001 - becomes that row's error
            found.append(exc)
    return found


class ModelStage:
    """Base of the class UDFs (model loaded once per actor in ``__init__``)."""

    input_columns: tuple[str, ...] = ()
    output_columns: tuple[str, ...] = ()

    def predict(self, inputs: list[tuple[Any, ...]]) -> list[dict[str, Any]]:
        raise NotImplementedError

    def __call__(self, batch: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        return run_model_on_batch(batch, self.input_columns, self.output_columns, self.predict)


def torch_device(use_gpu: bool, num_threads: int) -> str:
    """``cuda`` when the worker holds a GPU, else ``cpu`` with ``num_threads`` threads."""
    import torch

    torch.set_num_threads(max(1, num_threads))
    return "cuda" if use_gpu and torch.cuda.is_available() else "cpu"


def actor_pool(min_size: int, max_size: int) -> Any:
    """A fixed pool when ``min_size == max_size`` (``engine.concurrency: 4``), else an
    autoscaling one (``engine.concurrency: [1, 4]``), as the vLLM engine's."""
    from ray.data import ActorPoolStrategy

    if min_size == max_size:
        return ActorPoolStrategy(size=max_size)
    return ActorPoolStrategy(min_size=min_size, max_size=max_size)


def stage_resources(engine: Any) -> dict[str, Any]:
    """The ``map_batches`` resource arguments every actor-pool model stage takes, and
    the engine's bound on restarts of a worker that died, where it has one
    (``engine.max_restarts``; Ray Data's own default restarts without end)."""
    use_gpu = engine.accelerator_type is not None
    return {
        "batch_size": engine.batch_size,
        "batch_format": "numpy",
        "compute": actor_pool(*engine.pool_size),
        "num_cpus": engine.num_cpus,
        "num_gpus": 1 if use_gpu else 0,
        "accelerator_type": engine.accelerator_type,
        **restart_bound(engine),
    }


def restart_bound(engine: Any) -> dict[str, Any]:
    """``max_restarts`` for the engine's actors where the engine bounds them (an
    actor-only option: Ray refuses it on a task step)."""
    return {"max_restarts": engine.restarts} if hasattr(engine, "restarts") else {}
