"""vLLM's engine under faults, on its CPU backend through the CLI: its process killed
mid-run, an engine that can never start. (A prompt longer than the model takes:
``test_vllm_generate.py``.)

Each engine start costs about a minute here: one run per fault, its output read by
the tests that need it.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

import psutil
import pyarrow.parquet as pq
import pytest
from vllm_cli import toolkit_run

from toolkit.errors import EngineStartError

SMOKE_ON_VLLM = ("--smoke", "--engine", "vllm", "--accelerator", "none")
KILLED_RUN_ROWS = 1000  # blocks of 256 rows: three more land after the first


@pytest.fixture(scope="module")
def killed_engine_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    """A run whose vLLM engine process (``EngineCore``, started by Ray Data LLM's stage
    actor) is SIGKILLed once its first rows are written: its output folder and all it
    printed."""
    out = tmp_path_factory.mktemp("killed-engine") / "out"
    proc = subprocess.Popen(
        ["toolkit", "run", "text-industry", *SMOKE_ON_VLLM, "--rows", str(KILLED_RUN_ROWS),
         "--batch-size", "32", "--output", str(out)],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        env={**os.environ, "RAY_ADDRESS": ""}, start_new_session=True)
    try:
        deadline = time.monotonic() + 400
        while not list(out.glob("*.parquet")):
            assert proc.poll() is None, "the run ended before its engine could be killed"
            assert time.monotonic() < deadline, "no rows were written in time"
            time.sleep(0.2)
        engines = engine_core_processes(proc.pid)
        assert engines, "no vLLM EngineCore process found"
        for engine in engines:
            engine.send_signal(signal.SIGKILL)
        output, _ = proc.communicate(timeout=480)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=30)
    assert proc.returncode == 0, output[-3000:]
    return out, output


def engine_core_processes(run_pid: int) -> list[psutil.Process]:
    """vLLM's ``EngineCore`` processes of the run ``run_pid``. vLLM starts them through
    a process that exits, so they are not the run's descendants: they are found by the
    logs they write to, in the Ray session the run started (named after its pid)."""
    found = []
    for process in psutil.process_iter():
        try:
            if "EngineCore" not in process.name() + " ".join(process.cmdline()):
                continue
            if f"_{run_pid}/logs/" in os.readlink(f"/proc/{process.pid}/fd/2"):
                found.append(process)
        except (psutil.Error, OSError):  # gone, a zombie, or not ours to read
            continue
    return found


def test_a_killed_vllm_engine_loses_no_row_and_writes_every_row_once(killed_engine_run):
    out, output = killed_engine_run
    ids = [int(i) for i in pq.read_table(out, columns=["Index"])["Index"].to_pylist()]
    assert sorted(ids) == list(range(1, KILLED_RUN_ROWS + 1))
    # Whether Ray had to restart the engine's actor (and says "a Ray worker process
    # died") depends on how many rows it still held when the kill landed: on a fast
    # machine it may have answered them all already, so that is not asserted.


def test_a_vllm_run_ends_with_its_summary_and_no_leak_report(killed_engine_run):
    _, output = killed_engine_run
    assert "rows written:" in output
    assert "nanobind" not in output and "leaked" not in output


def test_an_engine_whose_kv_cache_cannot_hold_one_request_stops_the_run_saying_why(tmp_path):
    out = tmp_path / "out"
    result = toolkit_run("text-industry", *SMOKE_ON_VLLM, "--rows", "30",
                         "--set", "engine.kv_cache_gib=0.0002", "--output", str(out),
                         timeout=300)
    assert result.returncode == EngineStartError.exit_code, result.stderr[-3000:]
    error = result.stderr[result.stderr.index("Error: "):]
    assert "The vLLM engine could not start: ValueError:" in error
    assert "KV cache" in error and "engine.kv_cache_gib" in error
    assert "nanobind" not in result.stderr
