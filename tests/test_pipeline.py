"""The shared pipeline on a real local Ray, with generated customers and the tiny model."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pyarrow.compute as pc
import pyarrow.csv as pacsv
import pyarrow.parquet as pq
import pytest

from toolkit.errors import InputDataError, SpecError
from toolkit.run.driver import run_pipeline
from toolkit.samples.customers import CUSTOMER_COLUMNS, write_customers_csv
from toolkit.samples.provider import SAMPLES
from toolkit.spec.jobs.catalog import load_job
from toolkit.spec.loading import load_job_spec

JOB = load_job("text-industry")


@pytest.fixture(scope="module")
def customers_csv(tmp_path_factory) -> Path:
    return write_customers_csv(tmp_path_factory.mktemp("data") / "customers.csv", rows=300, seed=7)


def smoke_spec(**overrides):
    return load_job_spec(JOB, smoke=True, overrides=overrides)


def test_csv_rows_come_back_with_their_columns_intact(local_ray, customers_csv, tmp_path):
    spec = smoke_spec(**{"data.input": str(customers_csv), "data.rows": "200",
                         "data.output": str(tmp_path / "out"), "data.partitions": "4"})
    summary = run_pipeline(JOB, spec, samples=SAMPLES)

    written = pq.read_table(tmp_path / "out")
    written = written.take(pc.sort_indices(pc.cast(written["Index"], "int64")))
    # CSV has no types: every column comes back as the text that was in the file.
    source = pacsv.read_csv(
        customers_csv,
        convert_options=pacsv.ConvertOptions(column_types=dict.fromkeys(CUSTOMER_COLUMNS, "string")),
    ).slice(0, 200)
    assert written.num_rows == 200
    assert written.column_names == [*source.column_names, "inferred_industry",
                                    "inferred_industry_confidence", "finish_reason",
                                    "failed_checks", "num_input_tokens", "num_generated_tokens",
                                    "error"]
    for column in source.column_names:
        assert written[column].to_pylist() == source[column].to_pylist(), column
    assert set(written["inferred_industry"].to_pylist()) <= set(spec.output.choice)
    assert written["error"].null_count == 200
    assert (summary.rows_in, summary.rows_written, summary.error_rows) == (200, 200, 0)
    saved = json.loads((tmp_path / "out" / "_summary.json").read_text())
    assert saved["rows_written"] == 200 and saved["smoke"] is True


def test_blank_companies_are_error_rows_not_crashes(local_ray, tmp_path):
    csv = tmp_path / "blank.csv"
    csv.write_text('Index,Company\n1,Acme Corp\n2,""\n3,"Vega, Gibson and Rowland"\n')
    spec = smoke_spec(**{"data.input": str(csv), "data.output": str(tmp_path / "out")})
    summary = run_pipeline(JOB, spec, samples=SAMPLES)

    rows = {r["Index"]: r for r in pq.read_table(tmp_path / "out").to_pylist()}
    assert rows["2"]["error"] == "preprocess: column 'Company' is empty"
    assert rows["2"]["inferred_industry"] is None
    assert rows["1"]["error"] is None and rows["3"]["error"] is None
    assert (summary.rows_in, summary.rows_ok, summary.error_rows) == (3, 2, 1)


def test_a_missing_column_is_reported_before_any_model_loads(local_ray, tmp_path):
    csv = tmp_path / "no_company.csv"
    csv.write_text("Index,Compny,City\n1,Acme,Paris\n")
    # The model does not exist: reaching the engine would fail differently.
    spec = smoke_spec(**{"data.input": str(csv), "data.output": str(tmp_path / "out"),
                         "engine.model": "no-such-org/no-such-model"})
    with pytest.raises(InputDataError) as excinfo:
        run_pipeline(JOB, spec, samples=SAMPLES)
    message = excinfo.value.format_message()
    assert f"data.input: {csv} has no column 'Company'." in message
    assert "Available columns: Index, Compny, City." in message
    assert "did you mean 'Compny'?" in message


def test_non_utf8_csv_is_named_with_the_byte(local_ray, tmp_path):
    latin = tmp_path / "latin1.csv"
    latin.write_bytes("Index,Company\n1,Société Générale\n".encode("latin-1"))
    with pytest.raises(InputDataError, match=r"latin1.csv is not UTF-8 text \(byte 20 is 0xe9\)"):
        run_pipeline(JOB, smoke_spec(**{"data.input": str(latin),
                                        "data.output": str(tmp_path / "out")}), samples=SAMPLES)


def test_missing_and_empty_inputs_are_named(local_ray, tmp_path):
    with pytest.raises(InputDataError, match=r"data.input: .*nope.csv does not exist"):
        run_pipeline(JOB, smoke_spec(**{"data.input": str(tmp_path / "nope.csv"),
                                        "data.output": str(tmp_path / "o1")}), samples=SAMPLES)
    empty = tmp_path / "empty.csv"
    empty.write_text("")
    with pytest.raises(InputDataError, match=r"empty.csv is empty \(0 bytes\)"):
        run_pipeline(JOB, smoke_spec(**{"data.input": str(empty),
                                        "data.output": str(tmp_path / "o2")}), samples=SAMPLES)


def test_a_finished_run_is_not_redone_and_another_spec_is_refused(local_ray, tmp_path):
    spec = smoke_spec(**{"data.rows": "20", "data.output": str(tmp_path / "out")})
    first = run_pipeline(JOB, spec, samples=SAMPLES)
    again = run_pipeline(JOB, spec, samples=SAMPLES)
    assert again.rows_this_run == 0 and again.rows_written == first.rows_written == 20
    assert again.notes[0].startswith("Already complete")

    other = smoke_spec(**{"data.rows": "30", "data.output": str(tmp_path / "out")})
    with pytest.raises(SpecError, match=r"results of a run with a different spec \(changed: data.rows\)"):
        run_pipeline(JOB, other, samples=SAMPLES)
    longer = smoke_spec(**{"data.rows": "20", "data.output": str(tmp_path / "out")},
).model_copy(deep=True)
    longer.engine.engine_kwargs["max_model_len"] = 512
    with pytest.raises(SpecError, match=r"changed: engine.engine_kwargs.max_model_len"):
        run_pipeline(JOB, longer, samples=SAMPLES)  # never "Already complete"
    smaller_batches = smoke_spec(**{"data.rows": "20", "data.output": str(tmp_path / "out"),
                                    "engine.batch_size": "4"})
    assert run_pipeline(JOB, smaller_batches, samples=SAMPLES).notes[0].startswith(
        "Already complete")
    assert run_pipeline(JOB, other, overwrite=True, samples=SAMPLES).rows_written == 30


def test_date_reformat_checks_answers_and_reports_accuracy(local_ray, tmp_path):
    job = load_job("date-reformat")
    csv = tmp_path / "dates.csv"
    csv.write_text("Index,Subscription Date\n1,2021-03-04\n2,not a date\n3,2020-12-31\n")
    spec = load_job_spec(job, smoke=True, overrides={"data.input": str(csv),
                                                     "data.output": str(tmp_path / "out")})
    summary = run_pipeline(job, spec, samples=SAMPLES)

    rows = {r["Index"]: r for r in pq.read_table(tmp_path / "out").to_pylist()}
    assert rows["2"]["error"].startswith("preprocess: column 'Subscription Date': 'not a date'")
    assert rows["1"]["reference"] == "03-04-2021" and rows["3"]["reference"] == "12-31-2020"
    assert all(re.fullmatch(r"\d{2}-\d{2}-\d{4}", rows[i]["resp"]) for i in ("1", "3"))
    assert (summary.rows_in, summary.rows_ok, summary.error_rows) == (3, 2, 1)
    matching = sum(bool(r["matches_reference"]) for r in rows.values())
    assert summary.figures == {"accuracy": round(matching / 3, 4), "matching_rows": matching}


def test_vlm_caption_writes_one_row_per_image_without_the_bytes(local_ray, tmp_path):
    from toolkit.samples.image_files import write_sample_images

    job = load_job("vlm-caption")
    images = write_sample_images(tmp_path / "images", count=12, corrupt=3, seed=1)
    spec = load_job_spec(job, smoke=True, overrides={"data.input": str(tmp_path / "images"),
                                                     "data.output": str(tmp_path / "out")})
    summary = run_pipeline(job, spec, samples=SAMPLES)

    table = pq.read_table(tmp_path / "out")
    assert table.column_names == ["path", "generated_caption", "finish_reason", "failed_checks",
                                  "num_input_tokens", "num_generated_tokens", "error"]
    assert sorted(Path(p).name for p in table["path"].to_pylist()) == sorted(p.name for p in images)
    failed = [r for r in table.to_pylist() if r["error"]]
    assert len(failed) == 3 and all(r["generated_caption"] is None for r in failed)
    assert (summary.rows_in, summary.error_rows) == (12, 3)
    # The random model's captions may run to max_tokens: ok, or failed a check.
    assert summary.rows_ok + (summary.check_failed_rows or 0) == 9
    assert summary.figures == {"undecodable_images": 3}
