"""tabular-predict a block at a time: the same rows as through Python rows.

Around a model, the job's batch hooks and the stage's one call on a numpy matrix do in
Arrow what its row hooks and the per-row path did; a block Arrow can't take as it is
(a value that isn't a number, a model that fails on one row, predictions that print
otherwise in Python) goes row by row, so every row reads as it did.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa

from toolkit.engines.batch_stage import through_numpy
from toolkit.engines.sklearn.tabular_stage import predict_rows, predict_tabular
from toolkit.run.row_steps import prepare_batch, prepare_table
from toolkit.run.row_steps import finish_batch, output_schema
from toolkit.run.task_rows import prepare_task_row
from toolkit.spec.jobs.catalog import load_job

JOB = load_job("tabular-predict")
STAGE = JOB.main_stage
OPTIONS = JOB.spec_model.model_fields["options"].annotation(feature_columns=["age", "income"])


class Threshold:
    """A classifier on income (labels "rich"/"poor"), which can't take an age of 13."""

    def __init__(self, labels: Any = ("poor", "rich")) -> None:
        self.labels = np.asarray(labels)

    def predict(self, features: np.ndarray) -> np.ndarray:
        if (features[:, 0] == 13).any():
            raise ValueError("unlucky age")
        return self.labels[(features[:, 1] > 50_000).astype(int)]

    def predict_proba(self, features: np.ndarray) -> np.ndarray:
        rich = (features[:, 1] > 50_000).astype(float)
        return np.column_stack([1 - rich, rich])


def both_ways(columns: dict[str, pa.Array], model: Any = None,
              options: Any = OPTIONS) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """A block through the batch hooks and the stage's matrix, and through the row
    hooks and the per-row path: the output rows of each, as the pipeline writes them."""
    model = model or Threshold()
    table = pa.table({"account_id": [f"a-{i}" for i in range(len(columns["age"]))], **columns})
    results = {"prediction": options.prediction_type, "probabilities": "list<double>"}
    finish = {"postprocess": STAGE.postprocess, "options": options,
              "schema": output_schema(table.schema, results),
              "result_columns": list(results), "engine_output": "prediction"}
    by_batch = prepare_table(table, STAGE.preprocess_batch, options, ("features",))
    by_row = prepare_batch(table, prepare_task_row, preprocess=STAGE.preprocess, options=options,
                           input_columns=("features",))
    by_row = through_numpy(by_row, lambda numpy: predict_rows(numpy, model))
    return (finish_batch(predict_tabular(by_batch, model),
                         postprocess_batch=STAGE.postprocess_batch,
                         **finish).to_pylist(),
            finish_batch(by_row, **finish).to_pylist())


def test_the_same_rows_a_block_at_a_time():
    by_batch, by_row = both_ways({
        "age": pa.array([30, None, 41, 52, 60], pa.int64()),
        "income": pa.array([80_000.0, 20_000.0, float("nan"), 10_000.0, 60_000.0])})
    assert repr(by_batch) == repr(by_row)  # the input's NaN passes through: nan != nan
    assert [(r["prediction"], r["error"]) for r in by_batch] == [
        ("rich", None), (None, "preprocess: column 'age' is missing"),
        (None, "preprocess: column 'income' is missing"), ("poor", None), ("rich", None)]
    assert by_batch[0]["probabilities"] == [0.0, 1.0]


def test_numbers_written_as_text_and_a_blank_one():
    by_batch, by_row = both_ways({"age": pa.array(["30", " ", "41"]),
                                  "income": pa.array(["80000", "1", "2.5e4"])})
    assert by_batch == by_row
    assert [r["error"] for r in by_batch] == [None, "preprocess: column 'age' is missing", None]


def test_a_value_that_is_not_a_number_is_named_row_by_row():
    by_batch, by_row = both_ways({"age": pa.array(["30", "forty"]),
                                  "income": pa.array(["80000", "1"])})
    assert by_batch == by_row
    assert by_batch[1]["error"] == "preprocess: column 'age': 'forty' is not a number"


def test_a_row_the_model_fails_on_is_that_rows_error():
    by_batch, by_row = both_ways({"age": pa.array([30, 13, 41]),
                                  "income": pa.array([80_000, 80_000, 1])})
    assert by_batch == by_row
    assert [r["error"] for r in by_batch] == [
        None, "engine error: ValueError: unlucky age", None]


def test_predictions_python_prints_otherwise_are_cast_row_by_row_as_before():
    """Float labels into a string column: str(1.0) is '1.0', where Arrow writes '1'."""
    by_batch, by_row = both_ways({"age": pa.array([30, 41]), "income": pa.array([1, 90_000])},
                                 model=Threshold(labels=[0.0, 1.0]))
    assert by_batch == by_row
    assert [r["prediction"] for r in by_batch] == ["0.0", "1.0"]


def test_a_block_of_error_rows_never_calls_the_model():
    by_batch, by_row = both_ways({"age": pa.array([None, 13], pa.int64()),
                                  "income": pa.array([1.0, None])})
    assert repr(by_batch) == repr(by_row)  # both through numpy: a null income reads NaN
    assert all(r["error"].startswith("preprocess: column") for r in by_batch)
