"""`toolkit serve` through the official openai client, as users would talk to OpenAI."""

from __future__ import annotations

import json
from pathlib import Path

import openai
import pytest

from tests.serve.conftest import wait_for, write_requests

def request(custom_id: str, url: str = "/v1/chat/completions", **body) -> str:
    body = {"messages": [{"role": "user", "content": "Hi"}], **body}
    return json.dumps({"custom_id": custom_id, "method": "POST", "url": url, "body": body})


REFUSED = {5: request("req-5", model="gpt-5"), 17: request("req-17", n=2)}


def jsonl(text: str) -> list[dict]:
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def test_a_batch_runs_to_completed_with_output_and_error_files(server):
    client = server.client()
    requests = write_requests(Path("requests.jsonl"), 30, REFUSED)
    file = client.files.create(file=requests.open("rb"), purpose="batch")
    assert (file.object, file.purpose, file.filename) == ("file", "batch", "requests.jsonl")
    assert client.files.content(file.id).text == requests.read_text()

    batch = client.batches.create(input_file_id=file.id, endpoint="/v1/chat/completions",
                                  completion_window="24h", metadata={"team": "search"})
    assert batch.status == "validating" and batch.request_counts.total == 30
    assert batch.model == "gpt-4o-mini"
    assert batch.expires_at is None  # a batch here never expires: it runs to its end
    # Every request answered while the run still writes its files: a cancel now comes
    # too late to stop anything, so the batch completes with all its results.
    batch = wait_for(client, batch.id, lambda b: b.status != "validating" and (
        b.request_counts.completed + b.request_counts.failed == 30))
    try:
        assert client.batches.cancel(batch.id).status in ("cancelling", "completed")
    except openai.ConflictError:  # it had completed already
        pass
    batch = wait_for(client, batch.id, lambda b: b.status in ("completed", "failed",
                                                             "cancelled"))

    assert batch.status == "completed", batch.errors
    assert (batch.request_counts.total, batch.request_counts.completed,
            batch.request_counts.failed) == (30, 28, 2)
    assert batch.metadata == {"team": "search"}
    assert batch.in_progress_at and batch.finalizing_at and batch.completed_at
    output = {line["custom_id"]: line for line in jsonl(
        client.files.content(batch.output_file_id).text)}
    assert len(output) == 28
    for i in range(1, 31):
        if i in REFUSED:
            continue
        assert output[f"req-{i}"]["response"]["body"]["model"] == "gpt-4o-mini"
        tokens = output[f"req-{i}"]["response"]["body"]["usage"]["completion_tokens"]
        if i % 3 == 0:  # the line's own max_tokens: 1
            assert tokens == 1
        else:
            assert 1 <= tokens <= 4
    assert batch.usage.output_tokens == sum(
        line["response"]["body"]["usage"]["completion_tokens"] for line in output.values())
    errors = jsonl(client.files.content(batch.error_file_id).text)
    # As OpenAI's error files: the status, and the error as the API would have answered.
    assert [(e["custom_id"], e["response"]["status_code"], e["response"]["body"]["error"])
            for e in errors] == [
        ("req-5", 404, {"message": "line 5: The model `gpt-5` does not exist.",
                        "type": "invalid_request_error", "param": "model",
                        "code": "model_not_found"}),
        ("req-17", 400, {"message": "line 17: body.n 2: one answer per request only (n: 1)",
                         "type": "invalid_request_error", "param": "n",
                         "code": "invalid_request"})]
    assert len({e["id"] for e in errors}) == 2
    assert client.files.retrieve(batch.output_file_id).purpose == "batch_output"
    assert batch.id in [b.id for b in client.batches.list(limit=5)]


def test_a_wrong_key_is_refused(server):
    with pytest.raises(openai.AuthenticationError) as refused:
        server.client(api_key="wrong").batches.list()
    assert refused.value.status_code == 401
    assert refused.value.code == "invalid_api_key"


def test_bad_requests_get_openai_errors(server):
    client = server.client()
    with pytest.raises(openai.NotFoundError):
        client.batches.retrieve("batch_nope")
    with pytest.raises(openai.NotFoundError):
        client.files.content("file-nope")
    with pytest.raises(openai.BadRequestError) as wrong_purpose:
        client.files.create(file=("x.jsonl", b"{}\n"), purpose="fine-tune")
    assert wrong_purpose.value.param == "purpose"
    file = client.files.create(file=("x.jsonl", b"{}\n"), purpose="batch")
    with pytest.raises(openai.BadRequestError) as wrong_endpoint:
        client.batches.create(input_file_id=file.id, endpoint="/v1/moderations",
                              completion_window="24h")
    assert wrong_endpoint.value.param == "endpoint"
    empty = client.files.create(file=("empty.jsonl", b"\n"), purpose="batch")
    with pytest.raises(openai.BadRequestError) as no_requests:  # refused, as OpenAI does
        client.batches.create(input_file_id=empty.id, endpoint="/v1/chat/completions",
                              completion_window="24h")
    assert (no_requests.value.code, no_requests.value.param) == ("empty_file", "input_file_id")
    assert no_requests.value.message.endswith(
        f"File '{empty.id}' holds no requests (no non-blank line).")
    assert client.files.delete(file.id).deleted
    with pytest.raises(openai.NotFoundError):
        client.files.retrieve(file.id)


def test_batches_list_pages_newest_first(server):
    client = server.client()
    file = client.files.create(file=write_requests(Path("r.jsonl"), 1).open("rb"),
                               purpose="batch")
    made = [client.batches.create(input_file_id=file.id, endpoint="/v1/chat/completions",
                                  completion_window="24h").id for _ in range(3)]
    with pytest.raises(openai.ConflictError):  # the batches still need it
        client.files.delete(file.id)
    for batch_id in made[1:]:  # they needn't run for this test; the first may have started
        assert client.batches.cancel(batch_id).status == "cancelling"  # as OpenAI's, first
    client.batches.cancel(made[0])
    for batch_id in made[1:]:
        assert wait_for(client, batch_id, lambda b: b.status != "cancelling").status == \
            "cancelled"
    first = client.batches.list(limit=2)
    assert [b.id for b in first.data] == made[::-1][:2] and first.has_more
    second = client.batches.list(limit=2, after=first.data[-1].id)
    assert second.data[0].id == made[0]
    assert [b.id for b in client.batches.list(limit=3).data] == made[::-1]


def test_duplicate_custom_ids_fail_the_batch_naming_them(server):
    client = server.client()
    lines = [json.dumps({"custom_id": cid, "url": "/v1/chat/completions",
                         "body": {"messages": [{"role": "user", "content": "x"}]}})
             for cid in ["a", "b", "a"]]
    file = client.files.create(file=("dup.jsonl", "\n".join(lines).encode()), purpose="batch")
    batch = client.batches.create(input_file_id=file.id, endpoint="/v1/chat/completions",
                                  completion_window="24h")
    batch = wait_for(client, batch.id, lambda b: b.status in ("completed", "failed"))

    assert batch.status == "failed" and batch.failed_at
    assert batch.in_progress_at is None  # failed validating, as OpenAI's: it never ran
    [error] = batch.errors.data
    assert (error.code, error.line, error.param) == ("duplicate_custom_id", 3, "custom_id")
    assert error.message.startswith("Duplicate custom_id 'a': line 3 repeats line 1.")
    assert "Hint: Give every request its own custom_id" in error.message
    assert batch.output_file_id is None


def test_a_batch_none_of_whose_requests_can_run_completes_with_its_error_file_alone(server):
    client = server.client()
    file = client.files.create(file=("refused.jsonl", "\n".join([
        request("a", model="gpt-5"), request("b", url="/v1/embeddings")]).encode()),
        purpose="batch")
    batch = client.batches.create(input_file_id=file.id, endpoint="/v1/chat/completions",
                                  completion_window="24h")
    batch = wait_for(client, batch.id, lambda b: b.status in ("completed", "failed"))

    assert batch.status == "completed" and batch.in_progress_at is None  # no run started
    counts = batch.request_counts
    assert (counts.total, counts.completed, counts.failed) == (2, 0, 2)
    assert batch.output_file_id is None
    errors = jsonl(client.files.content(batch.error_file_id).text)
    assert [(e["custom_id"], e["response"]["status_code"]) for e in errors] == [
        ("a", 404), ("b", 400)]


def test_a_completions_batch_is_taken_and_its_lines_checked_as_completions(server):
    client = server.client()
    lines = [json.dumps({"custom_id": "other-model", "method": "POST", "url": "/v1/completions",
                         "body": {"model": "gpt-5", "prompt": "Once upon a time"}}),
             json.dumps({"custom_id": "echo", "method": "POST", "url": "/v1/completions",
                         "body": {"model": "gpt-4o-mini", "prompt": "Hi", "echo": True}}),
             request("chat")]
    file = client.files.create(file=("completions.jsonl", "\n".join(lines).encode()),
                               purpose="batch")
    batch = client.batches.create(input_file_id=file.id, endpoint="/v1/completions",
                                  completion_window="24h")
    assert batch.endpoint == "/v1/completions"
    batch = wait_for(client, batch.id, lambda b: b.status in ("completed", "failed"))

    assert batch.status == "completed" and batch.in_progress_at is None  # no line could run
    errors = jsonl(client.files.content(batch.error_file_id).text)
    assert [(e["custom_id"], e["response"]["status_code"]) for e in errors] == [
        ("other-model", 404), ("echo", 400), ("chat", 400)]
    assert "body.echo is not supported" in errors[1]["response"]["body"]["error"]["message"]
    assert "this run answers /v1/completions" in errors[2]["response"]["body"]["error"]["message"]


def test_an_embeddings_batch_is_answered_with_embeddings(server):
    from openai.types import CreateEmbeddingResponse

    client = server.client()
    lines = [json.dumps({"custom_id": f"e{i}", "method": "POST", "url": "/v1/embeddings",
                         "body": {"model": "gpt-4o-mini", "input": [f"text {i}"] * i}})
             for i in range(1, 4)]  # e3: three texts, three vectors
    lines.append(request("chat"))  # another endpoint: the batch's model can't answer it
    file = client.files.create(file=("embed.jsonl", "\n".join(lines).encode()),
                               purpose="batch")
    batch = client.batches.create(input_file_id=file.id, endpoint="/v1/embeddings",
                                  completion_window="24h")
    assert batch.endpoint == "/v1/embeddings" and batch.model == "gpt-4o-mini"
    batch = wait_for(client, batch.id, lambda b: b.status in ("completed", "failed"))

    assert batch.status == "completed", batch.errors
    output = jsonl(client.files.content(batch.output_file_id).text)
    assert [line["custom_id"] for line in output] == ["e1", "e2", "e3"]
    for i, line in enumerate(output, start=1):
        body = CreateEmbeddingResponse.model_validate(line["response"]["body"])
        assert body.object == "list" and len(body.data) == i
        assert {len(item.embedding) for item in body.data} == {64}
    assert (batch.request_counts.completed, batch.request_counts.failed) == (3, 1)
    [error] = jsonl(client.files.content(batch.error_file_id).text)
    assert error["custom_id"] == "chat" and error["response"]["status_code"] == 400
    assert "this run answers /v1/embeddings" in error["response"]["body"]["error"]["message"]


@pytest.mark.parametrize("metadata, code, message", [
    ({f"k{i}": "v" for i in range(17)}, "object_above_max_properties",
     "at most 16 properties, but got an object with 17"),
    ({"k" * 65: "v"}, "string_above_max_length", "maximum length 64, but got one with length 65"),
    ({"team": "v" * 513}, "string_above_max_length", "maximum length 512, but got a string"),
])
def test_metadata_beyond_openais_limits_is_refused(server, metadata, code, message):
    client = server.client()
    file = client.files.create(file=("m.jsonl", request("m").encode()), purpose="batch")
    with pytest.raises(openai.BadRequestError) as refused:
        client.batches.create(input_file_id=file.id, endpoint="/v1/chat/completions",
                              completion_window="24h", metadata=metadata)
    assert refused.value.status_code == 400 and refused.value.param == "metadata"
    assert refused.value.code == code and message in refused.value.message
    at_the_limits = {f"{i:02d}" + "k" * 62: "v" * 512 for i in range(16)}
    batch = client.batches.create(input_file_id=file.id, endpoint="/v1/chat/completions",
                                  completion_window="24h", metadata=at_the_limits)
    assert batch.metadata == at_the_limits
    client.batches.cancel(batch.id)


def test_a_batch_is_split_so_its_request_counts_move_as_requests_finish():
    from toolkit.serve.batch_runs import partitions

    assert [partitions(n) for n in (1, 16, 30, 60, 1500, 50_000)] == [1, 1, 2, 4, 10, 196]
