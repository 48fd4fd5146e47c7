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
import subprocess
import sys
import tempfile
import textwrap
from collections.abc import Callable
from pathlib import Path

from side_by_side import in_turns, print_sides

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


def sides(toolkit: str = "toolkit") -> dict[str, Callable[[object], list[str]]]:
    """The two commands, run in a :func:`project` folder: the N-th run of each writes
    its own output folder."""
    return {
        "bare Ray Data": lambda n: [sys.executable, "bare.py", "customers.csv", f"bare{n}"],
        "toolkit run": lambda n: [toolkit, "run", "./ident.yaml", "--output", f"out{n}"],
    }


def one_size(rows: int, repeat: int) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        folder = project(Path(tmp) / "project", rows)
        figures = in_turns(sides(), folder, repeat, rows)
        print_sides(f"{rows:,} rows ({repeat} runs each, in turns; medians)", figures, rows)


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
