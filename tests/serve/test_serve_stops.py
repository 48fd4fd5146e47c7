"""Stopping batches: a cancel keeps what finished; a server killed with SIGKILL and
started again finishes what was running, each request answered once."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow.parquet as pq

from tests.serve.conftest import wait_for, write_requests


def custom_ids(client, file_id: str | None) -> list[str]:
    if file_id is None:
        return []
    text = client.files.content(file_id).text
    return [json.loads(line)["custom_id"] for line in text.splitlines() if line.strip()]


def test_a_batch_cancelled_in_progress_ends_cancelled_with_what_finished(server):
    client = server.client()
    file = client.files.create(file=write_requests(Path("big.jsonl"), 4000).open("rb"),
                               purpose="batch")
    batch = client.batches.create(input_file_id=file.id, endpoint="/v1/chat/completions",
                                  completion_window="24h")
    wait_for(client, batch.id, lambda b: b.request_counts.completed > 0)

    assert client.batches.cancel(batch.id).status == "cancelling"
    batch = wait_for(client, batch.id, lambda b: b.status not in ("in_progress", "cancelling"),
                     timeout_s=120)

    assert batch.status == "cancelled" and batch.cancelled_at
    counts = batch.request_counts
    assert counts.total == 4000 and 0 < counts.completed < 4000
    finished = custom_ids(client, batch.output_file_id)
    assert len(finished) == len(set(finished)) == counts.completed


def test_a_killed_server_restarted_finishes_its_batch_once_per_request(start_server, tmp_path):
    store = tmp_path / "store"
    first = start_server(store=store)
    client = first.client()
    file = client.files.create(file=write_requests(Path("r.jsonl"), 600).open("rb"),
                               purpose="batch")
    batch = client.batches.create(input_file_id=file.id, endpoint="/v1/chat/completions",
                                  completion_window="24h")
    wait_for(client, batch.id, lambda b: b.request_counts.completed > 0)
    first.kill()  # SIGKILL: no chance to stop its run, which goes on writing

    second = start_server(store=store)
    client = second.client()
    assert [b.id for b in client.batches.list()] == [batch.id]
    batch = wait_for(client, batch.id, lambda b: b.status in ("completed", "failed"))

    assert batch.status == "completed", batch.errors
    assert (batch.request_counts.completed, batch.request_counts.failed) == (600, 0)
    answered = custom_ids(client, batch.output_file_id)
    assert len(answered) == len(set(answered)) == 600
    # The run the killed server left behind was ended, not left to write beside the new one.
    rows = 0
    for part in (store / "batches" / batch.id / "run").glob("part-*.parquet"):
        try:
            rows += pq.read_metadata(part).num_rows
        except Exception:  # noqa: BLE001 - a file the killed run left without a footer
            continue
    assert rows == 600
