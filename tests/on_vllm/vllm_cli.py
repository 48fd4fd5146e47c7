"""Running the toolkit as a user does, and reading back what it wrote."""

from __future__ import annotations

import os
import signal
import subprocess
from pathlib import Path

import pyarrow.parquet as pq


def toolkit_run(job: str, *args: str, timeout: float = 480) -> subprocess.CompletedProcess:
    """``toolkit run JOB ARGS`` as a user types it, on a Ray of its own. Past ``timeout``
    the run and every process it started (its Ray, vLLM's engine) are killed."""
    return finish_run(start_run(job, *args), timeout)


def start_run(job: str, *args: str) -> subprocess.Popen:
    """``toolkit run JOB ARGS`` started, in a session of its own (see :func:`finish_run`)."""
    return subprocess.Popen(["toolkit", "run", job, *args], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True,
                            env={**os.environ, "RAY_ADDRESS": ""})


def finish_run(proc: subprocess.Popen, timeout: float = 480) -> subprocess.CompletedProcess:
    """What a started run printed once it ended; past ``timeout`` it and every process
    it started (its Ray, vLLM's engine) are killed."""
    try:
        stdout, stderr = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        stdout, stderr = proc.communicate()
        raise AssertionError(f"{' '.join(proc.args[:3])} took over {timeout:.0f} s:\n"
                             f"{stdout[-2000:]}{stderr[-2000:]}") from None
    return subprocess.CompletedProcess(proc.args, proc.returncode, stdout, stderr)


def succeeded(result: subprocess.CompletedProcess) -> subprocess.CompletedProcess:
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    return result


def read_rows(out: Path, key: str) -> dict:
    """The written rows by ``key``, each a dict of its columns."""
    return {row[key]: row for row in pq.read_table(out).to_pylist()}
