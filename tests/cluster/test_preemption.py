"""A worker node taken back mid-run (spot preemption, issue 50): the run notices the
drain, keeps going on another node, writes every id once and names the preemption.

A head of its own (1 CPU: reading and writing only) and a worker whose 2 CPUs are the
only place the engine (2 CPUs) fits. Mid-run the worker is drained as Ray's
autoscalers drain a spot node (``ray drain-node --reason
DRAIN_NODE_REASON_PREEMPTION --deadline-remaining-seconds``), a second worker joins,
and the first is killed outright (its own processes, by the process group the test
started): the engine restarts on the second. Never ``ray stop``.

The merging of Ray's node state into drains is tested on its own (no cluster).
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from tests.cluster.conftest import _wait_for_nodes, started_head
from toolkit.cluster.backends.local_head import LocalHead, free_ports, ray_executable
from toolkit.run.ray.node_drains import NodeWatch, taken_back_text

TOOLKIT = str(Path(sys.executable).parent / "toolkit")
ROWS = 240


def join_worker(head: LocalHead, cpus: int) -> subprocess.Popen[bytes]:
    """``ray start --address`` of a worker with ``cpus`` CPUs, in a process group of
    its own (killed as one, as a VM taken back); its processes name the head's temp
    dir, so the head's teardown finds any left."""
    env = {**os.environ, "RAY_AUTH_MODE": "token",
           "PATH": os.pathsep.join([str(Path(sys.executable).parent), os.environ["PATH"]])}
    with open(Path(head.temp_dir) / f"worker-{time.monotonic_ns()}.log", "wb") as log:
        return subprocess.Popen(
            [ray_executable(), "start", f"--address={head.gcs_address}", "--block",
             "--node-ip-address=127.0.0.1", f"--num-cpus={cpus}", f"--temp-dir={head.temp_dir}",
             *(f"--{name}={port}" for name, port in zip(
                 ("dashboard-agent-listen-port", "dashboard-agent-grpc-port",
                  "metrics-export-port", "runtime-env-agent-port"), free_ports(4)))],
            stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True)


def killed(worker: subprocess.Popen[bytes]) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(worker.pid, signal.SIGKILL)
    with contextlib.suppress(subprocess.TimeoutExpired):
        worker.wait(timeout=30)


@pytest.fixture
def small_head() -> Iterator[LocalHead]:
    with started_head("tkpre-", num_cpus=1) as head:
        yield head


def node_ids(head: LocalHead) -> dict[str, int]:
    """Alive worker nodes' ids -> their CPUs, as the GCS lists them."""
    import urllib.request

    from toolkit.run.ray.auth import auth_headers

    request = urllib.request.Request(f"{head.dashboard_url}/nodes?view=summary",
                                     headers=auth_headers(head.dashboard_url, os.environ))
    with urllib.request.urlopen(request, timeout=10) as response:
        nodes = json.load(response)["data"]["summary"]
    return {n["raylet"]["nodeId"]: n["raylet"].get("resourcesTotal", {}).get("CPU", 0)
            for n in nodes if n.get("raylet", {}).get("state") == "ALIVE"
            and not n["raylet"].get("isHeadNode")}


def test_a_worker_taken_back_mid_run_is_named_and_every_id_written_once(
        small_head: LocalHead, tmp_path: Path) -> None:
    head = small_head
    first = join_worker(head, cpus=2)
    second = None
    try:
        _wait_for_nodes(head, 2, timeout_s=240)  # a loaded CI machine starts raylets slowly
        # Its CPUs reported too: the run's fit check places the engine on them.
        ready_by = time.monotonic() + 60
        while list(node_ids(head).values()) != [2]:
            assert time.monotonic() < ready_by, node_ids(head)
            time.sleep(1)
        time.sleep(3)
        (first_id,) = node_ids(head)
        out = tmp_path / "out"
        env = {**os.environ, "RAY_AUTH_MODE": "token"}
        env.pop("RAY_ADDRESS", None)
        run = subprocess.Popen(
            [TOOLKIT, "run", "text-industry", "--smoke", "--rows", str(ROWS), "--output",
             str(out), "--address", head.gcs_address, "--partitions", "24", "--concurrency", "1",
             "--set", "engine.num_cpus=2", "--set", "engine.batch_size=4",
             "--set", "engine.max_restarts=4"],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
        try:
            # Mid-run: once the first results are written.
            deadline = time.monotonic() + 240
            while not list(out.glob("part-*")) and not list(out.glob("*.parquet")):
                assert run.poll() is None, run.communicate()[1][-3000:]
                assert time.monotonic() < deadline, "no rows written in 240 s"
                time.sleep(1)
            drained = subprocess.run(
                [ray_executable(), "drain-node", f"--address={head.gcs_address}",
                 f"--node-id={first_id}", "--reason=DRAIN_NODE_REASON_PREEMPTION",
                 "--reason-message=spot instance taken back",
                 "--deadline-remaining-seconds=20"],
                capture_output=True, text=True, env=env, timeout=60)
            assert drained.returncode == 0, drained.stderr
            second = join_worker(head, cpus=2)
            noticed_by = time.monotonic() + 8  # the driver's watch looks every 5 s
            # The replacement is up before the spot node goes (a loaded machine starts
            # a raylet in a minute or more; the notice gave 20 s).
            joined_by = time.monotonic() + 240
            while not set(node_ids(head)) - {first_id}:
                assert time.monotonic() < joined_by, "the second worker did not join in 240 s"
                time.sleep(1)
            time.sleep(max(0.0, noticed_by - time.monotonic()))
            killed(first)
            stdout, stderr = run.communicate(timeout=420)
        finally:
            if run.poll() is None:
                run.kill()
                run.communicate()
        print(stdout[-3000:], stderr[-6000:])
        assert run.returncode == 0, stderr[-3000:]
        ids = pq.read_table(out, columns=["Index"])["Index"].to_pylist()
        assert sorted(ids) == list(range(1, ROWS + 1))  # every id exactly once
        assert "1 node taken back (preemption)" in stdout + stderr
        summary = json.loads((out / "_summary.json").read_text())
        (taken,) = summary["nodes_taken_back"]
        assert taken["node_id"] == first_id and taken["reason"] == "preemption"
        assert any("taken back (preemption)" in note for note in summary["notes"])
    finally:
        killed(first)
        if second is not None:
            second.terminate()
            with contextlib.suppress(subprocess.TimeoutExpired):
                second.wait(timeout=60)


# -- Ray's node state merged into drains (no cluster) ----------------------------------


def node(node_id: str, alive: bool = True, reason: int = 0, message: str = "") -> dict:
    return {"NodeID": node_id, "Alive": alive, "NodeManagerAddress": "10.0.0.7",
            "DeathReason": reason, "DeathReasonMessage": message}


def test_a_drain_is_told_once_when_noticed_and_once_when_its_node_is_gone() -> None:
    told = []
    looks = iter([
        ({}, [node("a"), node("b"), node("old", alive=False, reason=3)]),
        ({"a": 1_800_000_000_000}, [node("a"), node("b"), node("old", alive=False, reason=3)]),
        ({"a": 1_800_000_000_000}, [node("a"), node("b"), node("old", alive=False, reason=3)]),
        ({}, [node("a", alive=False, reason=3, message="spot"), node("b"),
              node("old", alive=False, reason=3)]),
        ({}, [node("a", alive=False, reason=3, message="spot"), node("b"),
              node("old", alive=False, reason=3)]),
    ])
    watch = NodeWatch(told.append, look_at_ray=lambda: next(looks))
    watch.look()
    assert watch.text() is None  # a node dead before the run is not its own
    watch.look()
    watch.look()
    assert [(d.node_id, d.reason, d.deadline, d.gone) for d in told] == [
        ("a", "preemption", 1_800_000_000.0, False)]
    assert watch.text() == "1 node taken back (preemption)"
    watch.look()
    watch.look()
    assert [(d.node_id, d.gone, d.message) for d in told[1:]] == [("a", True, "spot")]
    assert told[1].describe() == "node 10.0.0.7 (a) was taken back (preemption): spot"


def test_a_drain_without_a_deadline_waits_for_ray_to_say_why() -> None:
    watch = NodeWatch(look_at_ray=lambda: ({"a": 0}, [node("a")]))
    watch.look()
    assert watch.text() == "1 node taken back"
    assert taken_back_text([]) is None
