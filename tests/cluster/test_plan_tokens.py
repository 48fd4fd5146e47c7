"""`toolkit plan --tokens` and `--check-tokens`: every row's prompt counted before any
model loads, equal to what a real run writes in its token columns."""

from __future__ import annotations

import csv
import json
import tempfile
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner

from toolkit.cli.main import main
from toolkit.engines.token_counter import PromptTokenCounter

ROWS = 40
LONG_ID = "8"  # this row's company name alone is ~750 tokens: over max_model_len 256


@pytest.fixture(scope="module")
def customers(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """40 generated customers, one with a name far longer than the model takes."""
    from toolkit.samples.customers import write_customers_csv

    folder = tmp_path_factory.mktemp("tokens")
    path = write_customers_csv(folder / "customers.csv", rows=ROWS, seed=3)
    with open(path, newline="", encoding="utf-8") as stream:
        rows = list(csv.DictReader(stream))
    for row in rows:
        if row["Index"] == LONG_ID:
            row["Company"] = "Acme Holdings " * 60
    with open(path, "w", newline="", encoding="utf-8") as stream:
        writer = csv.DictWriter(stream, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    return path


@pytest.fixture(scope="module")
def named_8b(tiny_chat_model: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The sample model under a name that says 8B, so the throughput table prices it."""
    import shutil

    return Path(shutil.copytree(tiny_chat_model, tmp_path_factory.mktemp("m") / "Tiny-Chat-8B"))


@pytest.fixture(scope="module")
def planned(customers: Path, named_8b: Path, local_ray) -> dict:
    result = CliRunner().invoke(main, ["plan", "text-industry", "--smoke", "--input",
                                       str(customers), "--model", str(named_8b), "--tokens",
                                       "--format", "json"])
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def test_plan_tokens_counts_every_row_and_names_the_one_over_max_model_len(planned) -> None:
    found = planned["prompt_tokens"]
    assert (found["rows"], found["rows_counted"]) == (ROWS, ROWS)
    assert found["max_model_len"] == {"value": 256,
                                      "source": "engine.engine_kwargs.max_model_len"}
    assert found["over_max_model_len"] == {"count": 1, "ids": [LONG_ID]}
    assert found["input_tokens"]["longest_id"] == LONG_ID
    assert found["input_tokens"]["max"] > 256 >= found["input_tokens"]["p50"]
    assert found["rejected_by_job"]["count"] == 0
    assert found["output_token_budget"] == ROWS * 16  # every row's sampling.max_tokens
    # The exact figures replace the plan's estimates, and say so.
    assert planned["rows"] == {"value": ROWS, "source": "measured",
                               "detail": f"rows of {found['input']} read to count tokens"}
    per_row = planned["input_tokens_per_row"]
    assert per_row["source"] == "measured"
    assert per_row["value"] == round(found["input_tokens"]["total"] / ROWS, 1)
    assert planned["output_token_budget"]["value"] == ROWS * 16


def test_plan_tokens_prices_the_counted_tokens_on_each_accelerator(planned) -> None:
    from toolkit.cluster.price_table import INSTANCE_PRICES
    from toolkit.cluster.throughput_table import TOKENS_PER_SECOND_PER_GPU

    costs = {cost["accelerator"]: cost for cost in planned["accelerator_costs"]}
    assert set(costs) == set(TOKENS_PER_SECOND_PER_GPU["8B"])  # L4, A10G, L40S, A100, H100
    tokens = (planned["prompt_tokens"]["input_tokens"]["total"]
              + planned["output_tokens_per_row"]["value"] * ROWS)
    l4 = costs["L4"]
    assert l4["instance_type"] == "g6.2xlarge" and l4["source"] == "derived"
    assert l4["gpu_hours"] == round(tokens / 2_000 / 3600, 4) > 0
    assert l4["cost_usd"] == round(tokens / 2_000 / 3600
                                   * INSTANCE_PRICES["g6.2xlarge"].usd_per_hour, 4) > 0
    assert l4["detail"].startswith(f"{planned['prompt_tokens']['input_tokens']['total']:,} "
                                   "input + ~")


def test_plan_tokens_equal_a_real_runs_token_columns(planned, customers, local_ray,
                                                     tmp_path: Path) -> None:
    out = tmp_path / "out"
    result = CliRunner().invoke(main, ["run", "text-industry", "--smoke", "--input",
                                       str(customers), "--output", str(out)])
    assert result.exit_code == 0, result.output
    written = pq.read_table(out).to_pylist()
    ran = [row for row in written if row["num_input_tokens"] is not None]
    (long_row,) = [row for row in written if str(row["Index"]) == LONG_ID]
    found = planned["prompt_tokens"]["input_tokens"]
    # The over-long row is an error row that names its length: the plan's longest.
    assert long_row["error"] == f"prompt is {found['max']} tokens, longer than max_model_len 256"
    assert len(ran) == ROWS - 1
    assert sum(row["num_input_tokens"] for row in ran) == found["total"] - found["max"]


def test_plan_tokens_text_shows_the_counted_figures(customers, local_ray) -> None:
    result = CliRunner().invoke(main, ["plan", "text-industry", "--smoke", "--input",
                                       str(customers), "--tokens"])
    assert result.exit_code == 0, result.output
    lines = {line.split(":", 1)[0].strip(): line for line in result.stdout.splitlines()}
    assert lines["Every row's prompt, counted"].startswith(
        f"Every row's prompt, counted: {ROWS} rows of {customers} in ")
    assert "measured: every row's prompt, tokenizer of sample:tiny-chat, as transformers " \
           "counts them" in lines["input tokens"]
    assert f"1 row: id {LONG_ID}" in lines["over the limit"]
    assert "derived: every counted row's max_tokens" in lines["output budget"]


def test_the_clusters_page_example_prints_what_it_shows(local_ray, tmp_path, monkeypatch):
    """docs/clusters.md's `plan --tokens` example, on this test's Ray (the docs test
    leaves the block to this test, to start no Ray of its own)."""
    import shlex

    from tests.docs.test_docs_commands import CHECKOUT, blocks, missing

    [example] = [block for block in blocks(CHECKOUT / "docs" / "clusters.md")
                 if block.reason and block.reason.endswith(
                     "::test_the_clusters_page_example_prints_what_it_shows")]
    monkeypatch.chdir(tmp_path)
    for command in example.commands():
        argv = shlex.split(command.text)
        assert argv[0] == "toolkit"
        result = CliRunner().invoke(main, argv[1:])
        assert result.exit_code == 0, result.output
        printed = [line.rstrip() for line in result.output.splitlines() if line.strip()]
        assert missing(command.shown, printed) == [], result.output


def test_check_tokens_refuses_a_run_with_a_row_over_max_model_len(customers, local_ray,
                                                                  tmp_path: Path) -> None:
    out = tmp_path / "out"
    result = CliRunner().invoke(main, ["run", "text-industry", "--smoke", "--input",
                                       str(customers), "--output", str(out), "--check-tokens"])
    assert result.exit_code == 2, result.output
    assert (f"Error: --check-tokens: 1 of {ROWS} rows of {customers} has a prompt longer than "
            "max_model_len 256 (engine.engine_kwargs.max_model_len) for sample:tiny-chat: "
            f"id {LONG_ID}; the longest is ") in result.output
    assert "Hint: Raise engine.engine_kwargs.max_model_len" in result.output
    assert not list(out.glob("*.parquet"))  # nothing ran


def test_the_counter_matches_the_tokenizer_on_tricky_text(tiny_chat_model: Path) -> None:
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(tiny_chat_model))
    conversations = [
        [{"role": "system", "content": "Classify."}, {"role": "user", "content": text}]
        for text in ("Acme Ltd", "  spaces  around ", "ünïcödé 🚀 text", "",
                     "looks special: <|eot|> inside", "tail<|start_header|>")
    ]
    for ray_llm_prompt in (False, True):
        counter = PromptTokenCounter(str(tiny_chat_model), ray_llm_prompt)
        for _ in range(2):  # the first batch checks itself; the second uses what it learnt
            expected = [len(tokenizer(tokenizer.apply_chat_template(
                c, add_generation_prompt=True, tokenize=False),
                add_special_tokens=ray_llm_prompt)["input_ids"]) for c in conversations]
            assert counter.count(conversations) == expected


def test_a_submitted_job_with_check_tokens_refuses_on_the_cluster(
        customers, local_ray, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from toolkit.cli import entrypoint
    from toolkit.cluster.render import prepare_submission
    from toolkit.spec.jobs.catalog import load_job
    from toolkit.spec.loading import load_job_spec

    job = load_job("text-industry")
    spec = load_job_spec(job, smoke=True, overrides={
        "data.input": str(customers), "data.output": str(tmp_path / "out")})
    request = prepare_submission(job, spec, target="ray", local=True, working_dir=tmp_path,
                                 check_tokens=True).request
    assert request.entrypoint.endswith(" --check-tokens")
    # What the cluster runs, in this process: the same refusal, before any engine starts.
    with pytest.raises(SystemExit) as exited:
        entrypoint.main(["--job", "text-industry", "--spec",
                         str(tmp_path / request.spec_path), "--check-tokens"])
    assert exited.value.code == 2
    captured = capsys.readouterr()
    said = " ".join((captured.out + captured.err).split())  # the job log's lines wrap
    assert "has a prompt longer than max_model_len 256" in said, said
    assert f"id {LONG_ID};" in said


def test_plan_tokens_without_the_models_tokenizer_says_what_it_needs(tmp_path: Path) -> None:
    model = tmp_path / "config-only"
    model.mkdir()
    (model / "config.json").write_text('{"model_type": "llama"}')
    result = CliRunner().invoke(main, ["plan", "text-industry", "--smoke", "--model",
                                       str(model), "--tokens"])
    assert result.exit_code == 2, result.output
    assert f"Error: --tokens: the tokenizer of engine.model {model} can't be loaded" \
        in result.output
    assert "Hint: Counting needs the model's tokenizer files (not its weights)" in result.output


def test_plan_tokens_counts_an_openai_batch_file_as_its_run_does(local_ray, tmp_path: Path) -> None:
    """A request file is staged as a run stages it (into a folder of the count's own):
    each line's own messages and max_tokens; a line that can't run is counted as refused."""
    requests = tmp_path / "requests.jsonl"
    lines = [{"custom_id": f"q{i}", "method": "POST", "url": "/v1/chat/completions",
              "body": {"model": "sample:tiny-chat", "max_tokens": 4 + i,
                       "messages": [{"role": "user", "content": "Say hello " * (i + 1)}]}}
             for i in range(6)]
    lines[2]["body"]["model"] = "gpt-4o-mini"  # not served: an error line, never counted
    requests.write_text("".join(json.dumps(line) + "\n" for line in lines), encoding="utf-8")
    staged_before = set(Path(tempfile.gettempdir()).glob("toolkit-tokens-*"))
    result = CliRunner().invoke(main, ["plan", "openai-batch", "--smoke", "--input",
                                       str(requests), "--tokens", "--format", "json"])
    assert result.exit_code == 0, result.output
    assert set(Path(tempfile.gettempdir()).glob("toolkit-tokens-*")) == staged_before  # gone
    found = json.loads(result.stdout)["prompt_tokens"]
    assert (found["rows"], found["rows_counted"]) == (6, 5)
    assert found["rejected_by_job"]["count"] == 1
    assert found["output_token_budget"] == sum(4 + i for i in (0, 1, 3, 4, 5))

    out = tmp_path / "out"
    ran = CliRunner().invoke(main, ["run", "openai-batch", "--smoke", "--input", str(requests),
                                    "--output", str(out)])
    assert ran.exit_code == 0, ran.output
    answers = [json.loads(line) for line in (out / "_batch_output.jsonl").read_text().splitlines()]
    usage = [answer["response"]["body"]["usage"]["prompt_tokens"] for answer in answers
             if answer["response"]["status_code"] == 200]
    assert len(usage) == 5 and sum(usage) == found["input_tokens"]["total"]
