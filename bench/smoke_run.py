"""End-to-end smoke-run figures: rows/s and peak memory as rows grow.

Runs ``toolkit run JOB --smoke --rows N`` in a subprocess for each N, sampling the
resident memory of its whole process tree (driver, raylet, workers) twice a
second, and prints seconds, rows/s and peak memory. Memory should stay roughly
flat as N grows: the pipeline streams and never materialises the dataset.

Usage:
    python bench/smoke_run.py [--job text-industry] [--rows 1000 10000 50000]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import tempfile
import time
from pathlib import Path

import psutil


def tree_rss(process: psutil.Process) -> int:
    total = 0
    for p in [process, *process.children(recursive=True)]:
        try:
            total += p.memory_info().rss
        except psutil.Error:
            continue
    return total


def measure(job: str, rows: int) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "out"
        started = time.monotonic()
        proc = subprocess.Popen(
            ["toolkit", "run", job, "--smoke", "--rows", str(rows), "--output", str(out)],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            env={**__import__("os").environ, "RAY_ADDRESS": ""},
        )
        watcher = psutil.Process(proc.pid)
        peak = 0
        while proc.poll() is None:
            peak = max(peak, tree_rss(watcher))
            time.sleep(0.5)
        seconds = time.monotonic() - started
        if proc.returncode != 0:
            raise SystemExit(f"toolkit run failed with exit code {proc.returncode}")
        summary = json.loads((out / "_summary.json").read_text())
    return {"rows": rows, "wall_s": seconds, "pipeline_s": summary["seconds"],
            "rows_per_s": summary["rows_per_second"], "peak_rss_mib": peak / 2**20}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--job", default="text-industry")
    parser.add_argument("--rows", type=int, nargs="+", default=[1000, 10_000, 50_000])
    args = parser.parse_args()
    print(f"{'rows':>8} {'wall s':>8} {'pipeline s':>11} {'rows/s':>8} {'peak RSS MiB':>13}")
    for rows in args.rows:
        r = measure(args.job, rows)
        print(f"{r['rows']:>8} {r['wall_s']:>8.1f} {r['pipeline_s']:>11.1f} "
              f"{r['rows_per_s']:>8.1f} {r['peak_rss_mib']:>13.0f}")


if __name__ == "__main__":
    main()
