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

from toolkit.engines.model_stage import ModelStage, stage_resources
from toolkit.errors import SpecError
from toolkit.spec.row_contract import object_column, plain

if TYPE_CHECKING:
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
    """``inputs`` (the row's input columns) -> ``outputs`` (what the predictor returned)."""

    input_columns = ("inputs",)
    output_columns = ("outputs",)

    def __init__(self, predictor_class: type, init_kwargs: dict[str, Any],
                 output_names: list[str]) -> None:
        self.predictor = predictor_class(**init_kwargs)
        self.output_names = output_names

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
        **stage_resources(engine),
    )
