"""vLLM's engine under faults, on its CPU backend through the CLI: its process killed
mid-run (once: Ray restarts it; again past engine.max_restarts: the run stops, and the
same command resumes), engines that can never start (a KV cache too small for one
request or larger than the machine, a model vLLM has no implementation of, a folder that
is no model). (A prompt longer than the model takes: ``test_vllm_generate.py``.)

Each engine start costs about a minute here: one run per fault, its output read by
the tests that need it.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

import psutil
import pyarrow.parquet as pq
import pytest
from vllm_cli import finish_run, start_run, succeeded, toolkit_run

from toolkit.errors import EngineDiedError, EngineStartError
from toolkit.samples.tiny_model import tiny_chat_model_path

SMOKE_ON_VLLM = ("--smoke", "--engine", "vllm", "--accelerator", "none")
KILLED_RUN_ROWS = 3000  # blocks of 256 rows: most are still to come at each kill


@dataclass
class KilledEngineRun:
    """A run whose vLLM engine process (``EngineCore``, started by Ray Data LLM's stage
    actor) was SIGKILLed once its first rows were written, and again once the engine
    Ray restarted had written more; then the same command run again."""

    out: Path
    rows_at_kills: list[int]
    stopped: subprocess.CompletedProcess
    resumed: subprocess.CompletedProcess


@pytest.fixture(scope="module")
def killed_engine_run(tmp_path_factory: pytest.TempPathFactory) -> KilledEngineRun:
    out = tmp_path_factory.mktemp("killed-engine") / "out"
    command = ["text-industry", *SMOKE_ON_VLLM, "--rows", str(KILLED_RUN_ROWS),
               "--batch-size", "32", "--set", "engine.max_restarts=1", "--output", str(out)]
    proc = subprocess.Popen(["toolkit", "run", *command], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True,
                            env={**os.environ, "RAY_ADDRESS": ""})
    rows_at_kills: list[int] = []
    killed: set[int] = set()
    try:
        deadline = time.monotonic() + 600
        for _ in range(2):
            # An engine not yet killed that has started (a kill while it starts is a
            # failed start, exit 9), then rows written since: rows it answered.
            while not (engines := [e for e in engine_core_processes(proc.pid)
                                   if e.pid not in killed and e.pid in started_engines(out)]):
                assert proc.poll() is None, "the run ended before its engine could be killed"
                assert time.monotonic() < deadline, "no engine started in time"
                time.sleep(0.2)
            rows_started = written_rows(out)
            while written_rows(out) <= rows_started:
                assert proc.poll() is None, "the run ended before its engine could be killed"
                assert time.monotonic() < deadline, "no rows were written in time"
                time.sleep(0.2)
            rows_at_kills.append(written_rows(out))
            for engine in engines:
                killed.add(engine.pid)
                engine.send_signal(signal.SIGKILL)
        stdout, stderr = proc.communicate(timeout=300)
    finally:
        if proc.poll() is None:
            # vLLM's engines are not in the run's process group (see engine_core_processes).
            for engine in engine_core_processes(proc.pid):
                engine.send_signal(signal.SIGKILL)
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=30)
    stopped = subprocess.CompletedProcess(proc.args, proc.returncode, stdout, stderr)
    return KilledEngineRun(out, rows_at_kills, stopped, toolkit_run(*command))


def started_engines(out: Path) -> set[int]:
    """Pids of the vLLM engines the run's log says finished starting."""
    try:
        log = (out / "_logs" / "run.log").read_text(errors="replace")
    except FileNotFoundError:
        return set()
    return {int(pid) for pid in re.findall(r"\(EngineCore pid=(\d+)\) .*init engine", log)}


def written_rows(out: Path) -> int:
    """Rows in the run's finished result files (one still being written has no footer)."""
    rows = 0
    for path in out.glob("*.parquet"):
        try:
            rows += pq.read_metadata(path).num_rows
        except (OSError, ValueError):  # pyarrow's ArrowInvalid is a ValueError
            continue
    return rows


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


def test_ray_restarts_a_killed_vllm_engine_and_it_goes_on_answering(killed_engine_run):
    first, second = killed_engine_run.rows_at_kills
    assert second > first, "the engine Ray restarted wrote rows before the second kill"
    stopped = killed_engine_run.stopped
    assert "Warning: a Ray worker process died; Ray restarts it" in stopped.stdout + stopped.stderr


def test_an_engine_killed_more_often_than_max_restarts_stops_the_run_saying_so(
        killed_engine_run):
    stopped = killed_engine_run.stopped
    assert stopped.returncode == EngineDiedError.exit_code, stopped.stderr[-3000:]
    error = stopped.stderr[stopped.stderr.index("Error: "):]
    assert "died more often than Ray may restart it (engine.max_restarts 1)" in error
    assert "raise engine.max_restarts" in error and "the same command resumes" in error
    assert "Traceback" not in stopped.stderr


def test_the_same_command_then_resumes_and_writes_every_row_once(killed_engine_run):
    resumed = succeeded(killed_engine_run.resumed)
    assert "Resumed: " in resumed.stdout + resumed.stderr
    ids = pq.read_table(killed_engine_run.out, columns=["Index"])["Index"].to_pylist()
    assert sorted(int(i) for i in ids) == list(range(1, KILLED_RUN_ROWS + 1))


def test_a_vllm_run_ends_with_its_summary_and_no_leak_report(killed_engine_run):
    printed = killed_engine_run.resumed.stdout + killed_engine_run.resumed.stderr
    assert "rows written:" in printed
    assert "nanobind" not in printed and "leaked" not in printed


@pytest.fixture(scope="module")
def failed_starts(tmp_path_factory: pytest.TempPathFactory) -> dict[str, subprocess.CompletedProcess]:
    """Runs whose vLLM engine can never start, by cause: a KV cache too small for one
    request, one larger than the machine, a model of an architecture vLLM has no
    implementation of. Started together: each is mostly vLLM importing itself in three
    processes, so side by side they take little longer than one."""
    folder = tmp_path_factory.mktemp("failed-starts")
    model = folder / "my-model"
    shutil.copytree(tiny_chat_model_path(), model)
    config = json.loads((model / "config.json").read_text())
    (model / "config.json").write_text(json.dumps({**config, "architectures": ["MadeUpLM"]}))
    runs = {
        "kv too small": [*SMOKE_ON_VLLM, "--set", "engine.kv_cache_gib=0.0002"],
        "kv too large": [*SMOKE_ON_VLLM, "--set", "engine.kv_cache_gib=4096"],
        "architecture": ["--engine", "vllm", "--accelerator", "none", "--model", str(model),
                         "--input", str(customers(folder))],
    }
    started = {cause: start_run("text-industry", *flags, "--rows", "30", "--output",
                                str(folder / cause.replace(" ", "-")))
               for cause, flags in runs.items()}
    return {cause: finish_run(proc, timeout=420) for cause, proc in started.items()}


def error_of(result: subprocess.CompletedProcess) -> str:
    assert result.returncode == EngineStartError.exit_code, result.stderr[-3000:]
    assert "nanobind" not in result.stderr
    return result.stderr[result.stderr.index("Error: "):]


def test_an_engine_whose_kv_cache_cannot_hold_one_request_stops_the_run_saying_why(
        failed_starts):
    error = error_of(failed_starts["kv too small"])
    assert "The vLLM engine could not start: ValueError:" in error
    assert "KV cache" in error and "engine.kv_cache_gib" in error


def test_a_kv_cache_larger_than_the_machine_stops_the_run_saying_to_lower_it(failed_starts):
    error = error_of(failed_starts["kv too large"])
    assert "is less than requested memory for kv (4096.0 GiB)" in error
    assert "Hint: Lower engine.kv_cache_gib (now 4096 GiB) to what the machine's free " \
        "memory holds." in error


def test_a_model_vllm_cannot_run_stops_the_run_naming_its_architecture(failed_starts):
    error = error_of(failed_starts["architecture"])
    assert error.startswith("Error: The vLLM engine could not start: ValidationError: Model "
                            "architectures ['MadeUpLM'] are not supported for now.\n")
    assert "Hint: vLLM has no implementation of 'MadeUpLM'" in error
    assert len(error) < 1000  # not the 10,000 characters of what vLLM supports


def test_a_folder_that_is_no_model_is_refused_before_ray_starts(tmp_path):
    (tmp_path / "notes").mkdir()
    (tmp_path / "notes" / "README.md").write_text("weights to come\n")
    result = toolkit_run("text-industry", *SMOKE_ON_VLLM, "--model", str(tmp_path / "notes"),
                         "--output", str(tmp_path / "out"), timeout=60)
    assert result.returncode == 2, result.stderr[-3000:]
    assert "Error: engine.model: " in result.stderr and "has no config.json" in result.stderr
    assert not (tmp_path / "out").exists()


def customers(folder: Path, rows: int = 30) -> Path:
    made = subprocess.run(["toolkit", "samples", "customers", "--rows", str(rows), "-o",
                           str(folder / "customers.csv")], capture_output=True, text=True)
    assert made.returncode == 0, made.stderr
    return folder / "customers.csv"
