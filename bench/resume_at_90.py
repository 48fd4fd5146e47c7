"""Resume after a crash at 90%: how soon a rerun writes again, how long it takes, and
what memory it needs, against a fresh run of the same rows on the same machine.

The job is ``bench/vs_bare_ray_data.py``'s: a user's predictor that costs nothing
(one input column back) over ``--rows`` sample customers in a CSV, ``batch_size``
4096, one worker, so what is measured is the toolkit's own work. Each turn:

- fresh run: ``toolkit run ./ident.yaml --output fresh-N`` from empty;
- killed run: the same command into ``resumed-N``, SIGKILLed (its whole process
  group, then any of its process tree left) as soon as the whole part files in the
  output folder hold >= ``--kill-at`` (default 90%) of the rows;
- rerun: the very same command again, which resumes from the run folder's
  ``_checkpoint``.

For the fresh run and the rerun it prints: seconds from the command's start until
its first new part file lands in the output folder (a whole ``part-*.parquet``
that was not there when the command started), its total wall seconds, and the peak
resident memory of its process tree (driver, Ray's daemons and workers; RSS summed,
sampled with psutil every 0.1 s) up to that first new file and over the whole run.
It also prints the size on disk of the ``_checkpoint`` folder the rerun starts from,
and checks that the resumed output holds every row exactly once (by count). One
warm-up fresh run goes first (file cache, imports); figures are medians of
``--repeat`` turns.

Usage:
    python bench/resume_at_90.py [--rows 1000000] [--repeat 2] [--kill-at 0.9]
"""

from __future__ import annotations

import argparse
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import psutil

BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH))

from side_by_side import toolkit_command  # noqa: E402
from vs_bare_ray_data import project  # noqa: E402  (customers.csv, ident.py, ident.yaml)

PARTIAL = ".partial-"  # a toolkit file being written; renamed to its name when whole
POLL_S = 0.1


@dataclass
class Watched:
    wall_s: float
    to_first_new_s: float | None  # None: no new part file (nothing left to write)
    peak_to_first_mib: float
    peak_mib: float
    killed_at_rows: int | None = None
    killed_after_s: float | None = None


def part_files(out: Path) -> set[str]:
    """Names of the output's result files, whole or still being written."""
    try:
        return {e.name for e in os.scandir(out) if e.name.startswith("part-")
                and e.name.endswith(".parquet") and PARTIAL not in e.name}
    except FileNotFoundError:
        return set()


def parquet_rows(path: Path) -> int | None:
    """Rows of a whole Parquet file; None while it is being written (no footer yet)."""
    import pyarrow.parquet as pq

    try:
        return pq.read_metadata(path).num_rows
    except (OSError, ValueError):  # ArrowInvalid is a ValueError
        return None


def tree(process: psutil.Process) -> list[psutil.Process]:
    try:
        return [process, *process.children(recursive=True)]
    except psutil.Error:
        return []


def tree_rss(processes: list[psutil.Process]) -> int:
    total = 0
    for p in processes:
        try:
            total += p.memory_info().rss
        except psutil.Error:
            continue
    return total


def watch(command: list[str], cwd: Path, out: Path, kill_at_rows: int | None = None) -> Watched:
    """Run ``command`` until it exits (or, with ``kill_at_rows``, until the output's
    whole part files hold that many rows, then SIGKILL it), sampling its tree's RSS."""
    before = part_files(out)
    whole: dict[str, int] = {}  # new part files with their footer written, and their rows
    started = time.monotonic()
    proc = subprocess.Popen(command, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True, start_new_session=True,
                            env={**os.environ, "RAY_ADDRESS": ""})
    # Drained in a thread so a chatty run never blocks on a full pipe.
    output: list[str] = []
    reader = threading.Thread(target=lambda: output.extend(proc.stdout), daemon=True)
    reader.start()
    root = psutil.Process(proc.pid)
    first_new: float | None = None
    peak = peak_to_first = 0
    killed_rows = killed_after = None
    while True:
        exited = proc.poll() is not None
        members = tree(root) if not exited else []
        rss = tree_rss(members)
        peak = max(peak, rss)
        for name in part_files(out) - before - whole.keys():
            rows = parquet_rows(out / name)
            if rows is not None:
                whole[name] = rows
        if first_new is None:
            peak_to_first = max(peak_to_first, rss)
            if whole:
                first_new = time.monotonic() - started
        if kill_at_rows is not None and not exited:
            written = sum(whole.values())
            if written >= kill_at_rows:
                killed_after = time.monotonic() - started
                killed_rows = written
                kill_tree(proc, members)
                break
        if exited:
            break
        time.sleep(POLL_S)
    proc.wait()
    wall = time.monotonic() - started
    reader.join(timeout=5)
    if killed_rows is None and proc.returncode != 0:
        sys.exit(f"{' '.join(command)} failed (exit {proc.returncode}):\n"
                 + "".join(output)[-4000:])
    if kill_at_rows is not None and killed_rows is None:
        sys.exit(f"{' '.join(command)} finished before {kill_at_rows:,} rows were seen "
                 "written: nothing to resume")
    return Watched(wall, first_new, peak_to_first / 2**20, peak / 2**20,
                   killed_rows, killed_after)


def kill_tree(proc: subprocess.Popen, members: list[psutil.Process]) -> None:
    """SIGKILL the command's process group, then whatever of its tree outlived it
    (Ray starts some of its processes in sessions of their own)."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    proc.wait()
    for p in members:
        try:
            p.kill()  # psutil checks it is still the process we saw (pid reuse)
        except psutil.Error:
            continue
    psutil.wait_procs(members, timeout=10)


def folder_size(path: Path) -> tuple[int, int]:
    """(bytes, files) under ``path``."""
    size = files = 0
    for parent, _, names in os.walk(path):
        for name in names:
            try:
                size += os.lstat(os.path.join(parent, name)).st_size
                files += 1
            except FileNotFoundError:
                continue
    return size, files


def rows_in(out: Path) -> tuple[int, list[str]]:
    """(rows in the output's whole part files, the names of any that don't read)."""
    rows, broken = 0, []
    for name in sorted(part_files(out)):
        count = parquet_rows(out / name)
        if count is None:
            broken.append(name)
        else:
            rows += count
    return rows, broken


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--repeat", type=int, default=2)
    parser.add_argument("--kill-at", type=float, default=0.9,
                        help="share of the rows written when the first run is killed")
    args = parser.parse_args()
    print(f"{os.cpu_count()} CPUs; toolkit from {BENCH.parent}")
    toolkit = toolkit_command()
    kill_rows = max(1, int(args.rows * args.kill_at))
    fresh: list[Watched] = []
    killed: list[Watched] = []
    rerun: list[Watched] = []
    checkpoints: list[tuple[int, int]] = []
    with tempfile.TemporaryDirectory(prefix="bench-resume-") as tmp:
        folder = project(Path(tmp) / "project", args.rows)

        def command(out: str) -> list[str]:
            return [toolkit, "run", "./ident.yaml", "--output", out]

        watch(command("warm-up"), folder, folder / "warm-up")
        for n in range(1, args.repeat + 1):
            fresh.append(watch(command(f"fresh-{n}"), folder, folder / f"fresh-{n}"))
            out = folder / f"resumed-{n}"
            killed.append(watch(command(out.name), folder, out, kill_at_rows=kill_rows))
            if (killed[-1].killed_at_rows or 0) >= args.rows:
                files = len(part_files(out))
                sys.exit(f"every row was written before the kill: {files} part files are too "
                         f"few to stop at {args.kill_at:.0%} of {args.rows:,} rows; use more "
                         "--rows")
            checkpoints.append(folder_size(out / "_checkpoint"))
            rerun.append(watch(command(out.name), folder, out))
            total, broken = rows_in(out)
            if total != args.rows or broken:
                sys.exit(f"the resumed run's output holds {total:,} rows, not {args.rows:,}"
                         + (f", and {len(broken)} part files that don't read: {broken[:3]}"
                            if broken else ""))

    def median(values: list[float | None]) -> float:
        present = [v for v in values if v is not None]
        return statistics.median(present) if present else float("nan")

    print(f"\n{args.rows:,} rows, a predictor that costs nothing ({args.repeat} turns; medians)")
    print(f"killed run: SIGKILL at {median([k.killed_at_rows for k in killed]):,.0f} rows "
          f"written ({median([k.killed_at_rows for k in killed]) / args.rows:.1%}), "
          f"{median([k.killed_after_s for k in killed]):.1f} s after its start")
    size, files = (statistics.median(c) for c in zip(*checkpoints))
    print(f"its _checkpoint: {size / 2**20:.2f} MiB on disk in {files:.0f} files")
    print(f"  {'':<18}{'to 1st new row s':>17}{'total s':>9}{'peak MiB to 1st':>16}"
          f"{'peak MiB':>10}")
    for name, runs in (("fresh run", fresh), ("rerun after kill", rerun)):
        print(f"  {name:<18}{median([r.to_first_new_s for r in runs]):>17.1f}"
              f"{median([r.wall_s for r in runs]):>9.1f}"
              f"{median([r.peak_to_first_mib for r in runs]):>16.0f}"
              f"{median([r.peak_mib for r in runs]):>10.0f}")
    f_first, r_first = (median([r.to_first_new_s for r in runs]) for runs in (fresh, rerun))
    f_wall, r_wall = (median([r.wall_s for r in runs]) for runs in (fresh, rerun))
    left = args.rows - median([k.killed_at_rows for k in killed])
    print(f"  rerun / fresh: to first new row {r_first / f_first:.2f}x, total "
          f"{r_wall / f_wall:.2f}x (the rerun had {left:,.0f} rows left, "
          f"{left / args.rows:.0%})")


if __name__ == "__main__":
    main()
