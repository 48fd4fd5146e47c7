"""A real Ray head node for the cluster tests, and hygiene around it.

``ray_head`` runs ``ray start --head --block`` on free ports, with the CPU count a
local ``toolkit run`` gets and its own ``--temp-dir``, records it as the
``--address local`` head of this test session (``$TOOLKIT_CACHE_DIR`` is a per-session temp dir, see tests/conftest.py),
and at the end stops exactly that head: SIGTERM to its ``ray start`` process, then
any process still naming its temp dir. ``ray stop`` is never used: it would stop
every Ray on the machine.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from toolkit.cluster.backends.local_head import (
    LocalHead,
    free_ports,
    pids_using,
    ray_executable,
    start_head,
    state_path,
    stop_head,
    write_state,
)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    here = Path(__file__).parent
    for item in items:
        if here in Path(str(item.fspath)).parents:
            item.add_marker(pytest.mark.cluster)


@contextlib.contextmanager
def started_head(prefix: str, *, may_die: bool = False, **start_options: Any) -> Iterator[LocalHead]:
    """A head of this test's own (``start_head`` options), stopped by its own processes.

    A head that ended before its tests did fails the teardown with the end of its logs
    (the tests that used it failed already; this says why), unless ``may_die``.
    """
    temp_dir = Path(tempfile.mkdtemp(prefix=prefix, dir="/tmp"))
    head, process = start_head(temp_dir, **start_options)
    try:
        yield head
    finally:
        died = None if may_die else head_death(head, process)
        stop_head(head, process=process)
        leftovers = pids_using(str(temp_dir))
        shutil.rmtree(temp_dir, ignore_errors=True)
        assert died is None, died
        assert not leftovers, f"Ray processes of the test head survived: {leftovers}"


def head_death(head: LocalHead, process: subprocess.Popen[bytes]) -> str | None:
    """``None`` while the head's ``ray start --block`` runs; once it has ended, its exit
    code and the last lines of the head's logs."""
    code = process.poll()
    if code is None:
        return None
    logs = Path(head.temp_dir)
    tails = []
    for path in [Path(head.log_file), *sorted((logs / "session_latest" / "logs").glob("*"))]:
        if path.suffix in (".out", ".err", ".log") and path.is_file() and path.stat().st_size:
            lines = path.read_text(encoding="utf-8", errors="replace").splitlines()[-12:]
            tails.append(f"--- {path.name}\n" + "\n".join(lines))
    return (f"The test head ({head.gcs_address}) ended during its tests, exit code {code}."
            "\n" + "\n".join(tails))


@pytest.fixture(scope="session")
def ray_head() -> Iterator[LocalHead]:
    for name in ("RAY_ADDRESS", "RAY_API_SERVER_ADDRESS"):
        os.environ.pop(name, None)
    with started_head("tkray-test-") as head:
        write_state(head, state_path())  # `--address local` now means this head
        yield head



@pytest.fixture(scope="module")
def t4_head() -> Iterator[LocalHead]:
    """A head that declares one GPU of type T4 (Ray takes the declaration as it is)."""
    with started_head("tkt4-", num_cpus=4, extra_args=[
            "--num-gpus=1", '--resources={"accelerator_type:T4": 1}']) as head:
        yield head


@pytest.fixture(scope="module")
def two_nodes() -> Iterator[LocalHead]:
    """A head and a worker node on this machine (2 CPUs each), token auth on, as a
    user's small cluster: jobs reach it at ``head.dashboard_url``. The worker joins
    with its own agent ports (two raylets on one machine would clash on Ray's fixed
    ones) and its processes name the head's temp dir, so they are stopped with it."""
    with started_head("tk2n-", num_cpus=2) as head:
        env = {**os.environ, "RAY_AUTH_MODE": "token",
               "PATH": os.pathsep.join([str(Path(sys.executable).parent), os.environ["PATH"]])}
        with open(Path(head.temp_dir) / "worker.log", "wb") as log:
            worker = subprocess.Popen(
                [ray_executable(), "start", f"--address={head.gcs_address}", "--block",
                 "--node-ip-address=127.0.0.1", "--num-cpus=2", f"--temp-dir={head.temp_dir}",
                 *(f"--{name}={port}" for name, port in zip(
                     ("dashboard-agent-listen-port", "dashboard-agent-grpc-port",
                      "metrics-export-port", "runtime-env-agent-port"), free_ports(4)))],
                stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True)
        try:
            _wait_for_nodes(head, 2)
            yield head
        finally:
            worker.terminate()
            with contextlib.suppress(subprocess.TimeoutExpired):
                worker.wait(timeout=60)


def _wait_for_nodes(head: LocalHead, count: int, timeout_s: float = 120.0) -> None:
    import json
    import urllib.request

    from toolkit.run.ray.auth import auth_headers

    deadline = time.monotonic() + timeout_s
    while True:
        request = urllib.request.Request(f"{head.dashboard_url}/nodes?view=summary",
                                         headers=auth_headers(head.dashboard_url, os.environ))
        with contextlib.suppress(OSError, ValueError):
            with urllib.request.urlopen(request, timeout=5) as response:
                nodes = json.load(response)["data"]["summary"]
                if sum(1 for node in nodes if node.get("raylet", {}).get("state") == "ALIVE") >= count:
                    return
        assert time.monotonic() < deadline, f"{count} nodes did not join in {timeout_s:.0f} s"
        time.sleep(1)
