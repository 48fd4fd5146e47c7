"""Memory stays flat as rows grow: the peak resident memory of a whole run at each of
``--rows``, against the smallest, for ``toolkit run`` and for bare Ray Data doing the
same read -> model -> write.

The job and the bare script are ``bench/vs_bare_ray_data.py``'s (a user's predictor
that costs nothing, ``batch_size`` 4096, one worker, over sample customers in a CSV),
so what grows with rows is the toolkit's own work: checkpoint ids, the summary, the
report. The peak is the process tree's (driver, Ray's daemons and workers; RSS summed,
sampled with psutil every 0.1 s, as ``bench/resume_at_90.py`` samples it), each run a
fresh process on its own local Ray, after one warm-up; medians of ``--repeat`` runs.

Usage:
    python bench/memory_flat.py [--rows 100000 1000000] [--repeat 1]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
from pathlib import Path

BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH))

from resume_at_90 import watch  # noqa: E402
from side_by_side import toolkit_command  # noqa: E402
from vs_bare_ray_data import project, sides  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, nargs="+", default=[100_000, 1_000_000])
    parser.add_argument("--repeat", type=int, default=1)
    args = parser.parse_args()
    print(f"{os.cpu_count()} CPUs; toolkit from {BENCH.parent}")
    commands = sides(toolkit_command())
    peaks: dict[str, dict[int, float]] = {name: {} for name in commands}
    walls: dict[str, dict[int, float]] = {name: {} for name in commands}
    with tempfile.TemporaryDirectory(prefix="bench-memory-") as tmp:
        for rows in sorted(args.rows):
            folder = project(Path(tmp) / f"rows-{rows}", rows)
            for name, command in commands.items():
                watch(command("warm-up"), folder, folder / "warm-up-out")
                runs = [watch(command(str(n)), folder, folder / f"run-{n}")
                        for n in range(args.repeat)]
                peaks[name][rows] = statistics.median(r.peak_mib for r in runs)
                walls[name][rows] = statistics.median(r.wall_s for r in runs)
    smallest = min(args.rows)
    print(f"\npeak resident memory of the process tree ({args.repeat} runs each; medians)")
    print(f"  {'':<16}{'rows':>11}{'wall s':>9}{'peak MiB':>10}{'x ' + f'{smallest:,}':>14}")
    for name in commands:
        for rows in sorted(args.rows):
            print(f"  {name:<16}{rows:>11,}{walls[name][rows]:>9.1f}{peaks[name][rows]:>10.0f}"
                  f"{peaks[name][rows] / peaks[name][smallest]:>13.2f}x")


if __name__ == "__main__":
    main()
