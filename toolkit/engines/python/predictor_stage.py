"""The user's own predictor class as the model stage (``engine.kind: python``).

``engine.model`` names the class: ``path/to/file.py:Class`` (a file in the user's
project, resolved from the current folder, which on a cluster is the job's
working dir) or ``package.module:Class``. The class is loaded on the driver and
sent to the workers pickled by value, so its file needs no install there.
One instance per engine worker (an actor pool, with the engine section's
resources), called on each batch of good rows. See :mod:`toolkit.spec.jobs.predictor_job`.
"""

from __future__ import annotations

import importlib
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from toolkit.engines.batch_stage import ModelStage, error_text, stage_resources, through_numpy
from toolkit.errors import SpecError
from toolkit.spec.row_contract import (
    MESSAGES_COLUMN,
    SAMPLING_PARAMS_COLUMN,
    object_column,
    plain,
)

if TYPE_CHECKING:
    import pyarrow as pa
    from ray.data import Dataset

    from toolkit.spec.engine_settings import EngineSettings


def load_predictor_class(reference: str) -> type:
    """The class ``reference`` (``file.py:Class`` or ``module:Class``) names.

    Raises:
        SpecError: no ``:``, a missing file or module, or no such class in it.
    """
    where, sep, name = reference.rpartition(":")
    if not sep or not where or not name:
        raise SpecError(f"engine.model: {reference!r} does not name a predictor class.",
                        hint="Write it as my_model.py:MyPredictor or my_package.models:MyPredictor.")
    if where.endswith(".py"):
        from toolkit.spec.jobs.catalog import import_job_file

        path = Path(where).expanduser()
        if not path.is_file():
            raise SpecError(f"engine.model: predictor file {where} does not exist "
                            f"(looked in {Path.cwd()}).",
                            hint="Paths are relative to the folder you run from.")
        module = import_job_file(path)
    else:
        try:
            module = importlib.import_module(where)
        except ImportError as exc:
            raise SpecError(f"engine.model: can't import {where}: {exc}") from None
    predictor = getattr(module, name, None)
    # Its own __call__: every class inherits a callable one (type.__call__, which
    # constructs), so callable() would pass any importable class. The spec was checked
    # before anything was imported (toolkit.spec.jobs.user_classes); this is the last guard.
    if not isinstance(predictor, type) or "__call__" not in vars(predictor):
        raise SpecError(f"engine.model: {where} has no class {name!r} with __call__(batch).")
    return predictor


class PredictorStage(ModelStage):
    """``inputs`` (the row's input columns) -> ``outputs`` (what the predictor returned).

    Called with Arrow blocks: the good rows' input columns go to the predictor as
    numpy arrays in one call, its answers come back as the ``outputs`` struct, and no
    row goes through Python on the way. When that call fails, or its answers are not
    one value per row, the block goes the way of every model stage
    (:func:`~toolkit.engines.batch_stage.run_model_on_batch`): retried row by row, so
    one bad row is one error row.
    """

    input_columns = ("inputs",)
    output_columns = ("outputs",)

    def __init__(self, predictor_class: type, init_kwargs: dict[str, Any],
                 output_names: list[str]) -> None:
        self.predictor = predictor_class(**init_kwargs)
        self.output_names = output_names

    def __call__(self, batch: "pa.Table") -> "pa.Table":  # type: ignore[override]
        import pyarrow as pa
        import pyarrow.compute as pc

        good = pc.invert(pc.is_valid(error_text(batch)))
        chosen = pc.indices_nonzero(good)
        if len(chosen) == 0:  # error rows only: the model is not called
            return through_numpy(batch, super().__call__)
        inputs = batch.column("inputs").take(chosen).combine_chunks()
        try:
            produced = self.predictor({
                name: _as_numpy(inputs.field(name)) for name in inputs.type.names})
            answers = [_checked(produced, name, len(chosen)) for name in self.output_names]
        except Exception:  # noqa: BLE001 - row by row says which row and why
            return through_numpy(batch, super().__call__)
        outputs = pa.StructArray.from_arrays(answers, names=self.output_names)
        if len(chosen) < batch.num_rows:  # error rows get a null answer
            where = pc.subtract(pc.cumulative_sum(pc.cast(good, pa.int64())), 1)
            outputs = outputs.take(pc.if_else(good, where, pa.scalar(None, pa.int64())))
        kept = [name for name in batch.column_names
                if name not in (*self.input_columns, MESSAGES_COLUMN, SAMPLING_PARAMS_COLUMN)]
        return batch.select(kept).append_column("outputs", outputs)

    def predict(self, inputs: list[tuple[Any, ...]]) -> list[dict[str, Any]]:
        rows = [row for (row,) in inputs]
        batch = {c: object_column([row[c] for row in rows]) for c in rows[0]}
        batch = {c: np.asarray(v.tolist()) if all(np.isscalar(x) for x in v) else v
                 for c, v in batch.items()}
        produced = self.predictor(batch)
        for name in self.output_names:
            if name not in produced:
                raise ValueError(f"the predictor returned no column {name!r}")
            if len(produced[name]) != len(rows):
                raise ValueError(f"the predictor returned {len(produced[name])} values of "
                                 f"{name!r} for {len(rows)} rows")
        return [{"outputs": {n: plain(produced[n][i]) for n in self.output_names}}
                for i in range(len(rows))]


def _as_numpy(values: "pa.Array") -> np.ndarray:
    """A column as :meth:`PredictorStage.predict` hands it over: the numpy array
    numpy makes of its Python values (strings as numpy strings), an object array
    where a value is not a scalar."""
    listed = values.to_pylist()
    return np.asarray(listed) if all(np.isscalar(x) for x in listed) else object_column(listed)


def _checked(produced: Any, name: str, rows: int) -> "pa.Array":
    import pyarrow as pa

    if name not in produced:
        raise ValueError(f"the predictor returned no column {name!r}")
    values = produced[name]
    if len(values) != rows:
        raise ValueError(f"the predictor returned {len(values)} values of {name!r} for {rows} rows")
    return pa.array(values)


def apply_python_stage(ds: "Dataset", engine: "EngineSettings", options: Any) -> "Dataset":
    import sys

    from ray import cloudpickle

    from toolkit.spec.jobs.catalog import USER_MODULE_PREFIX

    predictor = load_predictor_class(engine.model)
    module = sys.modules.get(predictor.__module__)
    if module is not None and module.__name__.startswith(USER_MODULE_PREFIX):
        cloudpickle.register_pickle_by_value(module)
    return ds.map_batches(
        PredictorStage,
        fn_constructor_kwargs={"predictor_class": predictor,
                               "init_kwargs": dict(options.init_kwargs),
                               "output_names": list(options.output)},
        **{**stage_resources(engine), "batch_format": "pyarrow"},
    )
