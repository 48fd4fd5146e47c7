"""Running the toolkit as a user does, and reading back what it wrote."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pyarrow.parquet as pq


def toolkit_run(job: str, *args: str, timeout: float = 480) -> subprocess.CompletedProcess:
    """``toolkit run JOB ARGS`` as a user types it, on a Ray of its own."""
    return subprocess.run(["toolkit", "run", job, *args], capture_output=True, text=True,
                          timeout=timeout, env={**os.environ, "RAY_ADDRESS": ""})


def succeeded(result: subprocess.CompletedProcess) -> subprocess.CompletedProcess:
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    return result


def read_rows(out: Path, key: str) -> dict:
    """The written rows by ``key``, each a dict of its columns."""
    return {row[key]: row for row in pq.read_table(out).to_pylist()}
