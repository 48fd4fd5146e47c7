"""The batch-api engine against `toolkit serve` as the provider, a real server process
talked to through its HTTP API: a run answers every id once with the served model's
answers; a driver killed after its batches were made resumes without making more; a
batch that ended half done keeps its finished lines and only the rest go again."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest

# The serve tests' server, one for this module: a real `toolkit serve` process.
from tests.serve.conftest import API_KEY, Server, server, wait_for, write_requests  # noqa: F401
from toolkit.engines.batch_api.provider_stage import ProviderBatches
from toolkit.engines.batch_api.request_files import CHAT_COMPLETIONS_URL, request_line
from toolkit.spec.engine_settings import validate_engine

pytest.importorskip("fastapi", reason="toolkit serve needs the serve extra")
pytest.importorskip("openai", reason="the batch-api engine needs the openai client")

#: The variable the runs read the server's key from.
KEY_ENV = "BATCH_API_TEST_KEY"
ROWS = 20


def run_args(server: Server) -> list[str]:
    """20 requests as two provider batches of 10, made at once, polled every 0.5 s."""
    return ["toolkit", "run", "openai-batch", "--input", "requests.jsonl", "--smoke",
            "--engine", "batch-api", "--model", "gpt-4o-mini", "--concurrency", "2",
            "--output", "out", "--set", f"engine.base_url={server.base_url}",
            "--set", f"engine.api_key_env={KEY_ENV}", "--set", "engine.requests_per_file=10",
            "--set", "engine.poll_interval_s=0.5", "--set", "engine.max_poll_interval_s=2",
            "--set", "engine.num_cpus=0.25"]


ENV = {**os.environ, "RAY_ADDRESS": "", KEY_ENV: API_KEY}


def batch_ids(server: Server) -> set[str]:
    return {batch.id for batch in server.client().batches.list(limit=100)}


def served_answers(server: Server, batches: set[str]) -> dict[str, Any]:
    """Each custom_id's answer in the output files of ``batches``."""
    client, answers = server.client(), {}
    for batch_id in batches:
        batch = client.batches.retrieve(batch_id)
        for line in client.files.content(batch.output_file_id).text.splitlines():
            line = json.loads(line)
            answers[line["custom_id"]] = line["response"]["body"]["choices"][0]["message"]
    return answers


def assert_exact(out: Path, server: Server, new_batches: set[str]) -> None:
    """Every id written once, with the answer the server gave it."""
    ids = [f"req-{i}" for i in range(1, ROWS + 1)]
    written = pq.read_table(out, columns=["custom_id"])["custom_id"].to_pylist()
    assert sorted(written) == sorted(ids)
    lines = [json.loads(line) for line in (out / "_batch_output.jsonl").read_text().splitlines()]
    assert [line["custom_id"] for line in lines] == ids
    served = served_answers(server, new_batches)
    for line in lines:
        body = line["response"]["body"]
        assert line["response"]["status_code"] == 200, line
        assert body["choices"][0]["message"]["content"] == served[line["custom_id"]]["content"]
        assert body["usage"]["completion_tokens"] > 0
    assert not (out / "_engine_records").exists()  # a finished run keeps no records


def test_a_run_answers_every_id_once_with_the_served_models_answers(server):
    write_requests(Path("requests.jsonl"), ROWS)
    before = batch_ids(server)
    done = subprocess.run(run_args(server), capture_output=True, text=True, env=ENV,
                          timeout=500)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "Running openai-batch on batch-api with gpt-4o-mini" in done.stdout + done.stderr
    new = batch_ids(server) - before
    assert len(new) == 2
    assert_exact(Path("out"), server, new)
    assert API_KEY not in "".join(p.read_text(errors="replace")
                                  for p in Path("out").rglob("*") if p.is_file()
                                  and p.suffix != ".parquet")


def test_a_killed_driver_polls_its_batches_again_and_makes_none(server):
    write_requests(Path("requests.jsonl"), ROWS)
    before = batch_ids(server)
    records = Path("out/_engine_records/engine")
    first = subprocess.Popen(run_args(server), stdout=subprocess.DEVNULL,
                             stderr=subprocess.DEVNULL, env=ENV, start_new_session=True)
    try:
        deadline = time.monotonic() + 400
        while sum(bool(json.loads(p.read_text()).get("batch_id"))
                  for p in records.glob("*.json")) < 2:
            assert first.poll() is None and time.monotonic() < deadline
            time.sleep(0.3)
    finally:
        os.killpg(first.pid, signal.SIGKILL)
        first.wait(timeout=30)
    made = batch_ids(server) - before
    assert len(made) == 2 and not list(Path("out").glob("part-*"))

    rerun = subprocess.run(run_args(server), capture_output=True, text=True, env=ENV,
                           timeout=500)
    assert rerun.returncode == 0, rerun.stderr[-3000:]
    assert batch_ids(server) - before == made  # polled again, none made
    assert_exact(Path("out"), server, made)


class MemoryRecords:
    """The engine's records in memory (our own EngineRecords protocol)."""

    def __init__(self, records: dict[str, dict[str, Any]]) -> None:
        self.records = records

    def claim(self) -> None:
        pass

    def read_all(self) -> dict[str, dict[str, Any]]:
        return {name: dict(record) for name, record in self.records.items()}

    def write(self, name: str, content: dict[str, Any]) -> None:
        self.records[name] = dict(content)


def test_a_batch_that_expired_half_done_keeps_its_lines_and_sends_only_the_rest(
        server, monkeypatch):
    """The provider finished half the lines of a recorded batch before it expired
    (here: a batch of that half, recorded as expired); only the other half is sent."""
    monkeypatch.setenv(KEY_ENV, API_KEY)
    client = server.client()
    row = {"messages": [{"role": "user", "content": "Hi"}], "sampling_params": {"max_tokens": 3}}
    lines = {f"q-{i}": request_line(f"q-{i}", row, "gpt-4o-mini", None) for i in range(1, 7)}
    half = client.files.create(file=("half.jsonl", b"".join(list(lines.values())[:3])),
                               purpose="batch")
    expired = client.batches.create(input_file_id=half.id, endpoint=CHAT_COMPLETIONS_URL,
                                    completion_window="24h")
    wait_for(client, expired.id, lambda b: b.status == "completed")
    records = MemoryRecords({"first": {
        "file_id": half.id, "batch_id": expired.id, "endpoint": CHAT_COMPLETIONS_URL,
        "ids": list(lines), "created": 1.0, "spent": "expired"}})
    engine = validate_engine({"kind": "batch-api", "model": "gpt-4o-mini", "batch_size": 8,
                              "base_url": server.base_url, "api_key_env": KEY_ENV,
                              "poll_interval_s": 0.3, "max_poll_interval_s": 1})
    before = batch_ids(server)

    answers = ProviderBatches(engine, records).answer(lines)

    [resent] = batch_ids(server) - before
    assert client.batches.retrieve(resent).request_counts.total == 3
    [(name, record)] = [(n, r) for n, r in records.records.items() if n != "first"]
    assert (record["batch_id"], record["ids"]) == (resent, ["q-4", "q-5", "q-6"])
    served = {**served_answers(server, {expired.id}), **served_answers(server, {resent})}
    assert {custom_id: answer["generated_text"] for custom_id, answer in answers.items()} == {
        custom_id: served[custom_id]["content"] for custom_id in lines}
    assert all(answer["error"] is None and answer["num_generated_tokens"] > 0
               for answer in answers.values())


def test_rows_are_cut_into_files_within_the_providers_limits():
    from toolkit.engines.batch_api.request_files import split_files, too_large

    lines = [(f"r{i}", b"x" * 10) for i in range(7)]
    assert [len(f) for f in split_files(lines, max_lines=3, max_bytes=1000)] == [3, 3, 1]
    assert [len(f) for f in split_files(lines, max_lines=100, max_bytes=25)] == [2, 2, 2, 1]
    assert too_large(b"x" * 26, 25) == ("engine: the request is 26 bytes, more than a "
                                         "provider file may hold (engine.bytes_per_file 25)")


def test_error_lines_become_error_rows_with_the_providers_status_and_message():
    from toolkit.engines.batch_api.answers import line_answer, read_lines

    refused = line_answer({"custom_id": "a", "response": {"status_code": 404, "body": {
        "error": {"message": "The model `gpt-5` does not exist."}}}, "error": None})
    assert refused["error"] == "provider error 404: The model `gpt-5` does not exist."
    assert refused["generated_text"] is None
    failed = line_answer({"custom_id": "b", "response": None, "error": {
        "code": "server_error", "message": "The server had an error."}})
    assert failed["error"] == "provider error: The server had an error."
    # A line its batch expired before running is no answer: it goes again.
    expired = {"custom_id": "b", "response": None, "error": {
        "code": "batch_expired", "message": "This request could not be executed before "
                                            "the completion window expired."}}
    assert read_lines(json.dumps(expired) + "\n") == {}
    answered = line_answer({"custom_id": "c", "response": {"status_code": 200, "body": {
        "choices": [{"message": {"content": "Retail"}, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 9, "completion_tokens": 2}}}, "error": None})
    assert (answered["generated_text"], answered["num_input_tokens"],
            answered["num_generated_tokens"], answered["error"]) == ("Retail", 9, 2, None)
