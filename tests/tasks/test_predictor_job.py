"""Bring your own model: a YAML job naming the user's predictor class (`file.py:Class`)
in their own folder runs like any job: one row out per row in, typed columns, error
rows, a class constructed once per engine worker."""

from __future__ import annotations

import textwrap

import pyarrow as pa
import pyarrow.parquet as pq
from click.testing import CliRunner

from toolkit.cli.main import main

SCORER = '''
import os

import numpy as np


class LengthScorer:
    """The seeds' Predictor pattern: load once in __init__, predict per batch."""

    def __init__(self, threshold: int) -> None:
        self.threshold = threshold
        self.pid = os.getpid()

    def __call__(self, batch):
        lengths = np.array([len(text) for text in batch["review"]])
        if any("explode" in text for text in batch["review"]):
            raise ValueError("this model can't read the word 'explode'")
        return {"long": lengths > self.threshold, "length": lengths.astype(float),
                "worker": [self.pid] * len(lengths)}
'''

JOB = '''
job: review-length
description: Score reviews with my own class.
predictor: scorer.py:LengthScorer
options:
  input_columns: [review]
  output: {long: bool, length: double, worker: int64}
  init_kwargs: {threshold: 12}
data:
  input: reviews.csv
  id_column: review_id
engine:
  batch_size: 4
  concurrency: 1
  accelerator_type: none
'''


def test_a_users_predictor_class_runs_as_a_yaml_job(local_ray, tmp_path, monkeypatch):
    project = tmp_path / "project"
    project.mkdir()
    (project / "scorer.py").write_text(SCORER)
    (project / "review-length.yaml").write_text(textwrap.dedent(JOB))
    rows = ["Great kettle, works.", "Bad.", "", "Please explode", "Fine value for money."]
    (project / "reviews.csv").write_text(
        "review_id,review\n" + "".join(f'{i},"{r}"\n' for i, r in enumerate(rows, 1)))
    monkeypatch.chdir(project)

    listed = CliRunner().invoke(main, ["jobs"])
    assert "./review-length.yaml" in listed.output
    # (the test's shared Ray runs elsewhere, so the input is named absolutely)
    result = CliRunner().invoke(main, ["run", "review-length", "--input",
                                       str(project / "reviews.csv"),
                                       "--output", str(tmp_path / "out")])
    print(result.output)
    assert result.exit_code == 0
    table = pq.read_table(tmp_path / "out")
    assert table.schema.field("long").type == pa.bool_()
    assert table.schema.field("length").type == pa.float64()
    out = {r["review_id"]: r for r in table.to_pylist()}
    assert len(out) == 5
    assert (out["1"]["long"], out["1"]["length"], out["1"]["error"]) == (True, 20.0, None)
    assert (out["2"]["long"], out["2"]["error"]) == (False, None)
    assert out["3"]["error"] == "preprocess: column 'review' is missing"
    assert out["4"]["error"] == ("engine error: ValueError: this model can't read the word "
                                 "'explode'")
    assert out["5"]["long"] is True
    assert len({r["worker"] for r in out.values() if r["worker"]}) == 1  # one instance
    assert "rows written:  5 (3 ok, 2 with an error)" in result.output


def test_a_missing_predictor_class_is_one_clear_error(local_ray, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "scorer.py").write_text("class Other:\n    pass\n")
    (tmp_path / "job.yaml").write_text(textwrap.dedent(JOB))
    (tmp_path / "reviews.csv").write_text("review_id,review\n1,Fine\n")
    result = CliRunner().invoke(main, ["run", "./job.yaml", "--input",
                                       str(tmp_path / "reviews.csv"),
                                       "--output", str(tmp_path / "out")])
    assert result.exit_code == 2, result.output
    assert "engine.model: scorer.py has no class 'LengthScorer'" in result.output
    assert "Traceback" not in result.output


# -- the same rows, a block at a time ---------------------------------------------------


class Lengths:
    """A predictor whose answers have their columns' types, but for ``as_text``."""

    def __init__(self, as_text: bool = False) -> None:
        self.as_text = as_text

    def __call__(self, batch):
        import numpy as np

        if any("explode" in text for text in batch["review"]):
            raise ValueError("this model can't read the word 'explode'")
        lengths = np.array([len(text) for text in batch["review"]])
        return {"length": lengths.astype(str) if self.as_text else lengths.astype(float)}


def finished_both_ways(reviews: list[str | None], as_text: bool = False):
    """A block through the job's batch hooks and through its row hooks: the output
    rows of each, as the pipeline writes them."""
    from toolkit.engines.python.predictor_stage import PredictorStage
    from toolkit.run.row_steps import prepare_batch, prepare_table
    from toolkit.run.row_steps import finish_batch, output_schema
    from toolkit.run.task_rows import prepare_task_row
    from toolkit.spec.jobs import predictor_job as job

    options = job.PredictorOptions(input_columns=["review"], output={"length": "double"})
    table = pa.table({"review_id": [str(i) for i in range(len(reviews))],
                      "review": pa.array(reviews, pa.string())})
    schema = output_schema(table.schema, {"length": "double"})
    stage = PredictorStage(Lengths, {"as_text": as_text}, ["length"])
    by_batch = prepare_table(table, job.preprocess_batch, options, ("inputs",))
    by_row = prepare_batch(table, prepare_task_row, preprocess=job.preprocess, options=options,
                           input_columns=("inputs",))
    finish = {"postprocess": job.postprocess, "options": options, "schema": schema,
              "result_columns": ["length"], "engine_output": "outputs"}
    return (finish_batch(stage(by_batch), postprocess_batch=job.postprocess_batch,
                         **finish).to_pylist(),
            finish_batch(stage(by_row), **finish).to_pylist())


def test_a_predictor_job_writes_the_same_rows_a_block_at_a_time():
    by_batch, by_row = finished_both_ways(["Great kettle.", "", None, "  ", "Bad."])
    assert by_batch == by_row
    assert [(r["length"], r["error"]) for r in by_batch] == [
        (13.0, None), (None, "preprocess: column 'review' is missing"),
        (None, "preprocess: column 'review' is missing"),
        (None, "preprocess: column 'review' is missing"), (4.0, None)]


def test_a_failing_block_is_retried_row_by_row_and_one_row_fails():
    by_batch, by_row = finished_both_ways(["Fine.", "Please explode", ""])
    assert by_batch == by_row
    assert [r["error"] for r in by_batch] == [
        None, "engine error: ValueError: this model can't read the word 'explode'",
        "preprocess: column 'review' is missing"]


def test_answers_of_another_type_are_cast_row_by_row_as_before():
    by_batch, by_row = finished_both_ways(["Fine.", "Twelve chars"], as_text=True)
    assert by_batch == by_row
    assert [r["length"] for r in by_batch] == [5.0, 12.0]


def test_a_block_of_error_rows_never_calls_the_model():
    by_batch, by_row = finished_both_ways(["", None])
    assert by_batch == by_row
    assert {r["error"] for r in by_batch} == {"preprocess: column 'review' is missing"}
