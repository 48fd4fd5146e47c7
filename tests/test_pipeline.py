"""The shared pipeline on a real local Ray, with generated customers and the tiny model."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow.csv as pacsv
import pyarrow.parquet as pq
import pytest

from toolkit.errors import InputDataError, SpecError
from toolkit.job_definition import load_job
from toolkit.pipeline import run_pipeline
from toolkit.samples.customers import write_customers_csv
from toolkit.spec_loading import load_job_spec

JOB = load_job("text-industry")


@pytest.fixture(scope="module")
def customers_csv(tmp_path_factory) -> Path:
    return write_customers_csv(tmp_path_factory.mktemp("data") / "customers.csv", rows=300, seed=7)


def smoke_spec(**overrides):
    return load_job_spec(JOB, smoke=True, overrides=overrides)


def test_csv_rows_come_back_with_their_columns_intact(local_ray, customers_csv, tmp_path):
    spec = smoke_spec(**{"data.input": str(customers_csv), "data.rows": "200",
                         "data.output": str(tmp_path / "out"), "data.partitions": "4"})
    summary = run_pipeline(JOB, spec)

    written = pq.read_table(tmp_path / "out").sort_by("Index")
    source = pacsv.read_csv(customers_csv).slice(0, 200)
    assert written.num_rows == 200
    assert written.column_names == [*source.column_names, "inferred_industry", "error"]
    for column in source.column_names:
        assert written[column].to_pylist() == source[column].to_pylist(), column
    assert set(written["inferred_industry"].to_pylist()) <= set(spec.options.choices)
    assert written["error"].null_count == 200
    assert (summary.rows_in, summary.rows_written, summary.error_rows) == (200, 200, 0)
    saved = json.loads((tmp_path / "out" / "_summary.json").read_text())
    assert saved["rows_written"] == 200 and saved["smoke"] is True


def test_blank_companies_are_error_rows_not_crashes(local_ray, tmp_path):
    csv = tmp_path / "blank.csv"
    csv.write_text('Index,Company\n1,Acme Corp\n2,""\n3,"Vega, Gibson and Rowland"\n')
    spec = smoke_spec(**{"data.input": str(csv), "data.output": str(tmp_path / "out")})
    summary = run_pipeline(JOB, spec)

    rows = {r["Index"]: r for r in pq.read_table(tmp_path / "out").to_pylist()}
    assert rows[2]["error"] == "preprocess: column 'Company' is empty"
    assert rows[2]["inferred_industry"] is None
    assert rows[1]["error"] is None and rows[3]["error"] is None
    assert (summary.rows_in, summary.rows_ok, summary.error_rows) == (3, 2, 1)


def test_a_missing_column_is_reported_before_any_model_loads(local_ray, tmp_path):
    csv = tmp_path / "no_company.csv"
    csv.write_text("Index,Compny,City\n1,Acme,Paris\n")
    # The model does not exist: reaching the engine would fail differently.
    spec = smoke_spec(**{"data.input": str(csv), "data.output": str(tmp_path / "out"),
                         "engine.model": "no-such-org/no-such-model"})
    with pytest.raises(InputDataError) as excinfo:
        run_pipeline(JOB, spec)
    message = excinfo.value.format_message()
    assert f"data.input: {csv} has no column 'Company'." in message
    assert "Available columns: Index, Compny, City." in message
    assert "did you mean 'Compny'?" in message


def test_missing_and_empty_inputs_are_named(local_ray, tmp_path):
    with pytest.raises(InputDataError, match=r"data.input: .*nope.csv does not exist"):
        run_pipeline(JOB, smoke_spec(**{"data.input": str(tmp_path / "nope.csv"),
                                        "data.output": str(tmp_path / "o1")}))
    empty = tmp_path / "empty.csv"
    empty.write_text("")
    with pytest.raises(InputDataError, match=r"empty.csv is empty \(0 bytes\)"):
        run_pipeline(JOB, smoke_spec(**{"data.input": str(empty),
                                        "data.output": str(tmp_path / "o2")}))


def test_earlier_results_are_kept_unless_overwrite(local_ray, tmp_path):
    spec = smoke_spec(**{"data.rows": "20", "data.output": str(tmp_path / "out")})
    run_pipeline(JOB, spec)
    with pytest.raises(SpecError, match="already holds 1 result file"):
        run_pipeline(JOB, spec)
    assert run_pipeline(JOB, spec, overwrite=True).rows_written == 20
