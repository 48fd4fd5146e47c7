"""End to end, text-industry on our transformers engine vs the seeds' pattern.

Both run as whole processes, each on its own local Ray, over the same rows (sample
customers in a Parquet file) and the same random-weight Llama of realistic
proportions, with one 1-CPU engine worker and batches of 64:

- seeds' pattern: ``bench/seed_pattern.py`` (read -> class UDF around
  ``pipeline("text-generation")`` -> write; same chat messages, ``max_new_tokens``
  16, greedy);
- ours: ``toolkit run text-industry --engine transformers --model DIR --input
  rows.parquet --batch-size 64 --concurrency 1 --accelerator none --set
  engine.num_cpus=1``.

Prints both wall times, rows/s, the ratio, and the prompt tokens per row with the
share that is a prefix common to every row (what prefix caching saves).

Usage:
    python bench/vs_seed_pattern.py [--rows 1024] [--random-model 512x8]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH))

from engine_throughput import build_random_model  # noqa: E402


def prompt_figures(model: str, rows: int) -> tuple[float, float]:
    """(prompt tokens per row, share of them every row starts with)."""
    from transformers import AutoTokenizer

    from toolkit.engines.prompt_prefix import shared_prefix_length
    from toolkit.samples.customers import customers_batch
    from toolkit.spec.catalog import load_job
    from toolkit.spec.loading import load_job_spec

    job = load_job("text-industry")
    options = job.options_of(load_job_spec(job))
    tokenizer = AutoTokenizer.from_pretrained(model)
    texts = [
        tokenizer.apply_chat_template(
            job.preprocess({"Company": company}, options)["messages"],
            add_generation_prompt=True, tokenize=False)
        for company in customers_batch(0, rows).column("Company").to_pylist()
    ]
    prompts = tokenizer(texts, add_special_tokens=False)["input_ids"]
    per_row = sum(len(p) for p in prompts) / len(prompts)
    return per_row, shared_prefix_length(prompts) / per_row


def timed(command: list[str], env: dict[str, str]) -> float:
    started = time.perf_counter()
    done = subprocess.run(command, env=env, capture_output=True, text=True)
    if done.returncode != 0:
        sys.exit(f"{' '.join(command)} failed:\n{done.stdout[-3000:]}{done.stderr[-3000:]}")
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1024)
    parser.add_argument("--random-model", default="512x8", metavar="HIDDENxLAYERS")
    parser.add_argument("--batch-size", type=int, default=64)
    args = parser.parse_args()

    from toolkit.samples.customers import customers_batch

    import pyarrow.parquet as pq

    model = build_random_model(args.random_model)
    work = Path(tempfile.mkdtemp(prefix="bench-vs-seed-"))
    rows = work / "rows.parquet"
    pq.write_table(customers_batch(0, args.rows), rows)
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}

    per_row, share = prompt_figures(model, args.rows)
    print(f"rows={args.rows} batch={args.batch_size} model={args.random_model} "
          f"(random Llama), 1 engine worker x 1 CPU")
    print(f"prompt tokens per row: {per_row:.0f}, common prefix {share:.0%}")

    seeds = timed([sys.executable, str(BENCH / "seed_pattern.py"), "--input", str(rows),
                   "--model", model, "--output", str(work / "seed-out"),
                   "--batch-size", str(args.batch_size)], env)
    ours = timed(["toolkit", "run", "text-industry", "--engine", "transformers",
                  "--model", model, "--input", str(rows), "--output", str(work / "ours-out"),
                  "--batch-size", str(args.batch_size), "--concurrency", "1",
                  "--accelerator", "none", "--set", "engine.num_cpus=1"], env)
    for name, seconds in [("seeds' pattern", seeds), ("toolkit run", ours)]:
        print(f"{name:16s} {seconds:7.1f} s  {args.rows / seconds:7.1f} rows/s")
    print(f"speed-up: {seeds / ours:.2f}x")


if __name__ == "__main__":
    main()
