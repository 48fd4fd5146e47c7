"""openai-batch: an OpenAI Batch API request file in, the Batch API output file out.

Runs `toolkit run` as users do; the output file is read back with a plain JSON
reader and checked against the Batch API's documented output shape. The http
engine runs against a real OpenAI-compatible server (`transformers serve` of the
tiny model) on localhost.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from toolkit.run.driver import run_pipeline
from toolkit.samples.provider import SAMPLES
from toolkit.spec.jobs.catalog import load_job
from toolkit.spec.loading import load_job_spec


def write_requests(path: Path, count: int, malformed: dict[int, str] | None = None,
                   max_tokens: int = 6) -> list[str]:
    """A request file of ``count`` lines; ``malformed`` replaces lines (1-based) by text.
    Returns the custom_ids of the well-formed lines."""
    lines, ids = [], []
    for i in range(1, count + 1):
        if malformed and i in malformed:
            lines.append(malformed[i])
            continue
        body = {"model": "gpt-4o-mini", "max_tokens": max_tokens, "messages": [
            {"role": "system", "content": "Answer briefly."},
            {"role": "user", "content": f"What is {i} plus {i}?"}]}
        if i % 4 == 0:
            body.update(temperature=0.8, seed=i)
        lines.append(json.dumps({"custom_id": f"req-{i}", "method": "POST",
                                 "url": "/v1/chat/completions", "body": body}))
        ids.append(f"req-{i}")
    path.write_text("\n".join(lines) + "\n")
    return ids


def toolkit(*args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run(["toolkit", "run", "openai-batch", *args], capture_output=True,
                          text=True, timeout=timeout, env={**os.environ, "RAY_ADDRESS": ""})


#: The files here ask for gpt-4o-mini, which the tiny model answers as.
SERVED = ("--served-model-name", "gpt-4o-mini")


def read_batch_output(out: Path) -> list[dict]:
    with open(out / "_batch_output.jsonl", encoding="utf-8") as lines:
        return [json.loads(line) for line in lines]


def assert_answered(line: dict) -> None:
    """The Batch API's output shape for a request that succeeded."""
    assert line["error"] is None and line["id"].startswith("batch_req_")
    assert line["response"]["status_code"] == 200
    body = line["response"]["body"]
    assert body["object"] == "chat.completion"
    [choice] = body["choices"]
    assert isinstance(choice["message"]["content"], str)
    assert choice["message"]["role"] == "assistant"
    assert choice["finish_reason"] in ("stop", "length")
    usage = body["usage"]
    assert usage["prompt_tokens"] > 0 and usage["completion_tokens"] > 0
    assert usage["total_tokens"] == usage["prompt_tokens"] + usage["completion_tokens"]


def test_each_request_brings_its_own_sampling_params_over_the_specs():
    from toolkit.run.input.openai_batch import parse_request_line
    from toolkit.run.row_steps import engine_sampling_params, prepare_row

    job = load_job("openai-batch")
    spec = load_job_spec(job, smoke=True, overrides={"data.input": "requests.jsonl"})
    spec_params = engine_sampling_params(spec.sampling, None)
    row = parse_request_line(json.dumps({
        "custom_id": "a", "url": "/v1/chat/completions", "body": {
            "messages": [{"role": "user", "content": "Hi"}], "max_completion_tokens": 5,
            "response_format": {"type": "json_object"}}}), line=1)
    prepared = prepare_row(row, job.main_stage.preprocess, job.options_of(spec), spec_params)
    assert prepared["error"] is None and prepared["messages"] == [
        {"role": "user", "content": "Hi"}]
    params = dict(prepared["sampling_params"])
    assert isinstance(params.pop("seed"), int)  # unseeded: a fresh random seed, never null
    assert params == {
        "temperature": 0.0, "top_p": 1.0,  # the spec's: the body doesn't say
        "max_tokens": 5, "structured_outputs": {"json": '{"type": "object"}'}}

    bad = prepare_row(parse_request_line(json.dumps({
        "custom_id": "b", "url": "/v1/chat/completions",
        "body": {"messages": [{"role": "user", "content": "Hi"}], "n": 2}}), line=2),
        job.main_stage.preprocess, job.options_of(spec), spec_params)
    assert bad["error"] == "preprocess: line 2: body.n 2: one answer per request only (n: 1)"
    assert bad["__inference_error__"] == bad["error"]


def request(custom_id: str, url: str = "/v1/chat/completions", **body) -> str:
    body = {"model": "gpt-4o-mini", "messages": [{"role": "user", "content": "Hi"}], **body}
    return json.dumps({"custom_id": custom_id, "method": "POST", "url": url, "body": body})


REFUSED = {3: request("req-3", url="/v1/embeddings"), 5: request("req-5", model="gpt-5"),
           7: request("req-7", temperature=5)}


def test_a_batch_file_in_gives_the_batch_api_output_file_out():
    write_requests(Path("requests.jsonl"), 12, {
        **REFUSED, 9: request("req-9", model="tiny", max_tokens=3)})
    done = toolkit("--input", "requests.jsonl", "--smoke", "--output", "out",
                   "--served-model-name", "gpt-4o-mini", "--served-model-name", "tiny")
    assert done.returncode == 0, done.stderr[-3000:]
    assert "Batch API output: out/_batch_output.jsonl (12 lines" in done.stdout

    lines = read_batch_output(Path("out"))
    assert [line["custom_id"] for line in lines] == [f"req-{i}" for i in range(1, 13)]
    failed = {line["custom_id"]: (line["response"]["status_code"],
                                  line["response"]["body"]["error"]) for line in lines
              if line["error"]}
    assert failed == {
        "req-3": (400, {"message": "line 3: url '/v1/embeddings' needs a model for "
                                   "engine.task embed; this run answers /v1/chat/completions "
                                   "(engine.task generate) with one model. Run the "
                                   "/v1/embeddings lines as a file (or batch) of their own",
                        "type": "invalid_request_error", "param": "url",
                        "code": "invalid_request"}),
        "req-5": (404, {"message": "line 5: The model `gpt-5` does not exist.",
                        "type": "invalid_request_error", "param": "model",
                        "code": "model_not_found"}),
        "req-7": (400, {"message": "line 7: body.temperature must be between 0 and 2, not 5",
                        "type": "invalid_request_error", "param": "temperature",
                        "code": "invalid_request"})}
    for line in lines:
        if line["error"]:  # vLLM's error field, beside OpenAI's response body
            assert line["error"]["message"] == "preprocess: " + \
                line["response"]["body"]["error"]["message"]
            continue
        assert_answered(line)
        assert line["response"]["body"]["usage"]["completion_tokens"] <= 6
        # The answer's model is the served name its line asked for.
        assert line["response"]["body"]["model"] == (
            "tiny" if line["custom_id"] == "req-9" else "gpt-4o-mini")
    # The Batch API file sits beside the results without getting in a Parquet reader's way.
    assert pq.read_table("out").num_rows == 12


def test_served_model_names_are_the_jobs_option_and_no_other_jobs():
    shown = subprocess.run(["toolkit", "show", "openai-batch", "--served-model-name", "a",
                            "--served-model-name", "b"], capture_output=True, text=True)
    assert "options:\n  served_model_names:\n  - a\n  - b\n" in shown.stdout
    other = subprocess.run(["toolkit", "show", "text-industry", "--served-model-name", "a"],
                           capture_output=True, text=True)
    assert other.returncode == 2
    assert other.stderr.startswith("Error: --served-model-name names the model for the lines "
                                   "of an OpenAI batch file; job 'text-industry' reads none")


def test_a_completions_file_turns_the_chat_template_off_and_a_spec_that_keeps_it_is_refused():
    Path("completions.jsonl").write_text(json.dumps({
        "custom_id": "c", "method": "POST", "url": "/v1/completions",
        "body": {"model": "gpt-4o-mini", "prompt": "Once upon a time"}}) + "\n")
    shown = subprocess.run(["toolkit", "show", "openai-batch", "--input", "completions.jsonl"],
                           capture_output=True, text=True)
    assert "  endpoint: /v1/completions\n" in shown.stdout
    assert "  apply_chat_template: false\n" in shown.stdout
    kept = subprocess.run(["toolkit", "show", "openai-batch", "--input", "completions.jsonl",
                           "--set", "engine.apply_chat_template=true"],
                          capture_output=True, text=True)
    assert kept.returncode == 2
    assert "options.endpoint /v1/completions sends each prompt as written: set " \
        "engine.apply_chat_template false, or leave it out" in kept.stderr


def test_lines_that_are_no_request_with_a_custom_id_refuse_the_file_naming_them():
    write_requests(Path("requests.jsonl"), 8, {
        3: '{"custom_id": "req-3", "method": "POST", "url": ',  # cut short
        7: json.dumps({"method": "POST", "url": "/v1/chat/completions",
                       "body": {"messages": [{"role": "user", "content": "Hi"}]}})})
    done = toolkit("--input", "requests.jsonl", "--smoke", "--output", "out", *SERVED,
                   timeout=60)
    assert done.returncode == 2
    assert ("Error: data.input: requests.jsonl has 2 line(s) that are not a request with a "
            "custom_id: line 3: not valid JSON (Expecting value at column 49); line 7: no "
            "custom_id; every request needs a unique custom_id string. Each line must be a "
            "JSON object with a unique custom_id string") in done.stderr
    assert not Path("out/_input").exists() and not list(Path("out").glob("part-*"))


def test_an_empty_file_is_refused_in_one_paragraph():
    Path("requests.jsonl").write_text("\n\n")
    done = toolkit("--input", "requests.jsonl", "--smoke", "--output", "out", timeout=60)
    assert done.returncode == 2
    assert done.stderr.splitlines()[-2:] == [
        "Error: data.input: requests.jsonl holds no requests (no non-blank line).",
        "Hint: Point --input at an OpenAI Batch API request file (JSONL), one request a line."]


def test_a_file_none_of_whose_requests_can_run_is_answered_without_starting_ray():
    """Without --served-model-name the model is served as --model names it, so lines
    asking for gpt-4o-mini are answered 404, as vLLM answers them."""
    write_requests(Path("requests.jsonl"), 3, {2: request("req-2", url="/v1/embeddings")})
    done = toolkit("--input", "requests.jsonl", "--smoke", "--output", "out", timeout=60)
    assert done.returncode == 2
    assert ("Error: data.input: none of the 3 requests in requests.jsonl can run as given, so "
            "no model was loaded; out/_batch_output.jsonl has each one's error line (the "
            "first: line 1: The model `gpt-4o-mini` does not exist.).") in done.stderr
    lines = read_batch_output(Path("out"))
    assert [(line["custom_id"], line["response"]["status_code"]) for line in lines] == [
        ("req-1", 404), ("req-2", 400), ("req-3", 404)]
    assert not Path("out/_logs/run.log").exists()  # Ray's output goes there once it starts


def test_duplicate_custom_ids_are_refused_up_front_naming_them():
    Path("requests.jsonl").write_text("\n".join(
        json.dumps({"custom_id": cid, "url": "/v1/chat/completions",
                    "body": {"messages": [{"role": "user", "content": "x"}]}})
        for cid in ["a", "b", "a", "c", "b", "a"]) + "\n")
    done = toolkit("--input", "requests.jsonl", "--smoke", "--output", "out", timeout=60)
    assert done.returncode == 2
    assert (
        "Error: data.input: requests.jsonl has 2 duplicate custom_id(s): 'a' on lines 1, 3, 6; "
        "'b' on lines 2, 5. Results are keyed on custom_id, so each must be unique.\n"
        "Hint: Give every request its own custom_id, then run again.") in done.stderr
    assert not Path("out/_input").exists()  # nothing half-staged is left behind


def part_ids(out: Path, finished_files_only: bool = False) -> list[str]:
    """The custom_ids in the result files. While a run writes (or after it was killed),
    ``finished_files_only`` passes over a file that has no Parquet footer yet."""
    ids = []
    for part in sorted(out.glob("part-*.parquet")):
        try:
            table = pq.read_table(part, columns=["custom_id"])
        except pa.ArrowInvalid:
            if not finished_files_only:
                raise
            continue
        ids += table["custom_id"].to_pylist()
    return ids


def test_a_killed_driver_resumes_by_custom_id_without_duplicates():
    # Blocks of 10 requests land one by one; the kill comes after the first, with
    # eleven to go (on a busy machine blocks can land in bursts).
    rows = 120
    ids = write_requests(Path("requests.jsonl"), rows, max_tokens=8)
    args = ["toolkit", "run", "openai-batch", "--input", "requests.jsonl", "--smoke",
            "--output", "out", "--partitions", "12", "--batch-size", "10", *SERVED]
    env = {**os.environ, "RAY_ADDRESS": ""}
    first = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                             env=env, start_new_session=True)
    try:
        deadline = time.monotonic() + 240
        while len(part_ids(Path("out"), finished_files_only=True)) < 10:
            assert first.poll() is None and time.monotonic() < deadline
            time.sleep(0.3)
    finally:
        os.killpg(first.pid, signal.SIGKILL)
        first.wait(timeout=30)
    assert 0 < len(part_ids(Path("out"), finished_files_only=True)) < rows

    rerun = subprocess.run(args, capture_output=True, text=True, env=env, timeout=300)
    assert rerun.returncode == 0, rerun.stderr[-3000:]
    assert "Resumed:" in rerun.stdout
    written = part_ids(Path("out"))
    assert sorted(written) == sorted(ids)  # every request once: no duplicates, none lost
    assert [line["custom_id"] for line in read_batch_output(Path("out"))] == ids


# -- the http engine against a real OpenAI-compatible server ---------------------------

def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture(scope="module")
def served_tiny_model(tiny_chat_model: Path, tmp_path_factory) -> Iterator[str]:
    """`transformers serve` of the tiny chat model on a free local port: its /v1 URL."""
    pytest.importorskip("fastapi", reason="transformers serve needs the test extra")
    command = shutil.which("transformers") or str(Path(sys.executable).parent / "transformers")
    port = _free_port()
    home = tmp_path_factory.mktemp("hf-home")
    server = subprocess.Popen(
        [command, "serve", str(tiny_chat_model), "--host", "127.0.0.1", "--port", str(port),
         "--device", "cpu"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
        env={**os.environ, "HF_HUB_OFFLINE": "1", "HF_HOME": str(home)},
    )
    try:
        deadline = time.monotonic() + 120
        while True:
            assert server.poll() is None, "transformers serve exited"
            assert time.monotonic() < deadline, "transformers serve did not come up"
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2).close()
                break
            except OSError:
                time.sleep(0.5)
        yield f"http://127.0.0.1:{port}/v1"
    finally:
        os.killpg(server.pid, signal.SIGTERM)
        try:
            server.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(server.pid, signal.SIGKILL)
            server.wait(timeout=10)


def test_the_same_batch_file_runs_on_a_served_model_over_http(served_tiny_model):
    ids = write_requests(Path("requests.jsonl"), 10, {5: request("req-5", n=3)})
    done = toolkit("--input", "requests.jsonl", "--smoke", "--engine", "http",
                   "--set", f"engine.base_url={served_tiny_model}", "--output", "out", *SERVED)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "Running openai-batch on http with sample:tiny-chat" in done.stdout + done.stderr
    lines = read_batch_output(Path("out"))
    assert [line["custom_id"] for line in lines] == [*ids[:4], "req-5", *ids[4:]]
    for line in lines:
        if line["custom_id"] == "req-5":
            assert line["response"]["status_code"] == 400
            assert line["error"]["message"].startswith("preprocess: line 5: body.n 3")
        else:
            assert_answered(line)


def test_a_completions_file_runs_on_a_served_model_over_http(served_tiny_model):
    prompts = ["Once upon a time", "The capital of France is", "2 + 2 ="]
    Path("completions.jsonl").write_text("".join(json.dumps({
        "custom_id": f"c-{i}", "method": "POST", "url": "/v1/completions",
        "body": {"model": "gpt-4o-mini", "prompt": prompt, "max_tokens": 4}}) + "\n"
        for i, prompt in enumerate(prompts)))
    done = toolkit("--input", "completions.jsonl", "--smoke", "--engine", "http",
                   "--set", f"engine.base_url={served_tiny_model}", "--output", "out-c", *SERVED)
    assert done.returncode == 0, done.stderr[-3000:]
    lines = read_batch_output(Path("out-c"))
    assert [line["custom_id"] for line in lines] == ["c-0", "c-1", "c-2"]
    for line in lines:
        assert line["response"]["status_code"] == 200, line["response"]
        body = line["response"]["body"]
        assert body["object"] == "text_completion" and body["model"] == "gpt-4o-mini"
        [choice] = body["choices"]
        assert isinstance(choice["text"], str) and body["usage"]["prompt_tokens"] > 0


def test_text_industry_runs_over_http_and_checks_the_answers(local_ray, served_tiny_model):
    """transformers serve takes no output constraint, so with structured_outputs_via=none
    the answers are only checked: every row reached the server (its tokens are
    counted) and each is answered or an error row saying why."""
    job = load_job("text-industry")
    spec = load_job_spec(job, smoke=True, overrides={
        "data.rows": 20, "data.output": "out", "engine.kind": "http"}, sets=[
        f"engine.base_url={served_tiny_model}", "engine.structured_outputs_via=none",
        "sampling.max_tokens=3"])
    summary = run_pipeline(job, spec, samples=SAMPLES)
    assert summary.rows_written == 20 and summary.input_tokens > 0
    written = pq.read_table("out").to_pylist()
    assert sorted(int(row["Index"]) for row in written) == list(range(1, 21))
    for row in written:
        assert row["num_input_tokens"] > 0 and row["num_generated_tokens"] > 0
        # A server that doesn't enforce the choices: an answer off the list, or one
        # cut off at max_tokens (said as such).
        assert row["error"] is None or "not one of the choices" in row["error"] \
            or row["error"].startswith("truncated: the answer was cut off at max_tokens=")


def test_an_unreachable_server_stops_the_run_before_any_row_is_read():
    write_requests(Path("requests.jsonl"), 3)
    port = _free_port()  # nothing listens there
    done = toolkit("--input", "requests.jsonl", "--smoke", "--engine", "http",
                   "--set", f"engine.base_url=http://127.0.0.1:{port}/v1", "--output", "out",
                   *SERVED, timeout=60)
    assert done.returncode == 3
    assert (f"Error: engine.base_url: can't reach the OpenAI-compatible server at "
            f"http://127.0.0.1:{port}/v1") in done.stderr
    assert "no row was read" in done.stderr
    assert not list(Path("out").glob("part-*")) and not Path("out/_input").exists()
