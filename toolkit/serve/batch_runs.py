"""One batch's run: a ``toolkit run openai-batch`` child process in its own process group.

A child process rather than a thread of the server, because a run is exactly what
``toolkit run`` does (its own Ray driver, its log, its exit code) and because a
process group can be stopped as a terminal's Ctrl-C stops it: SIGINT to the group
keeps every row already written. A server that was killed finds a child it left
behind (by its command line, which names the run directory) and ends its group
before the batch runs again: two drivers must never write one run directory at once. The new run
resumes from the run directory by ``custom_id``, so each request is answered once.
"""

from __future__ import annotations

import math
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

from pydantic import BaseModel, Field


#: The environment variable holding the key every API request must carry.
API_KEY_ENV = "TOOLKIT_API_KEY"


class RunFlags(BaseModel):
    """The engine flags every batch's ``toolkit run`` gets (the server's own flags)."""

    smoke: bool = Field(False, description="A tiny random-weight model, offline: for trying "
                                           "the API out; answers are noise.")
    model: str | None = Field(None, description="Model every batch runs on.")
    served_model_names: list[str] = Field(
        [], description="Names the requests' body.model may give for it (default: the "
                        "model as named); other lines are error lines (404).")
    engine: str | None = Field(None, description="Engine kind (vllm on GPUs, transformers "
                                                 "on CPUs, http for a served model).")
    address: str | None = Field(None, description="Ray cluster for the runs (default: "
                                                  "RAY_ADDRESS, else a local Ray per run, "
                                                  "which costs its start-up per batch).")
    batch_size: str | None = Field(None, description="Rows per engine batch.")
    concurrency: str | None = Field(None, description="Engine workers (model replicas).")
    accelerator: str | None = Field(None, description="GPU type per worker; none: CPUs.")
    spec_file: str | None = Field(None, description="Absolute path of a YAML spec for the "
                                                    "openai-batch job (runs start elsewhere).")
    sets: list[str] = Field([], description="--set KEY=VALUE overrides, in order.")

    def arguments(self) -> list[str]:
        """The flags as ``toolkit run`` takes them."""
        args: list[str] = ["--smoke"] if self.smoke else []
        for flag, value in (("--model", self.model), ("--engine", self.engine),
                            ("--address", self.address), ("--batch-size", self.batch_size),
                            ("--concurrency", self.concurrency),
                            ("--accelerator", self.accelerator), ("-f", self.spec_file)):
            if value is not None:
                args += [flag, value]
        for name in self.served_model_names:
            args += ["--served-model-name", name]
        for item in self.sets:
            args += ["--set", item]
        return args


#: Requests per block of a batch's run at most and at least (see :func:`partitions`).
MAX_BLOCK_ROWS = 256
MIN_BLOCK_ROWS = 16


def partitions(requests: int) -> int:
    """Blocks to split a batch's requests into: about ten, of 16 to 256 requests each.

    Rows are written (and counted in ``request_counts``) a block at a time, so a small
    batch in one block would show 0 requests done until all were; blocks under 16
    would cost more scheduling than they show.
    """
    block = min(MAX_BLOCK_ROWS, max(MIN_BLOCK_ROWS, math.ceil(requests / 10)))
    return max(1, math.ceil(requests / block))


def run_command(input_file: Path, run_dir: Path, flags: RunFlags,
                requests: int | None = None, endpoint: str | None = None) -> list[str]:
    """The child's command line: this Python's ``toolkit run openai-batch``.

    Args:
        requests: The batch's requests, to split them into :func:`partitions` (a
            ``--set data.partitions=N`` of the server's flags still wins).
        endpoint: The batch's endpoint, which the run answers (its other lines are
            error lines).
    """
    split = ["--partitions", str(partitions(requests))] if requests else []
    if endpoint is not None:
        split += ["--set", f"options.endpoint={endpoint}"]
    # As OpenAI's Batch API, a batch runs every line: failed lines go to its error
    # file instead of stopping it early.
    return [sys.executable, "-m", "toolkit", "run", "openai-batch",
            "--input", str(input_file), "--output", str(run_dir), *split, *flags.arguments(),
            "--set", "stop_loss.failure_rate=null"]


def start_run(input_file: Path, run_dir: Path, log_file: Path, flags: RunFlags,
              requests: int | None = None,
              endpoint: str | None = None) -> subprocess.Popen[bytes]:
    """Start the run in a new session (its own process group, away from the server's
    terminal: a Ctrl-C meant for the server doesn't stop the batches). The server's API
    key stays with the server: a run has no use for it."""
    env = {name: value for name, value in os.environ.items() if name != API_KEY_ENV}
    with open(log_file, "ab") as log:
        return subprocess.Popen(run_command(input_file, run_dir, flags, requests, endpoint),
                                cwd=run_dir.parent,
                                stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                start_new_session=True, env=env)


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


def end_leftovers(run_dir: Path, timeout_s: float = 30.0,
                  clock=time.monotonic, sleep=time.sleep) -> int:
    """End any run of ``run_dir`` that an earlier server left; return how many groups.

    Found by command line (a process with ``run_dir`` as an argument), not by a
    recorded pid: pids get reused, and a server killed between starting a child and
    recording its pid would otherwise leave one unseen. Its whole process group is
    killed, and this waits until it is gone, at most ``timeout_s``.
    """
    target = str(run_dir).encode()
    groups = {pgid for pgid, argv in _live_processes() if target in argv}
    for pgid in groups:
        kill(pgid)
    deadline = clock() + timeout_s
    while clock() < deadline and any(pgid in groups for pgid, _ in _live_processes()):
        sleep(0.1)
    return len(groups)


def _live_processes() -> Iterator[tuple[int, list[bytes]]]:
    """(process group, argv) of this machine's processes (Linux /proc), zombies left out:
    a leftover's parent is dead and whoever reaps orphans here may be slow."""
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            argv = (entry / "cmdline").read_bytes().split(b"\0")
        except (OSError, IndexError):
            continue
        if fields[0] != "Z":
            yield int(fields[2]), argv


_ERROR = re.compile(r"^(Error|Unexpected error): (.*)$")


def failure_message(log_file: Path, exit_code: int | None) -> str:
    """Why a run failed: its last ``Error:`` line (and hint), else its exit code. The
    line is the run's own and may name the server's paths: a client sees it only
    through :func:`~toolkit.serve.server_paths.without_server_paths`."""
    try:
        lines = log_file.read_text(errors="replace").splitlines()[-200:]
    except OSError:
        lines = []
    for i in range(len(lines) - 1, -1, -1):
        match = _ERROR.match(lines[i].strip())
        if match:
            hint = lines[i + 1].strip() if i + 1 < len(lines) else ""
            return match.group(2) + (f" {hint}" if hint.startswith("Hint:") else "")
    return (f"toolkit run exited with code {exit_code}; the server's log of this batch "
            f"({log_file.name}) says why.")
