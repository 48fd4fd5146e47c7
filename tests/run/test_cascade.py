"""Small model first, as a user meets it: `toolkit run JOB --cascade-model SMALL
--escalate-below T` answers every row with SMALL, sends on to the big model only the
rows it is unsure of, and says who answered each row; `toolkit retry` runs the cascade
again on the rows it redoes.

The runs go through the `toolkit` command in its own process on two tiny random-weight
models (sample:tiny-chat-small first, sample:tiny-chat after), reading the files they
write. Random weights give low, varied confidences, so the threshold is the median of
the small model's own confidences on these rows: both outcomes happen.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pytest
import yaml

from toolkit.cluster.price_table import instance_price
from toolkit.cluster.throughput_table import tokens_per_second_per_gpu
from toolkit.errors import SpecError
from toolkit.run.cascade_rows import (
    KEPT,
    REACHED,
    cascade_columns,
    route_first_answers,
    settle_cascade,
)
from toolkit.run.row_steps import output_schema
from toolkit.spec.jobs.catalog import load_job
from toolkit.spec.loading import load_job_spec

JOB = load_job("text-industry")
CHOICES = set(load_job_spec(JOB).output.choice)
SMALL, BIG = "sample:tiny-chat-small", "sample:tiny-chat"
ROWS = 40
BLANK = "5"  # a row no model can answer: rejected before the small one


def toolkit(*args: str, cwd: Path, timeout: float = 600) -> subprocess.CompletedProcess:
    return subprocess.run(["toolkit", *args], cwd=cwd, capture_output=True, text=True,
                          timeout=timeout, env={**os.environ, "RAY_ADDRESS": ""})


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A user's folder with rows.csv (one company left blank) and the small model's own
    answers to it, alone."""
    folder = tmp_path_factory.mktemp("cascade")
    made = toolkit("samples", "customers", "--rows", str(ROWS), "-o", "rows.csv", cwd=folder)
    assert made.returncode == 0, made.stderr
    rows = pd.read_csv(folder / "rows.csv", dtype=str)
    rows.loc[rows["Index"] == BLANK, "Company"] = ""
    rows.to_csv(folder / "rows.csv", index=False)
    alone = toolkit("run", "text-industry", "--smoke", "--input", "rows.csv", "--model", SMALL,
                    "--output", "out/small-alone", cwd=folder)
    assert alone.returncode == 0, alone.stdout + alone.stderr
    return folder


def small_alone(folder: Path) -> pd.DataFrame:
    return pd.read_parquet(folder / "out" / "small-alone").set_index("Index")


def middle_threshold(folder: Path) -> float:
    """The small model's median confidence: about half its rows are under it."""
    return float(small_alone(folder)["inferred_industry_confidence"].median())


def test_a_cascade_keeps_the_sure_rows_and_escalates_the_rest(folder):
    threshold = middle_threshold(folder)
    ran = toolkit("run", "text-industry", "--smoke", "--input", "rows.csv",
                  "--cascade-model", SMALL, "--escalate-below", str(threshold),
                  "--output", "out/cascade", cwd=folder)
    assert ran.returncode == 0, ran.stdout + ran.stderr
    rows = pd.read_parquet(folder / "out" / "cascade").set_index("Index")
    assert len(rows) == ROWS and rows.index.is_unique
    # The blank company is an error row, as without a cascade; no model ran it.
    assert rows["error"].notna().tolist() == (rows.index == BLANK).tolist()
    assert rows.loc[BLANK, "error"].startswith("preprocess: ")
    assert rows.loc[BLANK, ["answered_by", "inferred_industry_first"]].isna().all()
    rows = rows.drop(BLANK)
    assert set(rows["inferred_industry"]) <= CHOICES
    assert set(rows["answered_by"]) == {SMALL, BIG}

    alone = small_alone(folder).loc[rows.index]
    kept, escalated = rows[rows["answered_by"] == SMALL], rows[rows["answered_by"] == BIG]
    # A kept row is the small model's own answer, sure enough; nothing was overruled.
    assert (kept["inferred_industry_confidence"] >= threshold).all()
    assert (kept["inferred_industry"] == alone.loc[kept.index, "inferred_industry"]).all()
    assert kept["inferred_industry_first"].isna().all()
    assert kept["inferred_industry_first_confidence"].isna().all()
    # An escalated row keeps what the small model said, which was under the threshold.
    assert (escalated["inferred_industry_first"]
            == alone.loc[escalated.index, "inferred_industry"]).all()
    assert (escalated["inferred_industry_first_confidence"] < threshold).all()
    assert (alone["inferred_industry_confidence"] < threshold).sum() == len(escalated)

    summary = json.loads((folder / "out" / "cascade" / "_summary.json").read_text())
    assert summary["cascade"]["escalated"] == len(escalated)
    assert summary["cascade"]["answered_by"] == {SMALL: len(kept), BIG: len(escalated)}
    assert summary["cascade"]["escalation_rate"] == round(len(escalated) / (ROWS - 1), 4)
    assert summary["error_rows"] == 1
    assert f"cascade:       {len(escalated)} of {ROWS - 1} rows escalated" in ran.stdout
    assert f"answered by:   {SMALL} {len(kept)}, {BIG} {len(escalated)}" in ran.stdout
    # Each model's tokens: the small one read every row it answered, the escalated
    # ones too (kept on them as num_input_tokens_first), the big one only those.
    small_in = int(kept["num_input_tokens"].sum() + escalated["num_input_tokens_first"].sum())
    big_in = int(escalated["num_input_tokens"].sum())
    assert kept["num_input_tokens_first"].isna().all()
    assert escalated["num_input_tokens_first"].notna().all()
    assert summary["cascade"]["input_tokens"] == {SMALL: small_in, BIG: big_in}
    assert summary["input_tokens"] == small_in + big_in
    small_out = int(kept["num_generated_tokens"].sum()
                    + escalated["num_generated_tokens_first"].sum())
    assert summary["cascade"]["output_tokens"][SMALL] == small_out
    assert f"model tokens:  {SMALL} {small_in:,} in, {small_out:,} out; {BIG} {big_in:,} in" \
        in ran.stdout

    # The report shows who answered as a result column, with its counts.
    report = (folder / "out" / "cascade" / "_report.html").read_text()
    assert '<th class="out">answered_by</th>' in report and "<h3>answered_by</h3>" in report

    # A pilot's escalation rate is what plan reads for a full run.
    planned = toolkit("plan", "text-industry", "--smoke", "--rows", "1M", "--cascade-model",
                      SMALL, "--escalate-below", str(threshold), "--from-run", "out/cascade",
                      cwd=folder)
    assert planned.returncode == 0, planned.stdout + planned.stderr
    rate = summary["cascade"]["escalation_rate"]
    assert f"The pilot's cascade sent {rate:.1%} of its rows on to {BIG}" in planned.stdout
    # Tiny sample models have no size the throughput table prices: no figure, and why.
    assert f"Cascade against {BIG} alone: ? (cascade: the throughput table has no " \
        "tokens/s for sample:tiny-chat-small on CPUs" in planned.stdout

    # Real-sized models, each on its own GPU: the pilot's tokens per model, priced.
    big_model, small_model = "unsloth/Llama-3.1-8B-Instruct", "Qwen/Qwen2.5-0.5B-Instruct"
    priced = toolkit("plan", "text-industry", "--rows", "1M", "--model", big_model,
                     "--cascade-model", small_model, "--escalate-below", str(threshold),
                     "--set", "cascade.accelerator_type=T4", "--from-run", "out/cascade",
                     "--format", "json", cwd=folder)
    assert priced.returncode == 0, priced.stdout + priced.stderr
    compared = json.loads(priced.stdout)["cascade_comparison"]
    tokens = {model: summary["cascade"]["input_tokens"][model]
              + summary["cascade"]["output_tokens"][model] for model in (SMALL, BIG)}
    small_rate = tokens_per_second_per_gpu(small_model, "T4")[1]
    big_rate = tokens_per_second_per_gpu(big_model, "L4")[1]
    big_per_row = tokens[BIG] / len(escalated)
    alone_hours = 1_000_000 * big_per_row / big_rate / 3600
    cascade_hours = (1_000_000 * tokens[SMALL] / (ROWS - 1) / small_rate
                     + 1_000_000 * rate * big_per_row / big_rate) / 3600
    assert compared["big_model_alone"]["gpu_hours"] == pytest.approx(alone_hours, abs=1e-3)
    assert compared["cascade"]["gpu_hours"] == pytest.approx(cascade_hours, abs=1e-3)
    l4 = instance_price("g6.2xlarge")
    assert compared["big_model_alone"]["cost_usd"] == pytest.approx(
        alone_hours * l4.usd_per_hour / l4.gpus, abs=1e-3)

    # Known answers against a cascade pilot: the small model's answers are read back
    # from <column>_first on the escalated rows, and the big model's are scored too.
    pd.DataFrame({"Index": alone.index, "inferred_industry": alone["inferred_industry"]}
                 ).to_csv(folder / "known.csv", index=False)
    calibrated = toolkit("plan", "text-industry", "--smoke", "--cascade-model", SMALL,
                         "--escalate-below", str(threshold), "--from-run", "out/cascade",
                         "--calibrate", "known.csv", "--format", "json", cwd=folder)
    assert calibrated.returncode == 0, calibrated.stdout + calibrated.stderr
    calibration = json.loads(calibrated.stdout)["calibration"]
    assert calibration["small_model_right"] == ROWS - 1  # its own answers, every one
    at_pilot = next(t for t in calibration["thresholds"] if t["escalate_below"] == threshold)
    assert (at_pilot["escalated"], at_pilot["kept_right"]) == (len(escalated), len(kept))
    assert (calibration["big_model"], calibration["big_model_rows"]) == (BIG, len(escalated))
    assert calibration["big_model_right"] == int(
        (escalated["inferred_industry"] == alone.loc[escalated.index, "inferred_industry"]).sum())


def test_calibrate_shows_each_thresholds_escalations_and_the_kept_rows_right(folder):
    alone = small_alone(folder).drop(BLANK)
    # Known answers: the small model's own on even ids, something else on odd ones.
    even = alone.index.astype(int) % 2 == 0
    labels = pd.DataFrame({"Index": alone.index, "inferred_industry": [
        answer if keep else "Nothing of the kind"
        for answer, keep in zip(alone["inferred_industry"], even)]})
    labels.to_csv(folder / "labels.csv", index=False)
    planned = toolkit("plan", "text-industry", "--smoke", "--from-run", "out/small-alone",
                      "--calibrate", "labels.csv", "--format", "json", cwd=folder)
    assert planned.returncode == 0, planned.stdout + planned.stderr
    calibration = json.loads(planned.stdout)["calibration"]
    assert (calibration["labelled_rows"], calibration["small_model"]) == (ROWS - 1, SMALL)
    assert calibration["small_model_right"] == int(even.sum())
    confidence = alone["inferred_industry_confidence"]
    assert len(calibration["thresholds"]) >= 3
    for row in calibration["thresholds"]:
        kept = confidence >= row["escalate_below"]
        assert row["escalated"] == int((~kept).sum()) and row["kept"] == int(kept.sum())
        assert row["kept_right"] == int((kept & even).sum())
    assert calibration["big_model"] is None

    text = toolkit("plan", "text-industry", "--smoke", "--from-run", "out/small-alone",
                   "--calibrate", "labels.csv", cwd=folder)
    assert f"Calibration: {ROWS - 1} labelled rows of out/small-alone, inferred_industry " \
           "against labels.csv" in text.stdout
    assert f"{SMALL} alone: {int(even.sum())} of {ROWS - 1} right" in text.stdout


@pytest.mark.parametrize(("labels", "says"), [
    ("Index,industry\n1,Retail\n", "it needs the run's id column Index and the known "
                                    "answer in inferred_industry"),
    ("Index,inferred_industry\n999,Retail\n", "no Index of labels.csv is a row of"),
])
def test_calibrate_names_what_the_labels_file_lacks(folder, labels, says):
    (folder / "labels.csv").write_text(labels)
    planned = toolkit("plan", "text-industry", "--smoke", "--from-run", "out/small-alone",
                      "--calibrate", "labels.csv", cwd=folder)
    assert planned.returncode == SpecError.exit_code, planned.stderr
    assert says in planned.stderr and "Traceback" not in planned.stderr


def test_retry_runs_the_cascade_again_on_the_rows_it_redoes(folder):
    threshold = middle_threshold(folder)
    # One token is too few for any industry: both models' answers are cut off.
    failed = toolkit("run", "text-industry", "--smoke", "--input", "rows.csv",
                     "--cascade-model", SMALL, "--escalate-below", str(threshold),
                     "--set", "sampling.max_tokens=1", "--set", "stop_loss.failure_rate=null",
                     "--output", "out/retried", cwd=folder)
    assert failed.returncode == 0, failed.stdout + failed.stderr
    first = pd.read_parquet(folder / "out" / "retried").set_index("Index").drop(BLANK)
    assert first["error"].str.startswith("truncated").all()
    # The small model failed the check on every row, so the big one had them all.
    assert (first["answered_by"] == BIG).all()

    retried = toolkit("retry", "out/retried", "--set", "sampling.max_tokens=16", cwd=folder)
    assert retried.returncode == 0, retried.stdout + retried.stderr
    rows = pd.read_parquet(folder / "out" / "retried").set_index("Index")
    assert len(rows) == ROWS and rows.index.is_unique
    assert rows["error"].notna().tolist() == (rows.index == BLANK).tolist()
    rows = rows.drop(BLANK)
    assert set(rows["answered_by"]) == {SMALL, BIG}
    kept = rows[rows["answered_by"] == SMALL]
    assert (kept["inferred_industry_confidence"] >= threshold).all()
    summary = json.loads((folder / "out" / "retried" / "_summary.json").read_text())
    assert summary["cascade"]["escalated"] == int((rows["answered_by"] == BIG).sum())


# -- the rule between the stages, without Ray --------------------------------------

RESULTS = {"inferred_industry": "string", "inferred_industry_confidence": "double"}


def test_the_small_models_rows_are_kept_escalated_or_left_as_they_failed():
    finished = pa.table({
        "Index": ["sure", "unsure", "checked", "errored", "rejected"],
        "inferred_industry": ["Retail", "Finance", "Retail", None, None],
        "inferred_industry_confidence": [0.9, 0.3, 0.95, None, None],
        "finish_reason": ["stop", "stop", "length", "error", "error"],
        "failed_checks": [None, None, "truncated", None, None],
        "num_input_tokens": [10, 11, 12, None, None],
        "num_generated_tokens": [2, 2, 1, None, None],
        "error": [None, None, None, "engine error: boom", "preprocess: Company is blank"],
        REACHED: [True, True, True, True, False],
    })
    routed = route_first_answers(finished, RESULTS, escalate_below=0.8).to_pydict()
    assert routed["error"] == [KEPT, None, None, None, "preprocess: Company is blank"]
    assert routed["inferred_industry_first"] == ["Retail", "Finance", "Retail", None, None]
    assert "inferred_industry" not in routed

    # The big model answers the escalated rows; the kept one passed it marked.
    after_big = pa.table({
        **{k: v for k, v in routed.items() if k != "error"},
        "inferred_industry": [None, "Retail", "Healthcare", "Other", None],
        "inferred_industry_confidence": [None, 0.5, 0.6, 0.7, None],
        # Nulls come back from a NumPy engine as NaN.
        "inferred_industry_first_confidence": [0.9, 0.3, 0.95, float("nan"), float("nan")],
        "answered_by": [None] * 5,
        "finish_reason": ["error", "stop", "stop", "stop", "error"],
        "failed_checks": [None] * 5,
        "num_input_tokens": [None, 20, 21, 22, None],
        "num_generated_tokens": [None, 3, 3, 3, None],
        "error": routed["error"],
    })
    schema = output_schema(pa.schema([("Index", pa.string())]), {
        **RESULTS, **cascade_columns(RESULTS)}, checked=True)
    rows = settle_cascade(after_big, RESULTS, schema, "small", "big").to_pylist()
    assert [r["answered_by"] for r in rows] == ["small", "big", "big", "big", None]
    assert [r["inferred_industry"] for r in rows] == ["Retail", "Retail", "Healthcare",
                                                      "Other", None]
    assert rows[0]["inferred_industry_first"] is None and rows[0]["error"] is None
    assert rows[0]["num_input_tokens"] == 10 and rows[0]["finish_reason"] == "stop"
    assert rows[1]["inferred_industry_first"] == "Finance"
    assert rows[1]["inferred_industry_first_confidence"] == 0.3
    # An escalated row's tokens are the big model's; the small one's stay beside them.
    assert (rows[1]["num_input_tokens"], rows[1]["num_input_tokens_first"]) == (20, 11)
    assert (rows[2]["num_generated_tokens"], rows[2]["num_generated_tokens_first"]) == (3, 1)
    assert rows[0]["num_input_tokens_first"] is None and rows[4]["num_input_tokens_first"] is None
    assert rows[4]["error"] == "preprocess: Company is blank"
    assert rows[3]["inferred_industry_first_confidence"] is None


# -- the spec ---------------------------------------------------------------------


def test_cascade_flags_set_the_spec_and_the_small_model_follows_engine():
    spec = load_job_spec(JOB, smoke=True, overrides={
        "cascade.model": SMALL, "cascade.escalate_below": 0.7},
        sets=["cascade.batch_size=128"])
    small = spec.cascade_engine
    assert (small.model, small.kind, small.batch_size) == (SMALL, "transformers", 128)
    assert [field for field, _ in spec.model_stages] == ["cascade", "engine"]


def test_render_gives_a_small_model_on_another_gpu_its_own_worker_group(tmp_path):
    rendered = toolkit("render", "text-industry", "--rows", "1M", "--cascade-model",
                       "Qwen/Qwen2.5-0.5B-Instruct", "--escalate-below", "0.8",
                       "--set", "cascade.accelerator_type=T4", "-o", "job.yaml", cwd=tmp_path)
    assert rendered.returncode == 0, rendered.stderr
    compute = yaml.safe_load((tmp_path / "job.yaml").read_text())["compute_config"]
    # The big model's L4 group first, then the small model's T4 one; both autoscale.
    assert [(group["instance_type"], group["min_nodes"], group["max_nodes"])
            for group in compute["worker_nodes"]] == [("g6.2xlarge", 0, 10),
                                                      ("g4dn.2xlarge", 0, 10)]
    same_gpu = toolkit("render", "text-industry", "--cascade-model",
                       "Qwen/Qwen2.5-0.5B-Instruct", "-o", "same.yaml", cwd=tmp_path)
    assert same_gpu.returncode == 0, same_gpu.stderr
    groups = yaml.safe_load((tmp_path / "same.yaml").read_text())["compute_config"]["worker_nodes"]
    assert [group["instance_type"] for group in groups] == ["g6.2xlarge"]


@pytest.mark.parametrize(("sets", "says"), [
    (["cascade.model=sample:tiny-chat-small", "cascade.escalate_below=1.5"],
     "cascade.escalate_below: Input should be less than or equal to 1"),
    (["cascade.model=sample:tiny-chat-small", "cascade.escalate_below=0"],
     "cascade.escalate_below: Input should be greater than 0"),
    (["cascade.model=sample:tiny-chat-small", "cascade.batch_sise=8"],
     "cascade.batch_sise: unknown key"),
    (["cascade.model=sample:tiny-chat"], "cascade.model: 'sample:tiny-chat' is engine.model too"),
])
def test_a_wrong_cascade_is_refused_naming_the_field(sets, says):
    with pytest.raises(SpecError) as refused:
        load_job_spec(JOB, smoke=True, sets=sets)
    assert says in str(refused.value)


def test_a_threshold_on_answers_without_a_confidence_is_refused():
    job = load_job("date-reformat")
    with pytest.raises(SpecError) as refused:
        load_job_spec(job, smoke=True, sets=["cascade.model=sample:tiny-chat-small",
                                             "cascade.escalate_below=0.5"])
    assert "cascade.escalate_below: job date-reformat's answers carry no confidence" in str(
        refused.value)
    # Without a threshold, the rows that fail a check still escalate.
    spec = load_job_spec(job, smoke=True, sets=["cascade.model=sample:tiny-chat-small"])
    assert spec.cascade.escalate_below is None


def test_the_small_model_follows_engine_also_in_a_spec_read_back_from_its_dump():
    spec = load_job_spec(JOB, sets=["cascade.model=Qwen/Qwen2.5-0.5B-Instruct",
                                    "cascade.escalate_below=0.8", "cascade.concurrency=1-8"])
    again = JOB.spec_model.model_validate(spec.model_dump(mode="json"))
    for read in (spec, again):
        small = read.cascade_engine
        assert (small.kind, small.accelerator_type, small.pool_size) == ("vllm", "L4", (1, 8))
    on_cpu = load_job_spec(JOB, sets=["cascade.model=Qwen/Qwen2.5-0.5B-Instruct",
                                      "cascade.accelerator_type=none"])
    assert on_cpu.cascade_engine.accelerator_type is None
    assert on_cpu.engine.accelerator_type == "L4"


def test_a_resume_may_resize_the_small_models_pool_but_not_change_it_or_its_threshold():
    from toolkit.run.output.fingerprint import results_fingerprint

    cascade = ["cascade.model=sample:tiny-chat-small", "cascade.escalate_below=0.5"]
    base = results_fingerprint(load_job_spec(JOB, smoke=True, sets=cascade))
    for neutral in ("cascade.batch_size=8", "cascade.concurrency=2", "cascade.num_cpus=2"):
        assert results_fingerprint(load_job_spec(JOB, smoke=True, sets=[*cascade, neutral])) \
            == base, neutral
    for decisive in ("cascade.escalate_below=0.6", "cascade.model=sample:tiny-vision"):
        assert results_fingerprint(load_job_spec(JOB, smoke=True, sets=[*cascade, decisive])) \
            != base, decisive
    assert results_fingerprint(load_job_spec(JOB, smoke=True)) != base


def test_the_progress_line_counts_the_rows_each_model_answered_as_they_are_written(tmp_path):
    import pyarrow.parquet as pq

    from toolkit.run.output.run_directory import RunDirectory
    from toolkit.run.progress.display import format_progress
    from toolkit.run.progress.sources import WrittenRows

    spec = load_job_spec(JOB, smoke=True, overrides={"data.output": str(tmp_path / "out")},
                         sets=["cascade.model=sample:tiny-chat-small"])
    run_dir = RunDirectory(str(tmp_path / "out"))
    run_dir.prepare(spec, overwrite=False, resumable=True)
    write_id = run_dir.begin_write()
    for part, answered in enumerate(([SMALL, SMALL, BIG], [SMALL, None])):
        pq.write_table(pa.table({
            "Index": [f"{part}-{i}" for i in range(len(answered))],
            "answered_by": pa.array(answered, pa.string()),
            "failed_checks": pa.nulls(len(answered), pa.string()),
            "error": pa.array([None if a else "preprocess: blank" for a in answered],
                              pa.string())}),
            tmp_path / "out" / f"part-{write_id}_a_00000{part}-0.parquet")
    counts = WrittenRows(run_dir, "parquet")()
    assert (counts.rows, counts.errors, counts.answered) == (5, 1, ((BIG, 1), (SMALL, 3)))

    from toolkit.run.progress.model import Progress

    line = format_progress(Progress(rows_done=5, rows_total=10, error_rows=1,
                                    rows_per_second=1.0, eta_seconds=5.0,
                                    answered_by=counts.answered), interactive=False)
    assert line == ("Progress: 5/10 rows (50%), 1.0 rows/s, ETA 5s, 1 error, answered by "
                    "tiny-chat 1, tiny-chat-small 3")
