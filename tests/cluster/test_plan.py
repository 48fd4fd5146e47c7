"""`toolkit plan`: the arithmetic on known inputs, and where every figure came from."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from toolkit.cli.main import main
from toolkit.cluster.estimate.job_estimate import estimate_job as plan_job
from toolkit.cluster.price_table import INSTANCE_PRICES
from toolkit.cluster.throughput_table import parameters_from_name, size_class
from toolkit.run.prompt_tokens import PLACEHOLDER_VALUE
from toolkit.spec.jobs.catalog import load_job
from toolkit.spec.loading import load_job_spec

JOB = load_job("text-industry")
STAGE = JOB.main_stage
L4_PRICE = INSTANCE_PRICES["g6.2xlarge"].usd_per_hour
HEAD_PRICE = INSTANCE_PRICES["m5.2xlarge"].usd_per_hour


def plan(*args: str) -> dict:
    result = CliRunner().invoke(main, ["plan", "text-industry", *args, "--format", "json"])
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def invoke(*args: str) -> Result:
    result = CliRunner().invoke(main, list(args))
    print(result.output)
    return result


@pytest.fixture
def pilot_run(tmp_path: Path) -> Path:
    """What a finished 2,000-row pilot on 2 L4 workers leaves: its summary and manifest."""
    pilot = tmp_path / "pilot"
    pilot.mkdir()
    (pilot / "_summary.json").write_text(json.dumps({
        "job": "text-industry", "output": str(pilot), "rows_in": 2000, "rows_written": 2000,
        "rows_this_run": 2000, "rows_ok": 2000, "error_rows": 0, "seconds": 40.0,
        "rows_per_second": 50.0, "engine_workers": 2, "gpus_per_worker": 1,
        "rows_per_second_per_worker": 25.0, "gpu_hours": 0.0222, "input_tokens": 190000,
        "output_tokens": 6000, "tokens_per_second": 4900.0, "smoke": False,
    }))
    (pilot / "_manifest.json").write_text(json.dumps({
        "fingerprint": "f", "write_ids": [], "files": [],
        "spec": {"engine": {"kind": "vllm", "model": "unsloth/Llama-3.1-8B-Instruct",
                            "accelerator_type": "L4", "concurrency": 2}},
    }))
    return pilot


def test_a_pilot_runs_measured_rate_scales_to_the_full_run(pilot_run: Path) -> None:
    got = plan("--rows", "1M", "--from-run", str(pilot_run))
    assert got["rows"] == {"value": 1_000_000, "source": "spec", "detail": "data.rows (--rows)"}
    per_worker = got["rows_per_second_per_worker"]
    assert (per_worker["value"], per_worker["source"]) == (25.0, "measured")
    assert per_worker["detail"].startswith(f"pilot run {pilot_run}: 2,000 rows in 40 s on 2 worker")
    assert got["output_tokens_per_row"]["value"] == 3.0  # 6,000 generated tokens / 2,000 rows
    assert got["output_tokens_per_row"]["source"] == "measured"
    # 4 L4 workers (text-industry's engine.concurrency), one g6.2xlarge each.
    assert (got["workers"]["value"], got["instances"]["value"]) == (4, 4)
    assert got["instance_type"]["value"] == "g6.2xlarge"
    assert got["rows_per_second"]["value"] == 100.0
    assert got["wall_seconds"]["value"] == 10_000.0  # 1M rows at 100 rows/s
    assert got["gpu_hours"]["value"] == round(10_000 * 4 * 1 / 3600, 2) == 11.11
    assert got["price_per_hour"] == {"value": L4_PRICE, "source": "table",
                                     "detail": "g6.2xlarge, 2025-06 (AWS on-demand, Linux, "
                                               "us-east-1)"}
    assert got["cost_usd"]["value"] == round(10_000 / 3600 * (4 * L4_PRICE + HEAD_PRICE), 2)
    assert any("much of it loading the model" in note for note in got["notes"])


def test_price_per_hour_flag_replaces_the_table(pilot_run: Path) -> None:
    got = plan("--rows", "1M", "--from-run", str(pilot_run), "--price-per-hour", "2")
    assert got["price_per_hour"] == {"value": 2.0, "source": "flag", "detail": "--price-per-hour"}
    assert got["cost_usd"]["value"] == round(10_000 / 3600 * (4 * 2.0 + HEAD_PRICE), 2) == 23.29


def test_a_pilot_on_other_hardware_is_flagged(pilot_run: Path) -> None:
    got = plan("--rows", "1M", "--from-run", str(pilot_run), "--accelerator", "H100")
    assert any("accelerator 'L4', this plan 'H100'" in note for note in got["notes"])
    missing = invoke("plan", "text-industry", "--from-run", str(pilot_run.parent / "nope"))
    assert missing.exit_code == 2
    assert "--from-run: " in missing.stderr and "has no readable _summary.json" in missing.stderr


def test_without_a_pilot_the_throughput_table_and_token_estimate_are_used() -> None:
    got = plan("--rows", "1M")
    tokens_in, tokens_out = got["input_tokens_per_row"], got["output_tokens_per_row"]
    # The default input is a URL: no rows are read, the template is rendered with placeholders.
    assert tokens_in["source"] == "estimate"
    assert "~4 characters per token over the prompt template" in tokens_in["detail"]
    options = JOB.options_of(load_job_spec(JOB))
    messages = STAGE.preprocess({"Company": PLACEHOLDER_VALUE, "Index": PLACEHOLDER_VALUE},
                              options)["messages"]
    chars = sum(len(m["content"]) for m in messages)
    assert tokens_in["value"] == round(chars / 4 + 5 * 2, 1)
    # One of nine industries: mean ~4-characters-per-token length plus the end token.
    choices = options.output.choice
    assert tokens_out["value"] == round(sum(-(-len(c) // 4) for c in choices) / len(choices) + 1, 1)
    per_worker = got["rows_per_second_per_worker"]
    assert per_worker["source"] == "table"
    assert "~2,000 tokens/s per L4 GPU for 8B-class models on vLLM (rough)" in per_worker["detail"]
    assert per_worker["value"] == round(2000 / (tokens_in["value"] + tokens_out["value"]), 2)
    rate = round(per_worker["value"] * 4, 2)
    assert got["rows_per_second"]["value"] == rate
    wall = round(1_000_000 / rate, 1)
    assert got["wall_seconds"]["value"] == wall
    assert got["gpu_hours"]["value"] == round(wall * 4 / 3600, 2)
    assert got["cost_usd"]["value"] == round(wall / 3600 * (4 * L4_PRICE + HEAD_PRICE), 2)


def test_rows_and_prompts_come_from_a_local_input(tmp_path: Path) -> None:
    from toolkit.samples.customers import write_customers_csv

    csv = write_customers_csv(tmp_path / "customers.csv", rows=30, seed=1)
    got = plan("--input", str(csv), "--rows", "1M")
    assert got["rows"]["value"] == 30 and got["rows"]["source"] == "measured"
    assert got["input_tokens_per_row"]["detail"].endswith(f"the first 30 rows of {csv}")


def test_tokens_are_measured_with_the_models_own_tokenizer(tiny_chat_model: Path) -> None:
    from transformers import AutoTokenizer

    from toolkit.samples.customers import customers_batch

    got = plan("--smoke", "--rows", "5000", "--model", str(tiny_chat_model))
    tokens_in = got["input_tokens_per_row"]
    assert tokens_in["source"] == "measured"
    assert tokens_in["detail"] == (f"tokenizer of {tiny_chat_model} over 100 generated rows "
                                   "of sample:customers")
    tokenizer = AutoTokenizer.from_pretrained(str(tiny_chat_model))
    options = JOB.options_of(load_job_spec(JOB, smoke=True))
    counts = []
    for row in customers_batch(0, 100, 0).to_pylist():
        text = tokenizer.apply_chat_template(STAGE.preprocess(row, options)["messages"],
                                             add_generation_prompt=True, tokenize=False)
        counts.append(len(tokenizer(text, add_special_tokens=False)["input_ids"]))
    assert tokens_in["value"] == round(sum(counts) / len(counts), 1)
    assert "(tokenizer of" in got["output_tokens_per_row"]["detail"]
    # The transformers engine on CPU has no table figure: a pilot run measures it.
    assert got["rows_per_second_per_worker"]["source"] == "unknown"
    assert got["gpu_hours"]["value"] is None and got["cost_usd"]["value"] is None


def test_the_text_says_where_every_figure_came_from() -> None:
    result = invoke("plan", "text-industry", "--rows", "1M")
    assert result.exit_code == 0
    lines = result.stdout.splitlines()
    assert lines[0] == ("Plan for text-industry: 1,000,000 rows, vllm with "
                        "unsloth/Llama-3.1-8B-Instruct")
    by_label = {line.split(":", 1)[0].strip(): line for line in lines[1:] if line.startswith("  ")}
    assert "spec: data.rows (--rows)" in by_label["rows"]
    assert "estimate: ~4 characters per token" in by_label["input tokens/row"]
    assert "4 x g6.2xlarge" in by_label["instance type"]
    assert "table: ~2,000 tokens/s per L4 GPU" in by_label["rows/s/worker"]
    assert "table: g6.2xlarge, 2025-06" in by_label["price/hour"]
    for label in ("throughput", "wall time", "GPU-hours", "cost"):
        assert "derived:" in by_label[label]
    assert by_label["cost"].split()[1].startswith("~$")


def test_the_one_line_estimate_for_submit() -> None:
    spec = load_job_spec(JOB, overrides={"data.rows": "1M"})
    line = plan_job(JOB, spec, use_tokenizer=False, count_rows=False).one_line()
    assert line.startswith("Estimate for 1,000,000 rows: ~")
    assert " on 4 x g6.2xlarge, ~" in line and "GPU-hours, ~$" in line
    assert line.endswith("(throughput: table, price: table; rough, see `toolkit plan`).")
    # No throughput figure (the CPU smoke engine): no line at all.
    smoke = load_job_spec(JOB, smoke=True)
    assert plan_job(JOB, smoke, use_tokenizer=False).one_line() is None


@pytest.mark.parametrize(("model", "billions", "size"), [
    ("unsloth/Llama-3.1-8B-Instruct", 8.0, "8B"),
    ("Qwen/Qwen2.5-0.5B-Instruct", 0.5, "1B"),
    ("meta-llama/Llama-3.2-3B-Instruct", 3.0, "3B"),
    ("HuggingFaceTB/SmolLM2-360M-Instruct", 0.36, "1B"),
    ("meta-llama/Llama-3.1-70B-Instruct", 70.0, None),
    ("gpt2", None, None),
])
def test_model_size_classes_come_from_the_name(model: str, billions, size) -> None:
    assert parameters_from_name(model) == billions
    assert size_class(model) == size


def test_plan_does_not_import_ray_torch_or_transformers(tmp_path: Path) -> None:
    code = textwrap.dedent("""
        import json, sys
        from click.testing import CliRunner
        from toolkit.cli.main import main
        result = CliRunner().invoke(main, ["plan", "text-industry", "--rows", "1M"])
        assert result.exit_code == 0, result.output
        print(result.stdout)
        heavy = ("ray", "torch", "transformers", "vllm")
        print(json.dumps([name for name in heavy if name in sys.modules]))
    """)
    # An empty Hugging Face cache: the tokenizer is not on this machine, so tokens are estimated.
    env = {**os.environ, "HF_HOME": str(tmp_path / "hf"), "HF_HUB_OFFLINE": "1"}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          cwd=tmp_path, env=env, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.strip().splitlines()
    assert json.loads(lines[-1]) == []
    assert any(line.startswith("  cost:") and "~$" in line for line in lines)


def test_vllm_without_an_accelerator_is_planned_on_cpu_workers() -> None:
    got = plan("--rows", "10k", "--accelerator", "none")
    assert got["engine"] == "vllm"
    assert got["gpus_per_worker"]["value"] == 0
    assert got["instance_type"]["value"] == "m5.2xlarge"
    assert got["rows_per_second_per_worker"]["value"] is None  # no CPU table: run a pilot
    assert any("vLLM on CPU workers" in note for note in got["notes"])


# --- multi-stage jobs: every model stage is priced, the slowest sets the pace -----------

TRIAGE = load_job("review-triage")
T4_PRICE = INSTANCE_PRICES["g4dn.2xlarge"].usd_per_hour


def plan_triage(*args: str) -> dict:
    result = CliRunner().invoke(main, ["plan", "review-triage", *args, "--format", "json"])
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


@pytest.fixture
def triage_pilot(tmp_path: Path) -> Path:
    """A finished 4,000-row review-triage pilot: 1 T4 classifier worker, 2 L4 chat workers,
    20 rows/s through the whole pipeline."""
    pilot = tmp_path / "triage-pilot"
    pilot.mkdir()
    stage = {"min_workers": 1, "batch_size": 64, "num_cpus": 1.0, "gpus_per_worker": 1}
    (pilot / "_summary.json").write_text(json.dumps({
        "job": "review-triage", "output": str(pilot), "rows_in": 4000, "rows_written": 4000,
        "rows_this_run": 4000, "rows_ok": 4000, "error_rows": 0, "seconds": 200.0,
        "rows_per_second": 20.0, "engine_workers": 2, "gpus_per_worker": 1,
        "rows_per_second_per_worker": 10.0, "gpu_hours": 0.1667, "input_tokens": 240000,
        "output_tokens": 100000, "tokens_per_second": 1700.0, "smoke": False,
        "stages": [
            {**stage, "name": "stages.sentiment", "task": "classify", "kind": "transformers",
             "model": "distilbert/distilbert-base-uncased-finetuned-sst-2-english",
             "workers": 1, "accelerator_type": "T4"},
            {**stage, "name": "engine", "task": "generate", "kind": "vllm",
             "model": "unsloth/Llama-3.1-8B-Instruct", "workers": 2, "accelerator_type": "L4"},
        ],
    }))
    (pilot / "_manifest.json").write_text(json.dumps({
        "fingerprint": "f", "write_ids": [], "files": [],
        "spec": {"engine": {"kind": "vllm", "model": "unsloth/Llama-3.1-8B-Instruct",
                            "accelerator_type": "L4", "concurrency": 2}},
    }))
    return pilot


def test_a_multi_stage_plan_prices_every_stage_on_the_instances_render_asks_for() -> None:
    from toolkit.cluster.render import worker_instance_types

    got = plan_triage("--rows", "1M")
    sentiment, chat = got["stages"]
    assert (sentiment["path"], sentiment["kind"], sentiment["task"]) == (
        "stages.sentiment", "transformers", "classify")
    assert (chat["path"], chat["kind"], chat["task"]) == ("engine", "vllm", "generate")
    # The job asks for T4 for the classifier and L4 for the chat model: the worker groups
    # `toolkit render` gives it, one per stage here.
    spec = load_job_spec(TRIAGE)
    assert sorted(worker_instance_types(spec)) == ["g4dn.2xlarge", "g6.2xlarge"]
    assert sentiment["instance_type"] == {"value": "g4dn.2xlarge", "source": "table",
                                          "detail": "compute table: T4 -> g4dn.2xlarge"}
    assert chat["instance_type"]["value"] == "g6.2xlarge"
    assert sentiment["workers"] == {"value": 1, "source": "spec",
                                    "detail": "stages.sentiment.concurrency"}
    assert (chat["workers"]["value"], chat["instances"]["value"]) == (2, 2)
    assert sentiment["price_per_hour"]["value"] == T4_PRICE
    # A classifier has no table figure: the plan says so and asks for a pilot.
    assert sentiment["rows_per_second_per_worker"]["source"] == "unknown"
    assert "not classify" in sentiment["rows_per_second_per_worker"]["detail"]
    assert "--from-run" in sentiment["rows_per_second_per_worker"]["detail"]
    # The chat stage's rate comes from the table, over the chat prompt's tokens (the
    # classifier's label is a placeholder), and sets the pace.
    per_worker = chat["rows_per_second_per_worker"]
    assert per_worker["source"] == "table"
    tokens = got["input_tokens_per_row"]["value"] + got["output_tokens_per_row"]["value"]
    assert got["input_tokens_per_row"]["detail"].startswith("engine: ~4 characters per token")
    assert per_worker["value"] == round(2000 / tokens, 2)
    rate = round(per_worker["value"] * 2, 2)
    assert (chat["rows_per_second"], chat["bottleneck"], sentiment["bottleneck"]) == (
        rate, True, False)
    assert got["rows_per_second"]["value"] == rate
    assert got["rows_per_second_per_worker"]["value"] == per_worker["value"]
    assert any(note.startswith("stages.sentiment: no rows/s figure, so the wall time assumes "
                               "it keeps up") for note in got["notes"])
    # The whole job: both stages' workers, instances and GPUs over the same wall time.
    wall = round(1_000_000 / rate, 1)
    assert got["wall_seconds"]["value"] == wall
    assert (got["workers"]["value"], got["instances"]["value"]) == (3, 3)
    assert got["gpu_hours"]["value"] == round(wall * (1 + 2) / 3600, 2)
    cost = got["cost_usd"]["value"]
    assert cost == round(wall / 3600 * (T4_PRICE + 2 * L4_PRICE + HEAD_PRICE), 2)
    assert cost > round(wall / 3600 * (2 * L4_PRICE + HEAD_PRICE), 2)  # the main stage alone


def test_a_multi_stage_plan_text_shows_each_stage_and_the_totals() -> None:
    result = invoke("plan", "review-triage", "--rows", "1M")
    assert result.exit_code == 0
    lines = result.stdout.splitlines()
    assert lines[0] == ("Plan for review-triage: 1,000,000 rows through 2 model stages "
                        "(stages.sentiment, engine)")
    sentiment = lines.index("  stages.sentiment: transformers with "
                            "distilbert/distilbert-base-uncased-finetuned-sst-2-english (classify)")
    chat = lines.index("  engine: vllm with unsloth/Llama-3.1-8B-Instruct (generate)")
    assert sentiment < chat
    block = lines[sentiment + 1:chat]
    assert block[0].split() == ["workers:", "1", "x", "1", "GPU", "spec:",
                                "stages.sentiment.concurrency"]
    assert block[1].startswith("    instance type:    1 x g4dn.2xlarge ")
    assert block[1].endswith("table: compute table: T4 -> g4dn.2xlarge")
    assert block[2].startswith("    rows/s/worker:    ?   ")
    assert "table: g4dn.2xlarge, 2025-06" in block[3]
    assert lines[chat + 2].startswith("    instance type:    2 x g6.2xlarge ")
    assert "table: ~2,000 tokens/s per L4 GPU" in lines[chat + 3]
    by_label = {line.split(":", 1)[0].strip(): line for line in lines[chat + 5:]
                if line.startswith("  ")}
    assert by_label["workers"].split()[1:4] == ["3", "(3", "GPUs)"]
    assert ("1 x g4dn.2xlarge + 2 x g6.2xlarge  derived: every stage's instances added up"
            in by_label["instances"])
    assert "derived: slowest stage, engine: rows/s per worker x workers" in by_label["throughput"]
    assert "every stage's workers x GPUs per worker" in by_label["GPU-hours"]
    assert "every stage's worker instances x price + head node" in by_label["cost"]

    spec = load_job_spec(TRIAGE, overrides={"data.rows": "1M"})
    line = plan_job(TRIAGE, spec, use_tokenizer=False, count_rows=False).one_line()
    assert " on 1 x g4dn.2xlarge + 2 x g6.2xlarge, ~" in line
    assert line.endswith("(throughput: table, stages.sentiment assumed to keep up, price: "
                         "table; rough, see `toolkit plan`).")


def test_a_pilot_of_a_multi_stage_job_bounds_every_stage(triage_pilot: Path) -> None:
    # As the pilot ran it (1 + 2 workers), both stages went 20 rows/s: the pipeline's rate.
    got = plan_triage("--rows", "1M", "--from-run", str(triage_pilot))
    sentiment, chat = got["stages"]
    assert sentiment["rows_per_second_per_worker"]["value"] == 20.0
    assert chat["rows_per_second_per_worker"]["value"] == 10.0
    for stage in (sentiment, chat):
        assert stage["rows_per_second_per_worker"]["source"] == "measured"
        assert "the whole pipeline's rate" in stage["rows_per_second_per_worker"]["detail"]
    assert got["rows_per_second"]["value"] == 20.0
    assert got["output_tokens_per_row"]["value"] == 25.0  # 100,000 generated / 4,000 rows
    # Four times the chat workers, the classifier as it was: it sets the pace now.
    got = plan_triage("--rows", "1M", "--from-run", str(triage_pilot),
                      "--set", "engine.concurrency=8")
    sentiment, chat = got["stages"]
    assert (sentiment["rows_per_second"], chat["rows_per_second"]) == (20.0, 80.0)
    assert sentiment["bottleneck"] and not chat["bottleneck"]
    assert got["rows_per_second"]["detail"].startswith("slowest stage, stages.sentiment")
    wall = 1_000_000 / 20.0
    assert got["wall_seconds"]["value"] == wall
    assert got["gpu_hours"]["value"] == round(wall * (1 + 8) / 3600, 2)
    assert got["cost_usd"]["value"] == round(
        wall / 3600 * (T4_PRICE + 8 * L4_PRICE + HEAD_PRICE), 2)
    assert any(note.startswith("A pilot measures the whole pipeline") for note in got["notes"])


def test_a_one_stage_plan_has_no_stage_block(pilot_run: Path) -> None:
    """A one-stage job prints and serializes exactly as before multi-stage plans."""
    got = plan("--rows", "1M", "--from-run", str(pilot_run))
    assert list(got) == ["job", "model", "engine", "rows", "input_tokens_per_row",
                         "output_tokens_per_row", "workers", "gpus_per_worker", "instance_type",
                         "instances", "rows_per_second_per_worker", "price_per_hour",
                         "head_price_per_hour", "rows_per_second", "wall_seconds", "gpu_hours",
                         "cost_usd", "notes"]
    assert got["workers"] == {"value": 4, "source": "spec", "detail": "engine.concurrency"}
    assert got["gpus_per_worker"] == {"value": 1, "source": "spec",
                                      "detail": "vLLM: tensor x pipeline parallel size"}
    tokens_in = got["input_tokens_per_row"]
    result = invoke("plan", "text-industry", "--rows", "1M", "--from-run", str(pilot_run))
    assert result.exit_code == 0
    prices = "2025-06 (AWS on-demand, Linux, us-east-1)"
    assert result.stdout.splitlines()[:13] == [
        "Plan for text-industry: 1,000,000 rows, vllm with unsloth/Llama-3.1-8B-Instruct",
        "  rows:               1,000,000              spec: data.rows (--rows)",
        f"  input tokens/row:   {'~' + format(tokens_in['value'], ',.0f'):22} "
        f"{tokens_in['source']}: {tokens_in['detail']}",
        "  output tokens/row:  ~3                     measured: generated tokens per row of "
        "the pilot run",
        "  engine workers:     4 x 1 GPU              spec: engine.concurrency",
        "  instance type:      4 x g6.2xlarge         table: compute table: L4 -> g6.2xlarge",
        f"  rows/s/worker:      ~25.0                  measured: pilot run {pilot_run}: 2,000 "
        "rows in 40 s on 2 worker(s), model loading included",
        f"  price/hour:         $0.9776 per instance   table: g6.2xlarge, {prices}",
        f"  head node:          $0.3840 per hour       table: m5.2xlarge, {prices}",
        "  throughput:         ~100.0 rows/s          derived: rows/s per worker x workers",
        "  wall time:          ~2h 46m                derived: rows / throughput, at 4 worker(s)",
        "  GPU-hours:          ~11.1                  derived: wall time x workers x GPUs per "
        "worker",
        "  cost:               ~$11.93                derived: wall time x (worker instances x "
        "price + head node)",
    ]
