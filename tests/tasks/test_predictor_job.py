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
