"""Small model first: the big model's rows and the run's time, with and without a cascade.

Runs text-industry three times through ``toolkit run`` on the same rows, each in a
Ray of its own as a user's run is: the small model alone (its confidences pick the
threshold: their median unless ``--escalate-below`` is given), the big model alone,
and the cascade (small first, the rows under the threshold to the big one). Prints
rows each model answered, wall time and the ratios. With ``--label-column`` (an input
column holding the right industry) it also prints each run's accuracy.

Random-weight models (``--small 256x2 --big 1024x8``: hidden size x layers, with the
tiny model's tokenizer) give noise for answers but real work per token, so the times
are what the shapes cost; real models: ``--small ID --big ID``.

Usage:
    python bench/cascade.py [--rows 400] [--small 256x2] [--big 1024x8]
    python bench/cascade.py --input labelled.csv --label-column industry \\
        --small Qwen/Qwen2.5-0.5B-Instruct --big Qwen/Qwen2.5-7B-Instruct --accelerator L4
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import tempfile
from pathlib import Path

import pandas as pd

from engine_throughput import build_random_model

SHAPE = re.compile(r"^\d+x\d+$")


def model_of(name: str) -> str:
    """A ``HIDDENxLAYERS`` random model built here, or the name as given."""
    return build_random_model(name) if SHAPE.match(name) else name


def run(folder: Path, output: str, flags: list[str]) -> dict:
    """``toolkit run text-industry`` with ``flags``; its summary."""
    command = ["toolkit", "run", "text-industry", "--smoke", "--input", "rows.csv",
               "--output", output, "--overwrite", *flags]
    done = subprocess.run(command, cwd=folder, capture_output=True, text=True,
                          env={**os.environ, "RAY_ADDRESS": ""})
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(command)} failed:\n{done.stdout}\n{done.stderr}")
    return json.loads((folder / output / "_summary.json").read_text())


def accuracy(folder: Path, output: str, labels: pd.Series | None) -> str:
    if labels is None:
        return ""
    rows = pd.read_parquet(folder / output).set_index("Index")
    right = (rows["inferred_industry"] == labels.reindex(rows.index)).mean()
    return f", accuracy {right:.1%}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=400, help="generated rows (no --input)")
    parser.add_argument("--input", type=Path, help="a CSV of text-industry rows (Index, Company)")
    parser.add_argument("--label-column", help="--input's column with the right industry")
    parser.add_argument("--small", default="256x2", help="HIDDENxLAYERS or a model id/path")
    parser.add_argument("--big", default="1024x8", help="HIDDENxLAYERS or a model id/path")
    parser.add_argument("--escalate-below", type=float,
                        help="default: the small model's median confidence on these rows")
    parser.add_argument("--accelerator", help="GPU type per worker (default: CPU)")
    args = parser.parse_args()

    folder = Path(tempfile.mkdtemp(prefix="bench-cascade-"))
    labels = None
    if args.input is not None:
        rows = pd.read_csv(args.input, dtype={"Index": str})
        if args.label_column:
            labels = rows.set_index("Index")[args.label_column]
        rows.to_csv(folder / "rows.csv", index=False)
    else:
        subprocess.run(["toolkit", "samples", "customers", "--rows", str(args.rows),
                        "-o", "rows.csv"], cwd=folder, check=True, capture_output=True)
    small, big = model_of(args.small), model_of(args.big)
    where = ["--accelerator", args.accelerator] if args.accelerator else []

    alone_small = run(folder, "out/small", ["--model", small, *where])
    threshold = args.escalate_below
    if threshold is None:
        threshold = alone_small["confidence"]["inferred_industry_confidence"]["median"]
    alone_big = run(folder, "out/big", ["--model", big, *where])
    cascade = run(folder, "out/cascade", ["--model", big, "--cascade-model", small,
                                          "--escalate-below", str(threshold), *where])

    rows = alone_big["rows_written"]
    escalated = cascade["cascade"]["escalated"]
    print(f"{rows:,} rows, small {args.small}, big {args.big}, escalate below {threshold:g}")
    print(f"  small model alone: {alone_small['seconds']:8.1f} s"
          f"{accuracy(folder, 'out/small', labels)}")
    print(f"  big model alone:   {alone_big['seconds']:8.1f} s, big model rows {rows:,}"
          f"{accuracy(folder, 'out/big', labels)}")
    print(f"  cascade:           {cascade['seconds']:8.1f} s, big model rows {escalated:,} "
          f"({cascade['cascade']['escalation_rate']:.1%})"
          f"{accuracy(folder, 'out/cascade', labels)}")
    print(f"  cascade / big alone: time {cascade['seconds'] / alone_big['seconds']:.2f}x, "
          f"big model rows {escalated / rows:.2f}x")
    print(f"  (runs in {folder})")


if __name__ == "__main__":
    main()
