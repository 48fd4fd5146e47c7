"""A run whose cluster goes away says so, and ends before Ray ends it without a word.

Ray's core worker ends a driver whose GCS has been silent for
``gcs_rpc_server_reconnect_timeout_s`` (60 s) with exit code 1, its only words a line
in the run's log. ``toolkit run`` watches the GCS port instead: it warns of a silence
and, before Ray's deadline, exits 3 saying what was kept and how to resume. Here a
real head is killed under a run (with Ray's timeout cut to 12 s so the test is quick),
and the watcher itself is driven by a real listening socket.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

from tests.cluster.conftest import started_head
from toolkit.run.ray.gcs_watch import (
    gcs_answers,
    lost_after_s,
    reconnect_timeout_s,
    watch_gcs,
    watchable,
)

TOOLKIT = str(Path(sys.executable).parent / "toolkit")


def test_a_killed_head_ends_the_run_with_exit_3_and_how_to_resume(tmp_path: Path) -> None:
    out = tmp_path / "out"
    env = {name: value for name, value in os.environ.items() if name != "RAY_ADDRESS"}
    env["RAY_gcs_rpc_server_reconnect_timeout_s"] = "12"
    with started_head("tklost-", num_cpus=2, may_die=True) as head:
        run = subprocess.Popen(
            [TOOLKIT, "run", "text-industry", "--smoke", "--rows", "300", "--output", str(out),
             "--address", head.gcs_address],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
        assert run.stderr is not None
        seen = []
        for line in run.stderr:
            seen.append(line)
            if line.startswith("Joined the Ray cluster"):
                os.killpg(head.pid, signal.SIGKILL)  # the head crashes: GCS, raylet, all
                break
        killed = time.monotonic()
        stdout, rest = run.communicate(timeout=120)
        waited = time.monotonic() - killed
    stderr = "".join(seen) + rest
    assert run.returncode == 3, stderr
    assert waited < 12, f"Ray's own deadline came first ({waited:.0f} s)"
    port = head.gcs_address.rsplit(":", 1)[1]
    warning = next(line for line in stderr.splitlines() if line.startswith("Warning: "))
    assert warning.startswith("Warning: the Ray cluster at ")
    assert f":{port} has not answered for " in warning
    assert warning.endswith("Ray ends this run if it stays silent for 12 s.")
    error = stderr[stderr.index("Error: "):]
    assert error.startswith("Error: Lost the Ray cluster at ")
    assert f":{port}: its GCS has not answered for " in error
    assert f"Hint: 0 of 300 rows kept in {out}. Once the cluster is back, run the same " \
           "command again to resume" in error
    assert not (out / "_lock.json").exists()  # the folder is free for that rerun
    assert "Traceback" not in stderr


def test_the_watch_warns_of_a_silence_then_calls_the_cluster_lost() -> None:
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen()
    address = f"127.0.0.1:{listener.getsockname()[1]}"
    assert gcs_answers(address)
    silences: list[float] = []
    lost: list[float] = []
    stop = watch_gcs(address, on_silent=silences.append, on_lost=lost.append,
                     silent_after=0.2, lost_after=0.6, interval_s=0.05)
    try:
        time.sleep(0.3)
        assert silences == [] and lost == []  # answering: nothing to say
        listener.close()  # the GCS is gone
        deadline = time.monotonic() + 10
        while not lost and time.monotonic() < deadline:
            time.sleep(0.05)
    finally:
        stop()
    assert len(silences) == 1 and 0.2 <= silences[0] < 0.6
    assert len(lost) == 1 and lost[0] >= 0.6


def test_a_gcs_back_in_time_is_watched_on() -> None:
    answers = iter([False, False, False, True] + [True] * 1000)
    silences: list[float] = []
    lost: list[float] = []
    now = iter(float(second) for second in range(1000))
    stop = watch_gcs("127.0.0.1:1", on_silent=silences.append, on_lost=lost.append,
                     silent_after=1.0, lost_after=5.0, interval_s=0.01,
                     probe=lambda _address: next(answers), clock=lambda: next(now))
    time.sleep(0.3)
    stop()
    assert silences == [1.0] and lost == []


def test_rays_deadline_comes_from_its_environment_variable() -> None:
    assert reconnect_timeout_s({}) == 60
    assert lost_after_s({}) == 50
    assert reconnect_timeout_s({"RAY_gcs_rpc_server_reconnect_timeout_s": "12"}) == 12
    assert lost_after_s({"RAY_gcs_rpc_server_reconnect_timeout_s": "12"}) == 6
    assert reconnect_timeout_s({"RAY_gcs_rpc_server_reconnect_timeout_s": "soon"}) == 60


def test_only_host_port_addresses_are_watched() -> None:
    assert watchable("192.0.2.2:6379") and watchable("[fd00::2]:6379")
    assert not watchable("local") and not watchable("ray://head:10001")
