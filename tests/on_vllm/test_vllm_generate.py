"""Chat jobs on vLLM's CPU backend through Ray Data LLM, as users run them, and the same
answers as the transformers engine.

Each engine start costs about a minute here, so each run is shared by the tests that
read it (module-scoped fixtures).
"""

from __future__ import annotations

import json
import os
import random
import re
import string
import subprocess
from pathlib import Path

import pyarrow.csv as pacsv
import pyarrow.parquet as pq
import pytest
from vllm_cli import read_rows, succeeded, toolkit_run

from toolkit.samples.customers import customers_batch
from toolkit.samples.tiny_model import build_tiny_chat_model, tiny_chat_model_path
from toolkit.spec.jobs.catalog import load_job
from toolkit.spec.loading import load_job_spec

ROWS = 500
BLANK_COMPANIES = ("7", "42")  # ids read from a CSV are strings  # preprocess refuses these rows: they never reach an engine
#: This row's Company is a thousand characters, some 900 tokens: over text-industry's
#: max_model_len 256 (within its prompt cap of 256 x 8 characters), so each engine refuses it.
LONG_COMPANY = "17"
FAILED = (*BLANK_COMPANIES, LONG_COMPANY)


@pytest.fixture(scope="module")
def workdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("vllm-generate")


@pytest.fixture(scope="module")
def untuned_model(workdir: Path) -> Path:
    """A random-weight Llama nobody looked at before: another seed than the sample's."""
    return build_tiny_chat_model(workdir / "model-seed-2027", seed=2027)


@pytest.fixture(scope="module")
def rows_csv(workdir: Path) -> Path:
    table = customers_batch(0, ROWS, seed=5)
    companies = table.column("Company").to_pylist()
    ids = table.column("Index").to_pylist()
    for i, row_id in enumerate(ids):
        if str(row_id) in BLANK_COMPANIES:
            companies[i] = ""
        if str(row_id) == LONG_COMPANY:
            rng = random.Random(0)
            companies[i] = " ".join("".join(rng.choices(string.ascii_lowercase, k=7))
                                    for _ in range(125))
    table = table.set_column(table.schema.get_field_index("Company"), "Company",
                             [companies])
    path = workdir / "rows.csv"
    pacsv.write_csv(table, path)
    return path


def run_text_industry(engine: str, model: Path, rows: Path, out: Path) -> dict:
    succeeded(toolkit_run("text-industry", "--engine", engine, "--accelerator", "none",
                          "--concurrency", "1", "--model", str(model), "--input", str(rows),
                          "--output", str(out)))
    return read_rows(out, "Index")


@pytest.fixture(scope="module")
def on_vllm(workdir: Path, untuned_model: Path, rows_csv: Path) -> dict:
    return run_text_industry("vllm", untuned_model, rows_csv, workdir / "vllm")


@pytest.fixture(scope="module")
def on_transformers(workdir: Path, untuned_model: Path, rows_csv: Path) -> dict:
    return run_text_industry("transformers", untuned_model, rows_csv, workdir / "transformers")


def test_text_industry_on_vllm_answers_every_row_with_one_of_the_choices(on_vllm):
    choices = set(load_job_spec(load_job("text-industry")).output.choice)
    answered = [row for row in on_vllm.values() if row["error"] is None]
    assert len(on_vllm) == ROWS and len(answered) == ROWS - len(FAILED)
    assert {row["inferred_industry"] for row in answered} <= choices
    assert all(row["num_input_tokens"] > 0 and row["num_generated_tokens"] > 0
               for row in answered)


def test_rows_failed_in_preprocess_never_reach_vllm(on_vllm, workdir):
    for row_id in BLANK_COMPANIES:
        row = on_vllm[row_id]
        assert row["error"] == "preprocess: column 'Company' is empty"
        assert row["inferred_industry"] is None
        assert row["num_input_tokens"] is None and row["num_generated_tokens"] is None
    summary = json.loads((workdir / "vllm" / "_summary.json").read_text())
    assert summary["error_rows"] == len(FAILED)
    assert summary["input_tokens"] == sum(r["num_input_tokens"] or 0 for r in on_vllm.values())
    assert summary["output_tokens"] == sum(r["num_generated_tokens"] or 0
                                           for r in on_vllm.values())


def test_vllm_and_transformers_give_the_same_greedy_answers(on_vllm, on_transformers):
    answered = [i for i, row in on_vllm.items() if row["error"] is None]
    same = [i for i in answered
            if on_vllm[i]["inferred_industry"] == on_transformers[i]["inferred_industry"]]
    agreement = len(same) / len(answered)
    print(f"\nvLLM vs transformers, {len(answered)} text-industry rows at temperature 0: "
          f"{len(same)} same answers ({agreement:.1%})")
    assert agreement >= 0.98
    for i in answered:  # the prompt is the same on both engines
        assert on_vllm[i]["num_input_tokens"] == on_transformers[i]["num_input_tokens"]
    for i in same:
        assert on_vllm[i]["num_generated_tokens"] == on_transformers[i]["num_generated_tokens"]
        # Both engines score the answer under the choice constraint's mask.
        assert on_vllm[i]["inferred_industry_confidence"] == pytest.approx(
            on_transformers[i]["inferred_industry_confidence"], abs=0.02)


def test_vllm_rows_say_why_they_ended_and_pass_the_checks(on_vllm, workdir):
    answered = [row for row in on_vllm.values() if row["error"] is None]
    assert {row["finish_reason"] for row in answered} == {"stop"}
    assert all(row["failed_checks"] is None for row in answered)
    assert all(0 < row["inferred_industry_confidence"] <= 1 for row in answered)
    summary = json.loads((workdir / "vllm" / "_summary.json").read_text())
    assert summary["finish_reasons"] == {"stop": ROWS - len(FAILED), "error": len(FAILED)}


def test_a_prompt_over_max_model_len_is_one_error_row_in_the_same_words_on_both_engines(
        on_vllm, on_transformers):
    row = on_vllm[LONG_COMPANY]
    length = re.fullmatch(r"prompt is (\d+) tokens, longer than max_model_len 256", row["error"])
    assert length and int(length.group(1)) > 800, row["error"]
    assert row["inferred_industry"] is None
    assert on_transformers[LONG_COMPANY]["error"] == row["error"]


def test_plan_tokens_counts_every_prompt_as_vllm_did_and_names_the_long_row(
        on_vllm, untuned_model, rows_csv):
    planned = subprocess.run(
        ["toolkit", "plan", "text-industry", "--engine", "vllm", "--accelerator", "none",
         "--model", str(untuned_model), "--input", str(rows_csv), "--tokens", "--format",
         "json"], capture_output=True, text=True, timeout=300,
        env={**os.environ, "RAY_ADDRESS": ""})
    assert planned.returncode == 0, planned.stderr[-3000:]
    found = json.loads(planned.stdout)["prompt_tokens"]

    assert found["over_max_model_len"]["ids"] == [LONG_COMPANY]
    long_row = re.search(r"prompt is (\d+) tokens", on_vllm[LONG_COMPANY]["error"])
    assert found["input_tokens"]["max"] == int(long_row.group(1))
    ran = sum(row["num_input_tokens"] or 0 for row in on_vllm.values())
    assert found["input_tokens"]["total"] - found["input_tokens"]["max"] == ran


def test_date_reformat_answers_match_the_pattern_vllm_was_given(tmp_path):
    out = tmp_path / "dates"
    succeeded(toolkit_run("date-reformat", "--smoke", "--rows", "60", "--engine", "vllm",
                          "--accelerator", "none", "--output", str(out)))
    rows = read_rows(out, "Index")
    options = load_job("date-reformat").options_of(load_job_spec(load_job("date-reformat")))
    pattern = re.compile(options.answer_regex)
    answered = [row for row in rows.values() if row["error"] is None]
    assert len(rows) == 60 and len(answered) == 60
    assert all(pattern.fullmatch(row["resp"]) for row in answered), answered[:3]


def test_openai_batch_lines_bring_their_own_params_to_vllm(tmp_path):
    """Per-line max_tokens and temperature, a JSON schema enforced while generating, and
    a required tool call answered as one."""
    schema = {"type": "object", "properties": {"city": {"type": "string", "maxLength": 8}},
              "required": ["city"], "additionalProperties": False}
    lines = []
    for i in range(1, 13):
        body: dict = {"model": "any", "max_tokens": 1 if i in (1, 5) else 3, "messages": [
            {"role": "user", "content": f"Name a city, {i}."}]}
        if i % 3 == 0:
            body.update(temperature=0.9, seed=i)
        if i % 4 == 0:
            body.update(max_tokens=40, response_format={
                "type": "json_schema", "json_schema": {"name": "city", "schema": schema}})
        lines.append({"custom_id": f"req-{i}", "method": "POST",
                      "url": "/v1/chat/completions", "body": body})
    weather = {"type": "function", "function": {"name": "get_weather", "parameters": {
        "type": "object", "properties": {"city": {"type": "string"},
                                         "unit": {"enum": ["celsius", "fahrenheit"]}},
        "required": ["city", "unit"]}}}
    tool_line = {"custom_id": "tool-1", "method": "POST", "url": "/v1/chat/completions",
                 "body": {"model": "any", "max_tokens": 64, "tools": [weather],
                          "tool_choice": "required",
                          "messages": [{"role": "user", "content": "Weather in Oslo?"}]}}
    # More tokens than the model's context holds: answered up to max_model_len, as
    # vLLM caps it (its KV cache holds one whole request, or it would not start).
    beyond = {"custom_id": "beyond", "method": "POST", "url": "/v1/chat/completions",
              "body": {"model": "any", "max_tokens": 100_000,
                       "messages": [{"role": "user", "content": "Tell me everything."}]}}
    requests = tmp_path / "requests.jsonl"
    requests.write_text("".join(json.dumps(line) + "\n" for line in [*lines, tool_line, beyond]))
    out = tmp_path / "batch"
    succeeded(toolkit_run("openai-batch", "--smoke", "--engine", "vllm", "--accelerator",
                          "none", "--input", str(requests), "--output", str(out),
                          "--served-model-name", "any"))

    answers = {}
    for text in (out / "_batch_output.jsonl").read_text().splitlines():
        line = json.loads(text)
        answers[line["custom_id"]] = line
    assert len(answers) == 14
    capped = answers.pop("beyond")["response"]
    assert capped["status_code"] == 200, capped
    context = json.loads((tiny_chat_model_path() / "config.json").read_text())
    assert capped["body"]["usage"]["total_tokens"] <= context["max_position_embeddings"]
    # A required tool call: vLLM's structured output holds it to the function's schema.
    [choice] = answers.pop("tool-1")["response"]["body"]["choices"]
    assert choice["finish_reason"] == "tool_calls"
    [call] = choice["message"]["tool_calls"]
    assert call["function"]["name"] == "get_weather"
    assert set(json.loads(call["function"]["arguments"])) >= {"city", "unit"}
    for request in lines:
        answer = answers[request["custom_id"]]
        assert answer["error"] is None, answer
        body = answer["response"]["body"]
        assert body["usage"]["completion_tokens"] <= request["body"]["max_tokens"]
        if "response_format" in request["body"]:
            content = json.loads(body["choices"][0]["message"]["content"])
            assert set(content) == {"city"} and isinstance(content["city"], str)
    for custom_id in ("req-1", "req-5"):  # max_tokens 1: one token, cut off there
        body = answers[custom_id]["response"]["body"]
        assert body["usage"]["completion_tokens"] == 1
        assert body["choices"][0]["finish_reason"] == "length"
    assert pq.read_table(out).num_rows == 14


def test_a_completions_file_is_answered_alike_by_vllm_and_transformers(tmp_path):
    """/v1/completions: each prompt goes to the model as written (Ray Data LLM's chat
    template stage off), and greedy answers and prompt tokens are the transformers
    engine's."""
    prompts = ["Once upon a time", "The capital of France is", "def fibonacci(n):"]
    requests = tmp_path / "completions.jsonl"
    requests.write_text("".join(json.dumps({
        "custom_id": f"c-{i}", "method": "POST", "url": "/v1/completions",
        "body": {"model": "any", "prompt": prompt, "max_tokens": 6, "temperature": 0}}) + "\n"
        for i, prompt in enumerate(prompts)) + json.dumps({
            "custom_id": "two", "method": "POST", "url": "/v1/completions",
            "body": {"model": "any", "prompt": prompts[:2], "max_tokens": 6,
                     "temperature": 0}}) + "\n")
    bodies = {}
    for engine in ("vllm", "transformers"):
        out = tmp_path / engine
        succeeded(toolkit_run("openai-batch", "--smoke", "--engine", engine, "--accelerator",
                              "none", "--input", str(requests), "--output", str(out),
                              "--served-model-name", "any"))
        bodies[engine] = {line["custom_id"]: line["response"]["body"] for line in map(
            json.loads, (out / "_batch_output.jsonl").read_text().splitlines())}
    assert bodies["vllm"].keys() == {"c-0", "c-1", "c-2", "two"}
    for custom_id, body in bodies["vllm"].items():
        alike = bodies["transformers"][custom_id]
        assert body["object"] == "text_completion"
        assert [c["text"] for c in body["choices"]] == [c["text"] for c in alike["choices"]]
        assert body["usage"] == alike["usage"]
    assert [c["text"] for c in bodies["vllm"]["two"]["choices"]] == [
        bodies["vllm"][f"c-{i}"]["choices"][0]["text"] for i in range(2)]
