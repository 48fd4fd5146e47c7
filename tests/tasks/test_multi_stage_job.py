"""Multi-stage jobs as users run them: `toolkit run review-triage --smoke` chains a
classifier stage and a chat stage, each on its own engine section; a row that fails
in the first stage is an error row the second skips; render asks for a worker group
per accelerator."""

from __future__ import annotations

import json
import re

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import yaml
from click.testing import CliRunner

from toolkit.cli.main import main
from toolkit.run.output.fingerprint import results_fingerprint
from toolkit.spec.jobs.catalog import load_job
from toolkit.spec.loading import load_job_spec

JOB = "review-triage"


def cli(*args: str):
    result = CliRunner().invoke(main, list(args))
    print(result.output)  # shown when a test fails
    return result


def stage_actors(ray) -> dict[str, str]:
    """Ray's own record of the engine actors: actor id -> the stage's class name."""
    from ray._private.state import actors  # the GCS actor table; needs no dashboard

    return {actor_id: info["ActorClassName"] for actor_id, info in actors().items()
            if "MapWorker" in info["ActorClassName"]}


def test_two_stage_smoke_run_writes_both_stages_columns_and_error_rows(local_ray, tmp_path):
    out = tmp_path / "out"
    before = stage_actors(local_ray)
    result = cli("run", JOB, "--smoke", "--rows", "50", "--output", str(out), "--set",
                 "stages.sentiment.batch_size=8", "--set", "stages.sentiment.concurrency=2",
                 "--batch-size", "16")
    assert result.exit_code == 0
    # Ray started each stage's actor pool from its own section: 2 classifiers, 1 chat model.
    started = [name for actor_id, name in stage_actors(local_ray).items()
               if actor_id not in before]
    assert sum("TextClassifier" in name for name in started) == 2, started
    assert sum("TransformersChatEngine" in name for name in started) == 1, started
    table = pq.read_table(out)
    assert table.num_rows == 50 and sorted(table["review_id"].to_pylist()) == list(range(1, 51))
    types = {name: table.schema.field(name).type for name in
             ("sentiment", "sentiment_score", "reply", "error")}
    assert types == {"sentiment": pa.string(), "sentiment_score": pa.float64(),
                     "reply": pa.string(), "error": pa.string()}
    assert not {"label", "score", "prompt", "messages", "generated_text"} & set(table.column_names)
    rows = {row["review_id"]: row for row in table.to_pylist()}
    # Reviews 25 and 50 are blank: they fail in the first stage, the chat stage skips them.
    for blank in (25, 50):
        assert rows[blank]["error"] == "preprocess: column 'review' is empty"
        assert (rows[blank]["sentiment"], rows[blank]["reply"]) == (None, None)
        assert rows[blank]["num_input_tokens"] is None
    good = [row for i, row in rows.items() if i not in (25, 50)]
    assert all(row["error"] is None for row in good)
    assert {row["sentiment"] for row in good} <= {"NEGATIVE", "POSITIVE"}
    assert all(isinstance(row["reply"], str) and row["num_input_tokens"] for row in good)
    # ok: a reply that passed its checks; the tiny model's replies may run to max_tokens.
    written = re.search(r"rows written:  50 \((\d+) ok, (?:(\d+) failed a check, )?2 with an "
                        r"error\)", result.output)
    assert written is not None and int(written[1]) + int(written[2] or 0) == 48, result.output
    assert "    review_id=1, sentiment='" in result.output  # samples show every stage's columns

    # Each stage ran on its own section: the --set reached the classifier stage only.
    summary = json.loads((out / "_summary.json").read_text())
    assert [(s["name"], s["task"], s["model"], s["batch_size"], s["workers"], s["num_cpus"],
             s["gpus_per_worker"]) for s in summary["stages"]] == [
        ("stages.sentiment", "classify", "sample:tiny-classifier", 8, 2, 1.0, 0),
        ("engine", "generate", "sample:tiny-chat", 16, 1, 1.0, 0),
    ]
    assert ("    stages.sentiment: classify on transformers (sample:tiny-classifier), "
            "2 x CPU, 1 CPU each, batch 8") in result.output

    again = cli("run", JOB, "--smoke", "--rows", "50", "--output", str(out),
                "--set", "stages.sentiment.batch_size=32", "--set",
                "stages.sentiment.concurrency=2", "--batch-size", "16")
    assert again.exit_code == 0 and "Already complete" in again.output  # batch size: same results


def test_stage_sections_are_checked_against_the_job():
    result = cli("show", JOB, "--set", "stages.sentimnet.batch_size=3")
    assert result.exit_code == 2
    assert "stages.sentimnet: unknown model stage (job review-triage has stages: sentiment)" \
        in result.output
    result = cli("show", "text-industry", "--set", "stages.extra.batch_size=3")
    assert result.exit_code == 2
    assert "stages.extra: unknown model stage (job text-industry has no stages before engine)" \
        in result.output
    result = cli("show", JOB, "--set", "stages.sentiment.kind=sklearn")
    assert result.exit_code == 2 and "stages.sentiment: " in result.output


def test_a_stage_model_changes_the_fingerprint_and_its_speed_settings_do_not():
    job = load_job(JOB)
    base = load_job_spec(job, smoke=True)
    assert list(base.stages) == ["sentiment"] and base.stages["sentiment"].task == "classify"
    for neutral in ("stages.sentiment.batch_size=8", "stages.sentiment.concurrency=3",
                    "stages.sentiment.num_cpus=2"):
        assert results_fingerprint(load_job_spec(job, smoke=True, sets=(neutral,))) == \
            results_fingerprint(base), neutral
    other = load_job_spec(job, smoke=True, sets=("stages.sentiment.model=sample:tiny-encoder",))
    assert results_fingerprint(other) != results_fingerprint(base)
    # One-stage specs don't dump an empty stages section (their hashes stay as they were).
    assert "stages" not in load_job_spec(load_job("text-classify")).model_dump()


@pytest.mark.parametrize("sets, groups", [
    ((), ["g6.2xlarge", "g4dn.2xlarge"]),  # chat on L4 (main first), classifier on T4
    (("stages.sentiment.accelerator_type=L4",), ["g6.2xlarge"]),
    (("stages.sentiment.accelerator_type=none",), ["g6.2xlarge", "m5.2xlarge"]),
])
def test_render_asks_for_a_worker_group_per_stage_accelerator(sets, groups, tmp_path):
    flags = [arg for expression in sets for arg in ("--set", expression)]
    result = cli("render", JOB, *flags, "-o", str(tmp_path / "job.yaml"))
    assert result.exit_code == 0
    rendered = yaml.safe_load((tmp_path / "job.yaml").read_text())
    assert [group["instance_type"] for group in rendered["compute_config"]["worker_nodes"]] \
        == groups


def test_stage_row_functions_without_ray():
    job = load_job(JOB)
    options = load_job_spec(job).options
    sentiment, reply = job.stages
    assert reply.name == "engine"
    assert sentiment.preprocess({"review": " Great "}, options) == {"prompt": "Great"}
    with pytest.raises(ValueError, match="column 'review' is empty"):
        sentiment.preprocess({"review": ""}, options)
    row = {"review": "Broke.", **sentiment.postprocess({"label": "NEGATIVE", "score": 0.9},
                                                       options)}
    assert row["sentiment"] == "NEGATIVE"
    assert "apologise" in reply.preprocess(row, options)["messages"][1]["content"]
    assert reply.postprocess({"generated_text": " Sorry!\nWe will\n"}, options) == \
        {"reply": "Sorry! We will"}
