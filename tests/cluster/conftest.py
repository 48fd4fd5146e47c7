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
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from toolkit.cluster.backends.local_head import (
    LocalHead,
    pids_using,
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
def started_head(prefix: str, **start_options: Any) -> Iterator[LocalHead]:
    """A head of this test's own (``start_head`` options), stopped by its own processes."""
    temp_dir = Path(tempfile.mkdtemp(prefix=prefix, dir="/tmp"))
    head, process = start_head(temp_dir, **start_options)
    try:
        yield head
    finally:
        stop_head(head, process=process)
        leftovers = pids_using(str(temp_dir))
        shutil.rmtree(temp_dir, ignore_errors=True)
        assert not leftovers, f"Ray processes of the test head survived: {leftovers}"


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
