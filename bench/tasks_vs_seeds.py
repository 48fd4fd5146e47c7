"""End to end, text-classify and embed on transformers: ``toolkit run`` against the
seeds' class-UDF pattern, same model folder, same rows, same batches and resources.

The models are the smoke runs' tiny random-weight BERTs, built once by the toolkit's
own builder (``sample:tiny-classifier``, with a NEGATIVE/POSITIVE head, and
``sample:tiny-encoder``, the same body without one); both sides load the very same
folder. The input is the generated ``sample:reviews`` table (``review_id``, ``review``,
``stars``; one review in 25 blank, one in 100 longer than the model's 512 positions)
written to one Parquet file of ``--rows`` rows.

- ours: ``toolkit run text-classify|embed --input reviews.parquet --model DIR --engine
  transformers --accelerator none --batch-size B --concurrency 1 --set
  engine.num_cpus=C`` (one engine actor of C CPUs; ``label`` + ``score``, or a unit-length
  mean-pooled ``embedding``; blank texts become error rows);
- the seeds' pattern: ``read_parquet -> map_batches(Cls, concurrency=1, batch_size=B,
  num_cpus=C) -> write_parquet``, where ``Cls`` loads the model in ``__init__`` and runs
  it over the batch in ``__call__``: ``pipeline("text-classification")`` called on the
  batch's texts with ``truncation=True`` (without it the long reviews fail), or
  ``AutoTokenizer`` + ``AutoModel`` with the same masked mean pooling and
  normalisation as ours. Torch gets the C threads Ray gives the actor.

Both are whole commands in fresh processes on their own local Ray, run in turns
(A B A B) after one warm-up each, so the ratio holds while the machine's speed drifts.
For each task it prints the medians of wall seconds and CPU seconds (the process
tree's user + system time) of each, rows/s, and their ratios to the seeds' pattern.

Usage:
    python bench/tasks_vs_seeds.py [--rows 20000] [--repeat 2] [--batch-size 256]
        [--num-cpus 1] [--tasks text-classify embed]
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
import numpy as np
import ray


class Classifier:
    def __init__(self, model):
        from transformers import pipeline

        self.pipe = pipeline("text-classification", model=model, device="cpu")

    def __call__(self, batch):
        texts = [str(t) for t in batch["review"]]
        results = self.pipe(texts, truncation=True, batch_size=len(texts))
        batch["label"] = np.array([r["label"] for r in results])
        batch["score"] = np.array([r["score"] for r in results])
        return batch


class Embedder:
    def __init__(self, model):
        import torch
        from transformers import AutoModel, AutoTokenizer

        self.torch = torch
        self.tokenizer = AutoTokenizer.from_pretrained(model)
        self.model = AutoModel.from_pretrained(model).eval()

    def __call__(self, batch):
        torch = self.torch
        encoded = self.tokenizer([str(t) for t in batch["review"]], padding=True,
                                 truncation=True, return_tensors="pt")
        with torch.inference_mode():
            hidden = self.model(**encoded).last_hidden_state
        mask = encoded["attention_mask"].unsqueeze(-1).to(hidden.dtype)
        pooled = (hidden * mask).sum(dim=1) / mask.sum(dim=1).clamp(min=1)
        batch["embedding"] = torch.nn.functional.normalize(pooled, dim=-1).numpy()
        return batch


task, data, model, batch_size, num_cpus, out = sys.argv[1:7]
ray.init(num_cpus=os.cpu_count(), include_dashboard=False, log_to_driver=False)
(ray.data.read_parquet(data)
    .map_batches(Classifier if task == "text-classify" else Embedder,
                 fn_constructor_kwargs={"model": model}, concurrency=1,
                 batch_size=int(batch_size), num_cpus=float(num_cpus))
    .write_parquet(out))
'''

MODELS = {"text-classify": "tiny-classifier", "embed": "tiny-encoder"}


def project(folder: Path, rows: int) -> Path:
    """The input Parquet file (and the seeds' script) in ``folder``."""
    import pyarrow.parquet as pq

    from toolkit.samples.tiny_task_models import sample_reviews

    folder.mkdir(parents=True, exist_ok=True)
    data = folder / "reviews.parquet"
    pq.write_table(sample_reviews(rows, seed=0), data)
    (folder / "seeds.py").write_text(SEEDS)
    return data


def one_task(task: str, folder: Path, data: Path, args: argparse.Namespace) -> None:
    from toolkit.samples.tiny_task_models import tiny_task_model_path

    model = str(tiny_task_model_path(MODELS[task]))
    toolkit = toolkit_command()
    sides = {
        "seeds' pattern": lambda n: [sys.executable, "seeds.py", task, str(data), model,
                                     str(args.batch_size), str(args.num_cpus),
                                     f"{task}-seeds{n}"],
        "toolkit run": lambda n: [toolkit, "run", task, "--input", str(data), "--model", model,
                                  "--engine", "transformers", "--accelerator", "none",
                                  "--batch-size", str(args.batch_size), "--concurrency", "1",
                                  "--set", f"engine.num_cpus={args.num_cpus}",
                                  "--output", f"{task}-out{n}"],
    }
    figures = in_turns(sides, folder, args.repeat, args.rows)
    print_sides(f"{task}, {args.rows:,} rows, sample:{MODELS[task]}; batch {args.batch_size}, "
                f"1 actor x {args.num_cpus:g} CPU ({args.repeat} runs each, in turns; medians)",
                figures, args.rows)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=20_000)
    parser.add_argument("--repeat", type=int, default=2)
    parser.add_argument("--batch-size", type=int, default=256)
    parser.add_argument("--num-cpus", type=float, default=1)
    parser.add_argument("--tasks", nargs="+", choices=list(MODELS), default=list(MODELS))
    args = parser.parse_args()
    print(f"{os.cpu_count()} CPUs; toolkit from {Path(__file__).resolve().parent.parent}")
    with tempfile.TemporaryDirectory(prefix="bench-tasks-") as tmp:
        folder = Path(tmp)
        data = project(folder, args.rows)
        for task in args.tasks:
            one_task(task, folder, data, args)


if __name__ == "__main__":
    main()
