"""The toolkit's own work per row: ``toolkit run`` around a model that costs nothing,
against bare Ray Data doing the same read -> model -> write, same file, same machine.

The model is a user's predictor class that returns one of its input columns
(``batch_size: 4096``, ``concurrency: 1``); bare Ray Data is
``read_csv(f).map_batches(Ident, batch_size=4096, concurrency=1,
batch_format="pyarrow").write_parquet(out)`` with ``Ident`` appending that column.
Both are whole commands in fresh processes, run in turns (A B A B) after one warm-up
each, so the ratio holds while the machine's speed drifts. It prints wall seconds
and CPU seconds (the process tree's user + system time) of each, and their ratios.

Usage:
    python bench/vs_bare_ray_data.py --rows 100000 1000000 [--repeat 2]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

PREDICTOR = '''
class Ident:
    """A model that costs nothing: one input column back, as its answer."""

    def __call__(self, batch):
        return {"answer": batch["Company"]}
'''

JOB = '''
job: ident
predictor: ident.py:Ident
options:
  input_columns: [Company]
  output: {answer: string}
data: {input: customers.csv, id_column: Index, output: out}
engine: {batch_size: 4096, concurrency: 1, accelerator_type: none}
'''

BARE = '''
import sys, ray
import pyarrow as pa

class Ident:
    def __call__(self, batch: pa.Table) -> pa.Table:
        return batch.append_column("answer", batch.column("Company"))

ray.init(num_cpus={cpus}, include_dashboard=False, log_to_driver=False)
(ray.data.read_csv(sys.argv[1])
    .map_batches(Ident, batch_size=4096, concurrency=1, batch_format="pyarrow")
    .write_parquet(sys.argv[2]))
'''


def project(folder: Path, rows: int) -> Path:
    """A user's folder: the customers CSV, the predictor and the job file."""
    folder.mkdir(parents=True, exist_ok=True)
    subprocess.run(["toolkit", "samples", "customers", "--rows", str(rows), "-o",
                    str(folder / "customers.csv")], check=True, stdout=subprocess.DEVNULL)
    (folder / "ident.py").write_text(textwrap.dedent(PREDICTOR))
    (folder / "ident.yaml").write_text(JOB.lstrip())
    (folder / "bare.py").write_text(BARE.format(cpus=os.cpu_count()))
    return folder


def timed(command: list[str], cwd: Path) -> tuple[float, float]:
    """(wall seconds, CPU seconds of the whole process tree) of one command."""
    before = os.times()
    started = time.monotonic()
    done = subprocess.run(command, cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                          text=True, env={**os.environ, "RAY_ADDRESS": ""})
    wall = time.monotonic() - started
    after = os.times()
    if done.returncode != 0:
        sys.exit(f"{' '.join(command)} failed:\n{done.stderr[-3000:]}")
    # Ray's own daemons are children too; they are reaped when the command's Ray ends.
    cpu = (after.children_user - before.children_user) + (after.children_system
                                                            - before.children_system)
    return wall, cpu


def one_size(rows: int, repeat: int) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        folder = project(Path(tmp) / "project", rows)
        sides = {
            "bare Ray Data": lambda n: [sys.executable, "bare.py", "customers.csv", f"bare{n}"],
            "toolkit run": lambda n: ["toolkit", "run", "./ident.yaml", "--output", f"out{n}"],
        }
        figures: dict[str, list[tuple[float, float]]] = {name: [] for name in sides}
        for name, command in sides.items():  # warm-up: file cache, imports
            timed(command(0), folder)
        for n in range(1, repeat + 1):
            for name, command in sides.items():
                figures[name].append(timed(command(n), folder))
        bare_wall = statistics.median(w for w, _ in figures["bare Ray Data"])
        bare_cpu = statistics.median(c for _, c in figures["bare Ray Data"])
        print(f"\n{rows:,} rows ({repeat} runs each, in turns; medians)")
        print(f"  {'':<16}{'wall s':>9}{'CPU s':>9}{'wall x':>9}{'CPU x':>8}")
        for name, runs in figures.items():
            wall = statistics.median(w for w, _ in runs)
            cpu = statistics.median(c for _, c in runs)
            print(f"  {name:<16}{wall:>9.1f}{cpu:>9.1f}{wall / bare_wall:>9.2f}"
                  f"{cpu / bare_cpu:>8.2f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, nargs="+", default=[100_000, 1_000_000])
    parser.add_argument("--repeat", type=int, default=2)
    args = parser.parse_args()
    print(f"{os.cpu_count()} CPUs; toolkit from {Path(__file__).resolve().parent.parent}")
    for rows in args.rows:
        one_size(rows, args.repeat)


if __name__ == "__main__":
    main()
