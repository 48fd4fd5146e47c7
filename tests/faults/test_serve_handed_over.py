"""`toolkit serve` handed hostile requests: each case is a request a probe sent to a real
server, sent the same way (raw HTTP where a client would tidy the path up, else the
official openai client), with what the server must answer: an OpenAI-style JSON
error with a 4xx naming the parameter, never a 500, never a path on the server, and
never a file removed that the server doesn't list."""

from __future__ import annotations

import http.client
import json
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import openai
import pytest

from tests.serve.conftest import API_KEY, Server, server, wait_for  # noqa: F401 (the fixture)

CHAT = "/v1/chat/completions"
MiB = 1024 * 1024




def request_line(custom_id: str, content: str = "Hi") -> str:
    return json.dumps({"custom_id": custom_id, "method": "POST", "url": CHAT,
                       "body": {"max_tokens": 2,
                                "messages": [{"role": "user", "content": content}]}})


def upload(server: Server, lines: list[str], name: str = "requests.jsonl"):
    return server.client().files.create(file=(name, ("\n".join(lines) + "\n").encode()),
                                        purpose="batch")


def raw(server: Server, method: str, path: str, body: bytes | None = None,
        headers: dict[str, str] | None = None) -> tuple[int, str, dict]:
    """The path exactly as given (an HTTP client would resolve "..")."""
    connection = http.client.HTTPConnection("127.0.0.1", server.port, timeout=30)
    try:
        connection.request(method, path, body=body, headers={
            "Authorization": f"Bearer {API_KEY}", **(headers or {})})
        response = connection.getresponse()
        return response.status, response.getheader("content-type", ""), \
            json.loads(response.read() or b"null")
    finally:
        connection.close()


def server_log(server: Server) -> str:
    return (server.store.parent / f"{server.store.name}-server.log").read_text(errors="replace")


def assert_openai_error(status: int, content_type: str, body: dict, expected: set[int],
                        where: str = "") -> None:
    assert status in expected, (where, status, body)
    assert content_type.startswith("application/json")
    assert set(body["error"]) == {"message", "type", "param", "code"}
    assert body["error"]["message"]


def assert_no_server_path(server: Server, text: str) -> None:
    assert str(server.store) not in text and str(server.store.resolve()) not in text
    assert "/tmp" not in text and "/home" not in text and "/root" not in text


ODD_IDS = ["..", ".", "%00", "%2e%2e", "a" * 5000, "file-..", "batch_%00",
           "file-" + "0" * 24 + "%00"]


def test_odd_ids_get_a_json_404_never_a_500(server):
    kept = upload(server, [request_line("a")])
    for odd in ODD_IDS:
        for method, path in (("DELETE", f"/v1/files/{odd}"), ("GET", f"/v1/files/{odd}"),
                             ("GET", f"/v1/files/{odd}/content"),
                             ("GET", f"/v1/batches/{odd}"),
                             ("POST", f"/v1/batches/{odd}/cancel")):
            status, content_type, body = raw(server, method, path)
            assert_openai_error(status, content_type, body, {404}, f"{method} {path[:40]}")
            assert body["error"]["code"] == "not_found"
            assert len(body["error"]["message"]) < 200  # a 5,000-character id isn't echoed
    status, content_type, body = raw(
        server, "POST", "/v1/batches", json.dumps({
            "input_file_id": "../serve.sqlite3", "endpoint": CHAT,
            "completion_window": "24h"}).encode(), {"Content-Type": "application/json"})
    assert_openai_error(status, content_type, body, {400})
    assert body["error"]["param"] == "input_file_id"

    log = server_log(server)
    assert "Traceback" not in log and "IsADirectoryError" not in log
    assert (server.store / "serve.sqlite3").is_file() and (server.store / "files").is_dir()
    assert server.client().files.content(kept.id).text == request_line("a") + "\n"


def test_only_listed_files_are_ever_deleted(server):
    kept = upload(server, [request_line("a")])
    # The store's partial uploads, as add_file names them while it copies one in.
    partials = [server.store / "files" / ".file-abc.partial",
                server.store / "files" / f".{kept.id}.partial"]
    for partial in partials:
        partial.write_text("half an upload")
    for name in [p.name for p in partials] + ["serve.sqlite3", f"../files/{kept.id}"]:
        status, content_type, body = raw(server, "DELETE", f"/v1/files/{name}")
        assert_openai_error(status, content_type, body, {404})
    assert all(partial.read_text() == "half an upload" for partial in partials)

    assert server.client().files.delete(kept.id).deleted
    assert not (server.store / "files" / kept.id).exists()
    assert all(partial.exists() for partial in partials)


def test_a_file_deleted_as_its_batch_is_created_never_leaves_a_batch_without_input(server):
    client = server.client()
    # Big enough that reading it (create counts and checks its lines) outlasts 0.15 s.
    file = upload(server, [request_line(f"r{i}", "x" * 1000) for i in range(45_000)])
    created: dict[str, object] = {}

    def create() -> None:
        try:
            created["batch"] = client.batches.create(input_file_id=file.id, endpoint=CHAT,
                                                     completion_window="24h")
        except openai.APIStatusError as refused:
            created["refused"] = refused

    creating = threading.Thread(target=create)
    creating.start()
    time.sleep(0.15)
    try:
        deleted = client.files.delete(file.id).deleted
    except openai.ConflictError:
        deleted = False
    creating.join(timeout=60)

    if deleted:  # the delete came first: the batch is refused, naming the id only
        refused = created["refused"]
        assert refused.status_code == 400 and refused.body["param"] == "input_file_id"
        assert refused.body["message"] == f"No file with id '{file.id}' exists."
        assert file.id not in [b.input_file_id for b in client.batches.list()]
    else:  # the batch came first and holds its file until it ends
        batch = created["batch"]
        assert client.batches.cancel(batch.id).status in ("cancelling", "cancelled")
        batch = wait_for(client, batch.id, lambda b: b.status == "cancelled", timeout_s=120)
        assert batch.errors is None


def test_a_run_failure_names_the_file_id_not_the_store_path(server):
    client = server.client()
    file = upload(server, [request_line("a"), request_line("b")])
    batch = client.batches.create(input_file_id=file.id, endpoint=CHAT,
                                  completion_window="24h")
    time.sleep(0.15)
    (server.store / "files" / file.id).unlink()  # gone from under the batch before it ran
    batch = wait_for(client, batch.id, lambda b: b.status in ("completed", "failed"))

    assert batch.status == "failed"
    [error] = batch.errors.data
    assert error.code == "run_failed"
    assert error.message.startswith(f"data.input: {file.id} does not exist.")
    assert_no_server_path(server, error.message)
    assert_no_server_path(server, batch.model_dump_json())


def test_duplicate_custom_ids_name_their_lines_and_no_server_path(server):
    client = server.client()
    file = upload(server, [request_line(cid) for cid in ["a", "b", "a", "c", "b", "a"]])
    batch = client.batches.create(input_file_id=file.id, endpoint=CHAT,
                                  completion_window="24h")
    batch = wait_for(client, batch.id, lambda b: b.status in ("completed", "failed"))

    assert batch.status == "failed" and batch.in_progress_at is None
    assert [(e.code, e.line, e.param) for e in batch.errors.data] == [
        ("duplicate_custom_id", 3, "custom_id"), ("duplicate_custom_id", 5, "custom_id"),
        ("duplicate_custom_id", 6, "custom_id")]
    assert batch.errors.data[1].message.startswith(
        "Duplicate custom_id 'b': line 5 repeats line 2.")
    assert_no_server_path(server, batch.model_dump_json())
    assert batch.output_file_id is None and batch.error_file_id is None


@pytest.mark.parametrize("metadata, message", [
    ({f"k{i}": "v" for i in range(17)}, "too many properties. Expected an object with at most "
                                        "16 properties, but got an object with 17"),
    ({"k" * 65: "v"}, "Expected a key with maximum length 64, but got one with length 65"),
    ({"team": "v" * 513}, "Invalid 'metadata.team': string too long. Expected a string with "
                          "maximum length 512, but got a string with length 513"),
])
def test_metadata_over_openai_limits_is_refused_naming_metadata(server, metadata, message):
    client = server.client()
    file = upload(server, [request_line("a")])
    with pytest.raises(openai.BadRequestError) as refused:
        client.batches.create(input_file_id=file.id, endpoint=CHAT, completion_window="24h",
                              metadata=metadata)
    assert refused.value.status_code == 400 and refused.value.param == "metadata"
    assert message in refused.value.message
    assert file.id not in [b.input_file_id for b in client.batches.list()]


def test_metadata_at_openai_limits_is_taken(server):
    client = server.client()
    file = upload(server, [request_line("a")])
    metadata = {f"{i:02d}" + "k" * 62: "v" * 512 for i in range(16)}
    batch = client.batches.create(input_file_id=file.id, endpoint=CHAT,
                                  completion_window="24h", metadata=metadata)
    assert batch.metadata == metadata
    assert client.batches.cancel(batch.id).status in ("cancelling", "cancelled")
    wait_for(client, batch.id, lambda b: b.status == "cancelled", timeout_s=120)


def test_more_than_50000_requests_fail_the_batch_in_validation(server):
    client = server.client()
    file = upload(server, [request_line(f"r{i}") for i in range(50_001)])
    batch = client.batches.create(input_file_id=file.id, endpoint=CHAT,
                                  completion_window="24h")
    assert batch.status == "validating" and batch.request_counts.total == 50_001
    batch = wait_for(client, batch.id, lambda b: b.status in ("completed", "failed"))

    assert batch.status == "failed" and batch.in_progress_at is None
    [error] = batch.errors.data
    assert (error.code, error.param, error.line) == (
        "request_limit_exceeded", "input_file_id", None)
    assert error.message.startswith("The input file has 50,001 requests; a batch takes at "
                                    "most 50,000")


def peak_memory_kib(server: Server) -> int:
    status = Path(f"/proc/{server.process.pid}/status").read_text()
    return int(next(line.split()[1] for line in status.splitlines()
                    if line.startswith("VmHWM:")))


def test_an_upload_over_200_mb_is_refused_in_constant_memory(server, tmp_path):
    client = server.client()
    files_before = sorted(p.name for p in (server.store / "files").iterdir())
    peak_before = peak_memory_kib(server)
    # One byte over, with its size said up front (the openai client's way).
    big = tmp_path / "big.jsonl"
    with open(big, "wb") as out:
        out.truncate(200 * MiB + 1)  # sparse: no disk for the test's side
    with pytest.raises(openai.APIStatusError) as refused:
        client.files.create(file=big.open("rb"), purpose="batch")
    assert refused.value.status_code == 413
    assert refused.value.body["param"] == "file"
    assert refused.value.body["code"] == "file_too_large"
    assert "at most 200 MB" in refused.value.body["message"]

    # Far over, chunked: no size up front, so the server counts as it reads.
    def chunks() -> Iterator[bytes]:
        yield (b'--B\r\nContent-Disposition: form-data; name="purpose"\r\n\r\nbatch\r\n'
               b'--B\r\nContent-Disposition: form-data; name="file"; filename="x.jsonl"\r\n'
               b'Content-Type: application/jsonl\r\n\r\n')
        for _ in range(260):
            yield b"\n" * MiB
        yield b"\r\n--B--\r\n"

    connection = http.client.HTTPConnection("127.0.0.1", server.port, timeout=120)
    connection.request("POST", "/v1/files", body=chunks(), encode_chunked=True, headers={
        "Authorization": f"Bearer {API_KEY}", "Content-Type": "multipart/form-data; boundary=B",
        "Transfer-Encoding": "chunked"})
    answer = connection.getresponse()
    assert answer.status == 413 and json.loads(answer.read())["error"]["param"] == "file"
    connection.close()

    assert peak_memory_kib(server) - peak_before < 64 * 1024  # never a body in memory
    assert sorted(p.name for p in (server.store / "files").iterdir()) == files_before


def test_lines_that_are_no_request_fail_the_batch_in_validating_naming_them(server):
    """OpenAI refuses such a file while it validates it: an answer couldn't be matched to
    such a line (a made-up id could be a request's own, as line-1 is here)."""
    client = server.client()
    file = upload(server, ['{"custom_id": "x", oops', request_line("line-1"),
                           json.dumps({"url": CHAT, "body": {}}), request_line("b")])
    batch = client.batches.create(input_file_id=file.id, endpoint=CHAT,
                                  completion_window="24h")
    batch = wait_for(client, batch.id, lambda b: b.status in ("completed", "failed"))

    assert batch.status == "failed" and batch.in_progress_at is None
    assert [(e.code, e.line, e.param) for e in batch.errors.data] == [
        ("invalid_json_line", 1, None), ("missing_required_parameter", 3, "custom_id")]
    assert batch.errors.data[0].message.startswith(
        "Line 1: not valid JSON (Expecting property name enclosed in double quotes")
    assert batch.output_file_id is None and batch.error_file_id is None
    assert_no_server_path(server, batch.model_dump_json())
