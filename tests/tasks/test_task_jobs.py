"""The non-chat model stages as users run them: `toolkit run text-classify|embed|
tabular-predict|image-classify --smoke`, one row out per row in, typed result
columns, error rows for bad input, and what a render asks the cluster for."""

from __future__ import annotations


import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import yaml
from click.testing import CliRunner

from toolkit.cli.main import main
from toolkit.run.output.fingerprint import results_fingerprint
from toolkit.spec.jobs.catalog import load_job
from toolkit.spec.loading import load_job_spec

# job -> (id column, rows, {result column: Arrow type}, error rows expected in the sample)
JOBS = {
    "text-classify": ("review_id", 50, {"label": pa.string(), "score": pa.float64()}, 2),
    "embed": ("review_id", 50, {"embedding": pa.list_(pa.float32())}, 2),
    "tabular-predict": ("account_id", 100, {"prediction": pa.string(),
                                            "probabilities": pa.list_(pa.float64())}, 2),
    "image-classify": ("path", 25, {"label": pa.string(), "score": pa.float64()}, 1),
}


def run(*args: str):
    result = CliRunner().invoke(main, ["run", *args])
    print(result.output)  # shown when a test fails
    return result


@pytest.mark.parametrize("job", list(JOBS))
def test_smoke_run_writes_one_typed_row_per_input_row(job, local_ray, tmp_path):
    id_column, rows, columns, bad = JOBS[job]
    result = run(job, "--smoke", "--rows", str(rows), "--output", str(tmp_path / "out"))
    assert result.exit_code == 0
    table = pq.read_table(tmp_path / "out")
    assert table.num_rows == rows and len(set(table[id_column].to_pylist())) == rows
    for name, arrow_type in columns.items():
        assert table.schema.field(name).type == arrow_type
    failed = table.filter(pa.compute.is_valid(table["error"]))
    ok = table.filter(pa.compute.is_null(table["error"]))
    assert failed.num_rows == bad
    assert all(v is None for name in columns for v in failed[name].to_pylist())
    first = list(columns)[0]
    assert all(v is not None for v in ok[first].to_pylist())
    assert f"rows written:  {rows} ({rows - bad} ok, {bad} with an error)" in result.output
    if job == "embed":  # the encoder counts what it read (an embeddings API's usage)
        assert ok["num_input_tokens"].to_pylist()[0] > 0 and " in, 0 out" in result.output
    else:
        assert "tokens:" not in result.output  # these models count no tokens
    if job in ("text-classify", "embed"):  # review 13 is ~800 tokens: truncated, not failed
        assert ok.filter(pa.compute.equal(ok["review_id"], 13)).num_rows == 1
    if job == "embed":
        assert {len(v) for v in ok["embedding"].to_pylist()} == {64}
        assert "embedding_dimensions: 64" in result.output
    if job == "tabular-predict":
        assert set(ok["prediction"].to_pylist()) <= {"churn", "stay"}
        assert failed["error"].to_pylist()[0] == "preprocess: column 'income' is missing"
    if job == "image-classify":
        assert "image" not in table.column_names and "bytes" not in table.column_names


def test_a_non_numeric_or_missing_feature_is_an_error_row_naming_the_column(local_ray, tmp_path):
    from toolkit.samples.tiny_task_models import tiny_task_model_path

    csv = tmp_path / "accounts.csv"
    csv.write_text("account_id,age,income,tenure_months,visits\n"
                   "1,40,50000,12,3\n2,forty,50000,12,3\n3,33,,4,1\n")
    result = run("tabular-predict", "--input", str(csv), "--model",
                 str(tiny_task_model_path("tiny-tabular") / "model.joblib"),
                 "--output", str(tmp_path / "out"), "--set", "engine.concurrency=1")
    assert result.exit_code == 0
    rows = {r["account_id"]: r for r in pq.read_table(tmp_path / "out").to_pylist()}
    assert rows["1"]["error"] is None and rows["1"]["prediction"] in ("churn", "stay")
    assert rows["2"]["error"] == "preprocess: column 'age': 'forty' is not a number"
    assert rows["3"]["error"] == "preprocess: column 'income' is missing"


def test_a_missing_or_untrusted_model_file_is_one_clear_error(local_ray, tmp_path):
    (tmp_path / "model.joblib").write_text("not a pickle")
    for model, expected in ((tmp_path / "nope.joblib", "nope.joblib does not exist"),
                            (tmp_path / "model.joblib", "does not load with joblib")):
        result = run("tabular-predict", "--smoke", "--rows", "10", "--model", str(model),
                     "--output", str(tmp_path / model.stem))
        assert result.exit_code == 2
        assert "Error: engine.model: " in result.output and expected in result.output
        assert "only use files you trust" in result.output or "joblib.dump" in result.output
        assert "Traceback" not in result.output


@pytest.mark.parametrize("job, worker", [
    ("text-classify", "g6.2xlarge"), ("embed", "g6.2xlarge"),
    ("image-classify", "g6.2xlarge"), ("tabular-predict", "m5.2xlarge"),
])
def test_render_asks_for_the_stage_accelerator(job, worker, tmp_path):
    result = CliRunner().invoke(main, ["render", job, "-o", str(tmp_path / "job.yaml")])
    assert result.exit_code == 0, result.output
    rendered = yaml.safe_load((tmp_path / "job.yaml").read_text())
    assert rendered["compute_config"]["worker_nodes"][0]["instance_type"] == worker


def test_task_and_engine_pairs_no_engine_implements_are_refused_by_name():
    job = load_job("tabular-predict")
    result = CliRunner().invoke(main, ["show", "tabular-predict", "--engine", "vllm"])
    assert result.exit_code == 2
    assert "engine: engine.task: tabular runs on engine.kind sklearn, not vllm" in result.output
    result = CliRunner().invoke(main, ["show", "image-classify", "--engine", "vllm"])
    assert "engine.task: image-classify runs on engine.kind transformers, not vllm" in result.output
    result = CliRunner().invoke(main, ["show", "text-industry", "--engine", "sklearn"])
    assert "not sklearn (which runs task tabular only)" in result.output
    assert load_job_spec(job).engine.task == "tabular"


def test_chat_specs_keep_their_dump_and_fingerprint():
    """engine.task is left out while it is 'generate', so specs written before it
    existed keep their hash (resume fingerprints, rendered job names)."""
    spec = load_job_spec(load_job("text-industry"))
    assert "task" not in spec.model_dump()["engine"]
    with_task = spec.model_copy(update={"engine": spec.engine.model_copy(
        update={"task": "generate"})})
    assert results_fingerprint(with_task) == results_fingerprint(spec)


def test_row_functions_without_ray():
    code = {name: load_job(name) for name in JOBS}
    classify = code["text-classify"].main_stage
    options = load_job_spec(code["text-classify"]).options
    assert classify.preprocess({"review": "Great"}, options) == {"prompt": "Great"}
    with pytest.raises(ValueError, match="column 'review' is empty"):
        classify.preprocess({"review": "  "}, options)
    image = code["image-classify"].main_stage
    with pytest.raises(ValueError, match="column 'jpg': not a recognised image format"):
        image.preprocess({"jpg": b"hello"}, load_job_spec(code["image-classify"]).options)

