"""`--address local`: start a head once, find it again, stop only that one."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from click.testing import CliRunner

from toolkit.cli.main import main
from toolkit.cluster.backends.local_head import (
    LocalHead,
    dashboard_responds,
    ensure_local_head,
    head_is_running,
    pids_using,
    read_state,
    state_path,
    write_state,
)


def test_the_recorded_head_is_reused(ray_head: LocalHead) -> None:
    assert read_state(state_path()) == ray_head
    events: list[str] = []
    assert ensure_local_head(on_event=events.append) == ray_head
    assert events == []  # nothing was started


def test_a_dead_or_foreign_pid_is_not_taken_for_a_head(ray_head: LocalHead,
                                                       tmp_path: Path) -> None:
    finished = subprocess.Popen(["true"])
    finished.wait()
    assert not head_is_running(ray_head.model_copy(update={"pid": finished.pid}))
    # A live process that is not that head (this test process) doesn't count either.
    import os

    assert not head_is_running(ray_head.model_copy(update={"pid": os.getpid()}))
    assert read_state(tmp_path / "missing.json") is None
    (tmp_path / "garbage.json").write_text("{not json")
    assert read_state(tmp_path / "garbage.json") is None


def test_start_record_reuse_and_stop_a_local_head(
    ray_head: LocalHead, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The whole `--address local` life cycle, in a cache dir of its own."""
    monkeypatch.setenv("TOOLKIT_CACHE_DIR", str(tmp_path / "cache"))
    events: list[str] = []
    head = ensure_local_head(on_event=events.append, num_cpus=1)
    try:
        assert head != ray_head
        assert events and events[0].startswith(
            f"Started a local Ray head (dashboard {head.dashboard_url}")
        assert "toolkit stop --local-head" in events[0]
        assert read_state(state_path()) == head
        assert ensure_local_head(on_event=events.append) == head
        assert len(events) == 1
    finally:
        result = CliRunner().invoke(main, ["stop", "--local-head"])
    assert result.exit_code == 0, result.output
    assert result.stderr == f"Stopped the local Ray head at {head.dashboard_url}.\n"
    assert not dashboard_responds(head.dashboard_url, timeout_s=1)
    assert pids_using(head.temp_dir) == []
    assert not state_path().exists()
    # The session's head was not touched.
    assert head_is_running(ray_head)
    again = CliRunner().invoke(main, ["stop", "--local-head"])
    assert again.stderr == "No local Ray head was running.\n"


def test_state_round_trip(tmp_path: Path) -> None:
    head = LocalHead(pid=1, dashboard_url="http://127.0.0.1:1", gcs_address="127.0.0.1:2",
                     temp_dir="/tmp/x", log_file="/tmp/x/ray-start.log")
    write_state(head, tmp_path / "nested" / "state.json")
    assert read_state(tmp_path / "nested" / "state.json") == head
