"""What the side-by-side benchmarks share: one command timed as a whole process tree,
and the table of both sides' medians with their ratios to the first side.

CPU seconds are the whole tree's, sampled while the command runs: Ray's workers are
children of its raylet, which never waits for them, so the ``os.times()`` of the
benchmark process (children that were waited for) leaves most of them out.
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

import psutil

#: Seconds between looks at the process tree's CPU times.
SAMPLE_S = 0.2


def toolkit_command() -> str:
    """The ``toolkit`` command of the Python running this benchmark, else the one on PATH."""
    beside = Path(sys.executable).parent / "toolkit"
    return str(beside) if beside.exists() else "toolkit"


def timed(command: list[str], cwd: Path) -> tuple[float, float]:
    """(wall seconds, CPU seconds of its whole process tree) of one command; exits with
    its output's tail if it fails."""
    started = time.monotonic()
    process = subprocess.Popen(command, cwd=cwd, stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True,
                               env={**os.environ, "RAY_ADDRESS": ""})
    cpu = TreeCpu(process.pid)
    watcher = threading.Thread(target=cpu.follow, args=(process,), daemon=True)
    watcher.start()
    stdout, stderr = process.communicate()
    wall = time.monotonic() - started
    watcher.join()
    if process.returncode != 0:
        sys.exit(f"{' '.join(command)} failed (exit {process.returncode}):\n"
                 f"{stdout[-2000:]}{stderr[-3000:]}")
    return wall, cpu.seconds()


def in_turns(sides: Mapping[str, Callable[[int], list[str]]], cwd: Path, repeat: int,
             rows: int | None = None) -> dict[str, list[tuple[float, float]]]:
    """Each side's command once to warm up (file cache, imports), then in turns (A B A
    B), so the ratio holds while the machine's speed drifts: each side's (wall, CPU)
    seconds. A side's command for turn ``n`` ends with its output folder; with ``rows``,
    a side that wrote another number of rows stops the benchmark."""
    figures: dict[str, list[tuple[float, float]]] = {name: [] for name in sides}
    for command in sides.values():
        timed(command(0), cwd)
    for n in range(1, repeat + 1):
        for name, command in sides.items():
            figures[name].append(timed(command(n), cwd))
            written = rows_written(cwd / command(n)[-1]) if rows is not None else rows
            if written != rows:
                sys.exit(f"{name}: wrote {written:,} rows of {rows:,}")
    return figures


def rows_written(folder: Path) -> int:
    """Rows in the whole Parquet files a side wrote (bookkeeping ``_*`` files aside)."""
    import pyarrow.parquet as pq

    return sum(pq.read_metadata(f).num_rows for f in folder.glob("*.parquet")
               if not f.name.startswith("_"))


class TreeCpu:
    """User + system seconds of a process and everything it started, as last seen."""

    def __init__(self, pid: int) -> None:
        self.root = pid
        self.seen: dict[tuple[int, float], float] = {}  # (pid, start time) -> CPU s

    def follow(self, process: subprocess.Popen) -> None:
        while process.poll() is None:
            self.look()
            time.sleep(SAMPLE_S)

    def look(self) -> None:
        try:
            root = psutil.Process(self.root)
            members = [root, *root.children(recursive=True)]
        except psutil.Error:
            return
        for member in members:
            try:
                with member.oneshot():
                    times = member.cpu_times()
                    key = (member.pid, member.create_time())
            except psutil.Error:  # gone since the listing: its last look counts
                continue
            self.seen[key] = times.user + times.system

    def seconds(self) -> float:
        return sum(self.seen.values())


def print_sides(title: str, figures: Mapping[str, Sequence[tuple[float, float]]],
                rows: int | None = None) -> None:
    """Each side's median wall and CPU seconds (and rows/s), and its ratios to the
    first side's."""
    names = list(figures)
    base_wall = statistics.median(w for w, _ in figures[names[0]])
    base_cpu = statistics.median(c for _, c in figures[names[0]])
    print(f"\n{title}")
    rate: Callable[[float], str] = (lambda wall: f"{rows / wall:>10,.0f}") if rows else (
        lambda wall: "")
    print(f"  {'':<18}{'wall s':>9}{'CPU s':>9}{'rows/s' if rows else '':>10}"
          f"{'wall x':>9}{'CPU x':>8}")
    for name, runs in figures.items():
        wall = statistics.median(w for w, _ in runs)
        cpu = statistics.median(c for _, c in runs)
        print(f"  {name:<18}{wall:>9.1f}{cpu:>9.1f}{rate(wall) or '':>10}"
              f"{wall / base_wall:>9.2f}{cpu / base_cpu:>8.2f}")
