"""End-to-end smoke-run figures: rows/s and peak memory as rows grow, or this
checkout's whole smoke run against an earlier commit's.

Runs ``toolkit run JOB --smoke --rows N`` in a subprocess for each N, sampling the
resident memory of its whole process tree (driver, raylet, workers) twice a
second, and prints seconds, rows/s and peak memory. Memory should stay roughly
flat as N grows: the pipeline streams and never materialises the dataset.

With ``--vs REV`` it times the first of those runs, start to exit, for this checkout
and for REV (checked out into a temporary git worktree, run with the same Python
and packages), in turns A B A B after one warm-up each, so the ratio holds while
the machine's speed drifts. Besides the whole run it prints when the first rows
and the last rows were written, read from the progress lines as they come.

Usage:
    python bench/smoke_run.py [--job text-industry] [--rows 1000 10000 50000]
    python bench/smoke_run.py --rows 1000 --vs 1bb9a67 [--repeat 5]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil

REPO = Path(__file__).resolve().parent.parent
PROGRESS_ROWS = re.compile(r"^(?:Progress|Done): ([\d,]+)/([\d,]+) rows")


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
            env={**os.environ, "RAY_ADDRESS": ""},
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


def timed_run(source: Path, job: str, rows: int, workdir: Path) -> dict[str, float]:
    """One smoke run of the toolkit in ``source``, in ``workdir`` (its own: versions'
    output directories differ): seconds from its start to the first rows written, to
    the last, and to its exit."""
    env = {**os.environ, "PYTHONPATH": str(source), "RAY_ADDRESS": "",
           "TOOLKIT_PROGRESS_INTERVAL": "0.1"}
    command = [sys.executable, "-m", "toolkit.cli.main", "run", job, "--smoke",
               "--rows", str(rows), "--overwrite", "--output", str(workdir / "out")]
    started = time.monotonic()
    marks: dict[str, float] = {}
    lines: list[str] = []
    with subprocess.Popen(command, cwd=workdir, env=env, stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, text=True) as proc:
        assert proc.stdout is not None
        for line in proc.stdout:
            lines.append(line)
            match = PROGRESS_ROWS.match(line)
            if not match:
                continue
            done, total = (int(g.replace(",", "")) for g in match.groups())
            if done > 0:
                marks.setdefault("first rows", time.monotonic() - started)
            if done >= total:
                marks.setdefault("last rows", time.monotonic() - started)
    marks["exit"] = time.monotonic() - started
    if proc.returncode != 0:
        raise SystemExit(f"toolkit run in {source} failed with exit code {proc.returncode}:\n"
                         + "".join(lines[-10:]))
    return marks


def compare(rev: str, job: str, rows: int, repeat: int) -> None:
    """Print this checkout's smoke run against ``rev``'s, median seconds and A/B."""
    with tempfile.TemporaryDirectory() as tmp:
        baseline = Path(tmp) / "baseline"
        subprocess.run(["git", "-C", str(REPO), "worktree", "add", "--detach", "--quiet",
                        str(baseline), rev], check=True)
        try:
            sources = {"this checkout": REPO, rev: baseline}
            runs: dict[str, list[dict[str, float]]] = {name: [] for name in sources}
            workdirs = {name: Path(tempfile.mkdtemp(dir=tmp)) for name in sources}
            for turn in range(repeat + 1):  # the first turn warms the caches, uncounted
                for name, source in sources.items():
                    marks = timed_run(source, job, rows, workdirs[name])
                    if turn:
                        runs[name].append(marks)
        finally:
            subprocess.run(["git", "-C", str(REPO), "worktree", "remove", "--force",
                            str(baseline)], check=False)
    print(f"toolkit run {job} --smoke --rows {rows}: median seconds from the command's "
          f"start, {repeat} runs each, taken in turns")
    print(f"{'':>16} {'first rows':>11} {'last rows':>10} {'exit':>7}")
    for name, marks in runs.items():
        print(f"{name[:16]:>16} " + " ".join(
            f"{statistics.median(m[k] for m in marks):>{w}.2f}"
            for k, w in (("first rows", 11), ("last rows", 10), ("exit", 7))))
    ours, theirs = runs["this checkout"], runs[rev]
    pairs = [a["exit"] / b["exit"] for a, b in zip(ours, theirs)]
    print(f"A/B exit: {statistics.median(pairs):.2f} median of the pairs "
          f"({min(pairs):.2f}-{max(pairs):.2f}); A = this checkout, B = {rev}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--job", default="text-industry")
    parser.add_argument("--rows", type=int, nargs="+", default=[1000, 10_000, 50_000])
    parser.add_argument("--vs", metavar="REV",
                        help="compare the first --rows run with this git revision's")
    parser.add_argument("--repeat", type=int, default=5, help="runs of each with --vs")
    args = parser.parse_args()
    if args.vs:
        compare(args.vs, args.job, args.rows[0], args.repeat)
        return
    print(f"{'rows':>8} {'wall s':>8} {'pipeline s':>11} {'rows/s':>8} {'peak RSS MiB':>13}")
    for rows in args.rows:
        r = measure(args.job, rows)
        print(f"{r['rows']:>8} {r['wall_s']:>8.1f} {r['pipeline_s']:>11.1f} "
              f"{r['rows_per_s']:>8.1f} {r['peak_rss_mib']:>13.0f}")


if __name__ == "__main__":
    main()
