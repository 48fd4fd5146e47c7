"""End to end, tabular-predict: ``toolkit run tabular-predict`` against the seeds' tabular
pattern, same sklearn model file, same input, same machine.

The model is the smoke run's ``sample:tiny-tabular`` (a scikit-learn StandardScaler +
LogisticRegression pipeline saved with ``joblib.dump``), built once by the toolkit's
own builder; both sides load that very ``model.joblib``. The input is the generated
``sample:accounts`` table (``account_id`` and the four feature columns the model was
fitted on) written to one Parquet file of ``--rows`` rows in row groups of 100,000,
with its one-in-50 missing ``income`` filled in: the seeds' function has no answer
for a missing feature (scikit-learn raises on NaN), so both sides get rows it can run.

- ours: ``toolkit run tabular-predict --input accounts.parquet --model model.joblib
  --output DIR`` (the template's engine: a function UDF on CPU tasks, ``batch_size``
  10,000, ``num_cpus`` 2, ``concurrency`` 4; results ``prediction`` and
  ``probabilities``, plus the run folder's bookkeeping, summary and report);
- the seeds' pattern: ``ray.data.read_parquet(f).map_batches(predict, fn_kwargs={"model":
  model}, num_cpus=2, batch_size=10_000).write_parquet(out)``, with ``predict``
  stacking the feature columns and adding ``model.predict`` and
  ``model.predict_proba`` (the two columns ours writes).

Both are whole commands in fresh processes on their own local Ray, run in turns
(A B A B) after one warm-up each, so the ratio holds while the machine's speed drifts.
It prints the medians of wall seconds and CPU seconds (the process tree's user +
system time) of each, and their ratios to the seeds' pattern.

Usage:
    python bench/tabular_vs_seeds.py [--rows 1000000] [--repeat 2]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path

from side_by_side import in_turns, print_sides, toolkit_command

SEEDS = '''
import os, sys
import joblib
import numpy as np
import ray

FEATURES = {features!r}


def predict(batch, model):
    features = np.column_stack([batch[c] for c in FEATURES])
    batch["prediction"] = model.predict(features)
    batch["probabilities"] = model.predict_proba(features)
    return batch


ray.init(num_cpus=os.cpu_count(), include_dashboard=False, log_to_driver=False)
model = joblib.load(sys.argv[2])
(ray.data.read_parquet(sys.argv[1])
    .map_batches(predict, fn_kwargs={{"model": model}}, num_cpus=2, batch_size=10_000)
    .write_parquet(sys.argv[3]))
'''


def project(folder: Path, rows: int) -> tuple[Path, Path]:
    """The input Parquet file and the model file, in ``folder``."""
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    from toolkit.samples.tiny_task_models import (
        TABLE_FEATURES,
        TABULAR_MODEL_FILE,
        sample_table,
        tiny_task_model_path,
    )

    folder.mkdir(parents=True, exist_ok=True)
    model = tiny_task_model_path("tiny-tabular") / TABULAR_MODEL_FILE
    table = sample_table(rows, seed=0).drop_columns(["churned"])
    income = table.column("income")
    table = table.set_column(table.schema.get_field_index("income"), "income",
                             pc.fill_null(income, pc.mean(income)))
    data = folder / "accounts.parquet"
    pq.write_table(table, data, row_group_size=100_000)
    (folder / "seeds.py").write_text(SEEDS.format(features=list(TABLE_FEATURES)))
    return data, model


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--repeat", type=int, default=2)
    args = parser.parse_args()
    print(f"{os.cpu_count()} CPUs; toolkit from {Path(__file__).resolve().parent.parent}")
    toolkit = toolkit_command()
    with tempfile.TemporaryDirectory(prefix="bench-tabular-") as tmp:
        folder = Path(tmp)
        data, model = project(folder, args.rows)
        sides = {
            "seeds' pattern": lambda n: [sys.executable, "seeds.py", str(data), str(model),
                                         f"seeds{n}"],
            "toolkit run": lambda n: [toolkit, "run", "tabular-predict", "--input", str(data),
                                      "--model", str(model), "--output", f"out{n}"],
        }
        figures = in_turns(sides, folder, args.repeat, args.rows)
    print_sides(f"tabular-predict, {args.rows:,} rows, model {model.name} "
                f"(StandardScaler + LogisticRegression); batch 10,000, 2 CPUs per task "
                f"({args.repeat} runs each, in turns; medians)", figures, args.rows)

if __name__ == "__main__":
    main()
