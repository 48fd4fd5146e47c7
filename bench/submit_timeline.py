"""A submitted job's timeline: submit -> RUNNING -> first rows written -> done.

Starts a Ray head on this machine (its own ports and temp dir; stopped at the end by
its own processes) and submits ``toolkit submit JOB --smoke --rows N --address URL``
from a scratch project folder, the way a user submits to a cluster they started
with ``ray start --head``. It watches the job through Ray's own JobSubmissionClient
and the output folder, and prints seconds from the submit command's start to each
mark. The packages the toolkit needs are all in the head's Python, so the time to
RUNNING is what the toolkit adds (uploads, a package probe, any pip environment).

With ``--vs REV`` it runs this checkout and REV (a temporary git worktree, the same
Python and packages) in turns, A B A B. The first submit of each (to a cluster that
has seen none: a fresh head, empty caches) is shown apart from the median of the rest.

Usage:
    python bench/submit_timeline.py [--rows 200] [--repeat 3] [--vs 8fd4a1d]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
MARKS = ("RUNNING", "first rows", "done")


def timeline(source: Path, url: str, job: str, rows: int, workdir: Path) -> dict[str, float]:
    """Seconds from the submit command's start to each of :data:`MARKS`."""
    from ray.job_submission import JobStatus, JobSubmissionClient

    from toolkit.run.ray.auth import auth_headers

    out = workdir / f"out-{time.monotonic_ns()}"
    env = {**os.environ, "PYTHONPATH": str(source), "RAY_ADDRESS": ""}
    command = [sys.executable, "-m", "toolkit.cli.main", "submit", job, "--smoke", "--rows",
               str(rows), "--address", url, "--output", str(out)]
    started = time.monotonic()
    submitted = subprocess.run(command, cwd=workdir, env=env, capture_output=True, text=True,
                               timeout=900)
    if submitted.returncode != 0:
        raise SystemExit(f"submit from {source} failed:\n{submitted.stderr[-2000:]}")
    job_id = submitted.stdout.strip().splitlines()[0]
    client = JobSubmissionClient(url, headers=auth_headers(url, os.environ))
    marks: dict[str, float] = {"submitted": time.monotonic() - started}
    while "done" not in marks:
        status = client.get_job_status(job_id)
        now = time.monotonic() - started
        if status in (JobStatus.RUNNING, JobStatus.SUCCEEDED):
            marks.setdefault("RUNNING", now)
        if "first rows" not in marks and list(out.glob("part-*")):
            marks["first rows"] = now
        if status.is_terminal():
            if status != JobStatus.SUCCEEDED:
                raise SystemExit(f"job {job_id} from {source} ended {status}:\n"
                                 + client.get_job_logs(job_id)[-2000:])
            marks["done"] = now
            marks.setdefault("first rows", now)
        time.sleep(0.2)
    return marks


def main() -> None:
    from toolkit.cluster.backends.local_head import start_head, stop_head

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--job", default="text-industry")
    parser.add_argument("--rows", type=int, default=200)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--vs", metavar="REV", help="also time this git revision, in turns")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        head, process = start_head(Path(tempfile.mkdtemp(prefix="tkbench-", dir="/tmp")))
        sources = {"this checkout": REPO}
        if args.vs:
            baseline = Path(tmp) / "baseline"
            subprocess.run(["git", "-C", str(REPO), "worktree", "add", "--detach", "--quiet",
                            str(baseline), args.vs], check=True)
            sources[args.vs] = baseline
        try:
            runs: dict[str, list[dict[str, float]]] = {name: [] for name in sources}
            first: dict[str, dict[str, float]] = {}
            workdirs = {name: Path(tempfile.mkdtemp(dir=tmp)) for name in sources}
            for turn in range(args.repeat + 1):  # the first submit of each is shown apart
                for name, source in sources.items():
                    marks = timeline(source, head.dashboard_url, args.job, args.rows,
                                     workdirs[name])
                    if turn:
                        runs[name].append(marks)
                    else:
                        first[name] = marks
        finally:
            stop_head(head, process=process)
            if args.vs:
                subprocess.run(["git", "-C", str(REPO), "worktree", "remove", "--force",
                                str(sources[args.vs])], check=False)
    print(f"toolkit submit {args.job} --smoke --rows {args.rows} to a Ray head on this "
          f"machine: median seconds from the submit command's start, {args.repeat} runs each")
    print(f"{'':>22} " + " ".join(f"{mark:>11}" for mark in ("submitted", *MARKS)))
    for name, marks in runs.items():
        print(f"{name[:16] + ' first':>22} " + " ".join(
            f"{first[name][k]:>11.1f}" for k in ("submitted", *MARKS)))
        print(f"{name[:16] + ' median':>22} " + " ".join(
            f"{statistics.median(m[k] for m in marks):>11.1f}" for k in ("submitted", *MARKS)))


if __name__ == "__main__":
    main()
