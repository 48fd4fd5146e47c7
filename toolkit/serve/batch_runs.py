"""One batch's run: a ``toolkit run openai-batch`` child process in its own process group.

A child process rather than a thread of the server, because a run is exactly what
``toolkit run`` does (its own Ray driver, its log, its exit code) and because a
process group can be stopped as a terminal's Ctrl-C stops it: SIGINT to the group
keeps every row already written. Its pid (= its process group id) is recorded, so a
server that was killed finds a child it left behind and ends it before the batch
runs again: two drivers must never write one run directory at once. The new run
resumes from the run directory by ``custom_id``, so each request is answered once.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

from pydantic import BaseModel, Field


class RunFlags(BaseModel):
    """The engine flags every batch's ``toolkit run`` gets (the server's own flags)."""

    smoke: bool = Field(False, description="A tiny random-weight model, offline: for trying "
                                           "the API out; answers are noise.")
    model: str | None = Field(None, description="Model every batch runs on; the requests' own "
                                                "`model` field is not used.")
    engine: str | None = None
    address: str | None = Field(None, description="Ray cluster for the runs (default: "
                                                  "RAY_ADDRESS, else a local Ray per run).")
    batch_size: str | None = None
    concurrency: str | None = None
    accelerator: str | None = None
    spec_file: str | None = None
    sets: list[str] = []

    def arguments(self) -> list[str]:
        """The flags as ``toolkit run`` takes them."""
        args: list[str] = ["--smoke"] if self.smoke else []
        for flag, value in (("--model", self.model), ("--engine", self.engine),
                            ("--address", self.address), ("--batch-size", self.batch_size),
                            ("--concurrency", self.concurrency),
                            ("--accelerator", self.accelerator), ("-f", self.spec_file)):
            if value is not None:
                args += [flag, value]
        for item in self.sets:
            args += ["--set", item]
        return args


def run_command(input_file: Path, run_dir: Path, flags: RunFlags) -> list[str]:
    """The child's command line: this Python's ``toolkit run openai-batch``."""
    return [sys.executable, "-m", "toolkit.cli.main", "run", "openai-batch",
            "--input", str(input_file), "--output", str(run_dir), *flags.arguments()]


def start_run(input_file: Path, run_dir: Path, log_file: Path,
              flags: RunFlags) -> subprocess.Popen[bytes]:
    """Start the run in a new session (its own process group, away from the server's
    terminal: a Ctrl-C meant for the server doesn't stop the batches)."""
    with open(log_file, "ab") as log:
        return subprocess.Popen(run_command(input_file, run_dir, flags), cwd=run_dir.parent,
                                stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                start_new_session=True)


def interrupt(pid: int) -> None:
    """Ctrl-C for the run's process group: it stops, keeping what it wrote."""
    _signal_group(pid, signal.SIGINT)


def kill(pid: int) -> None:
    _signal_group(pid, signal.SIGKILL)


def _signal_group(pid: int, sig: signal.Signals) -> None:
    try:
        os.killpg(pid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def end_leftover(pid: int, run_dir: Path, timeout_s: float = 30.0,
                 clock=time.monotonic, sleep=time.sleep) -> bool:
    """End a run left by an earlier server, if that pid is still its run; True if one was.

    The pid is only trusted when its command line names ``run_dir`` (pids get reused).
    Waits until the whole process group is gone, at most ``timeout_s``.
    """
    if not _is_run_of(pid, run_dir):
        return False
    kill(pid)
    deadline = clock() + timeout_s
    while _group_alive(pid) and clock() < deadline:
        sleep(0.1)
    return True


def _is_run_of(pid: int, run_dir: Path) -> bool:
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return False
    return str(run_dir).encode() in cmdline


def _group_alive(pgid: int) -> bool:
    """Whether a process of the group still runs. Zombies don't count: a leftover's
    parent (the dead server) is gone, and whoever reaps orphans here may be slow."""
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            except (OSError, IndexError):
                continue
            if fields[0] != "Z" and fields[2] == str(pgid):
                return True
    return False


_ERROR = re.compile(r"^(Error|Unexpected error): (.*)$")


def failure_message(log_file: Path, exit_code: int | None) -> str:
    """Why a run failed: its last ``Error:`` line (and hint), else its exit code."""
    try:
        lines = log_file.read_text(errors="replace").splitlines()[-200:]
    except OSError:
        lines = []
    for i in range(len(lines) - 1, -1, -1):
        match = _ERROR.match(lines[i].strip())
        if match:
            hint = lines[i + 1].strip() if i + 1 < len(lines) else ""
            return match.group(2) + (f" {hint}" if hint.startswith("Hint:") else "")
    return f"toolkit run exited with code {exit_code}; see {log_file}."
