"""How fast ``toolkit plan --tokens`` counts every row's prompt, and how close its total
is to what a real run writes in its token columns.

    python bench/plan_tokens.py                      # 100k rows, then 2,000 against a run
    python bench/plan_tokens.py --rows 1M --check-rows 500

Three figures:

1. ``toolkit plan text-industry --smoke --input customers.csv --rows N --tokens`` as a
   user runs it: the whole command's wall and CPU seconds, the counting pass's own
   rows/s (from Ray being up to the last row counted, as the plan prints it), and its
   rate once the workers were up (first counted batch to the last);
2. one counting worker's CPU time per row, in this process without Ray (the job's
   preprocess, the chat template, the tokenizer): the ceiling of rows/s per core, which
   holds on a busy machine where wall-clock rates don't;
3. the plan's input tokens over ``--check-rows`` rows against the sum of
   ``num_input_tokens`` a real run (transformers, the sample model) wrote for them,
   as a ratio (1.0000 is exact; the over-long rows a run refuses have no count there).

The tokenizer is the sample model's (``--smoke``), as in the tests; ``--model`` names
another whose tokenizer is on this machine or reachable.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from side_by_side import timed, toolkit_command  # noqa: E402


def rows_count(text: str) -> int:
    from toolkit.spec.models import parse_row_count

    count = parse_row_count(text)
    assert count is not None, "--rows needs a number"
    return count


def plan_tokens(csv: Path, rows: int, model: str | None, cwd: Path) -> tuple[dict, float, float]:
    """The plan's JSON, and the command's (wall, CPU) seconds."""
    command = [toolkit_command(), "plan", "text-industry", "--smoke", "--input", str(csv),
               "--rows", str(rows), "--tokens", "--format", "json"]
    if model:
        command += ["--model", model]
    wall, cpu = timed(command, cwd)
    done = subprocess.run(command, cwd=cwd, capture_output=True, text=True, check=True,
                          env={**os.environ, "RAY_ADDRESS": ""})
    return json.loads(done.stdout), wall, cpu


def cpu_per_row(csv: Path, rows: int, model: str | None) -> float:
    """CPU seconds per row of one counting worker, in this process (no Ray)."""
    import pyarrow.csv as pacsv

    from toolkit.engines.model_source import ModelLocation
    from toolkit.run.row_steps import engine_sampling_params
    from toolkit.run.prompt_tokens import _CountBatch, chat_stage
    from toolkit.samples.provider import SAMPLES
    from toolkit.spec.jobs.catalog import load_job
    from toolkit.spec.loading import load_job_spec

    job = load_job("text-industry")
    spec = load_job_spec(job, smoke=True, overrides={"engine.model": model} if model else None)
    stage, options = chat_stage(job, spec), job.options_of(spec)
    worker = _CountBatch(ModelLocation(stage.settings.model, SAMPLES).path(),
                         stage.planned.kind.ray_llm_prompt, {},
                         stage.definition.preprocess, options, {},
                         engine_sampling_params(spec.sampling,
                                                stage.definition.structured_output(options)),
                         spec.data.id_column)
    table = pacsv.read_csv(csv, convert_options=pacsv.ConvertOptions(
        column_types={"Index": "string"})).slice(0, rows)
    worker(table.slice(0, 2048))  # the first batch checks the fast paths against the slow
    started = time.process_time()
    for offset in range(2048, table.num_rows, 2048):
        worker(table.slice(offset, 2048))
    measured = max(1, table.num_rows - 2048)
    return (time.process_time() - started) / measured


def run_tokens(csv: Path, rows: int, cwd: Path) -> int:
    """The sum of num_input_tokens a real run of the first ``rows`` rows wrote."""
    import pyarrow.parquet as pq

    out = cwd / "run-out"
    command = [toolkit_command(), "run", "text-industry", "--smoke", "--input", str(csv),
               "--rows", str(rows), "--output", str(out), "--overwrite"]
    timed(command, cwd)
    column = pq.read_table(out, columns=["num_input_tokens"]).column("num_input_tokens")
    return sum(v for v in column.to_pylist() if v is not None)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", default="100k", help="rows to count (default 100k)")
    parser.add_argument("--check-rows", type=int, default=2000,
                        help="rows to compare with a real run's token columns (0: skip)")
    parser.add_argument("--model", help="another model for the tokenizer (default: the sample)")
    args = parser.parse_args()
    rows = rows_count(args.rows)
    from toolkit.samples.customers import write_customers_csv

    with tempfile.TemporaryDirectory() as scratch:
        cwd = Path(scratch)
        csv = write_customers_csv(cwd / "customers.csv", rows=rows, seed=0)
        cores = len(os.sched_getaffinity(0))
        plan, wall, cpu = plan_tokens(csv, rows, args.model, cwd)
        found = plan["prompt_tokens"]
        print(f"toolkit plan --tokens over {rows:,} rows on {cores} cores: "
              f"{found['input_tokens']['total']:,} input tokens, "
              f"{found['over_max_model_len']['count']:,} rows over max_model_len")
        print(f"  counting pass:    {found['rows_per_second']:>10,.0f} rows/s "
              f"({found['seconds']:.1f} s, Ray up to the last row)")
        streaming = found["streaming_rows_per_second"]
        if streaming:
            print(f"  workers up:       {streaming:>10,.0f} rows/s (first counted batch to the "
                  "last: the tokenising rate, the workers' start left out)")
        print(f"  whole command:    {rows / wall:>10,.0f} rows/s ({wall:.1f} s wall, "
              f"{cpu:.1f} CPU-s, Ray's start included)")
        per_row = cpu_per_row(csv, min(rows, 50_000), args.model)
        print(f"  one worker:       {1 / per_row:>10,.0f} rows/s per core "
              f"({per_row * 1e6:.0f} us CPU a row; x {cores} cores = "
              f"{cores / per_row:,.0f} rows/s ceiling)")
        if args.check_rows:
            small, _, _ = plan_tokens(csv, args.check_rows, args.model, cwd)
            counted = small["prompt_tokens"]["input_tokens"]
            over = small["prompt_tokens"]["over_max_model_len"]["count"]
            planned = counted["total"] - (counted["max"] if over == 1 else 0)
            written = run_tokens(csv, args.check_rows, cwd)
            print(f"plan vs a real run over {args.check_rows:,} rows: plan {planned:,} input "
                  f"tokens, run's num_input_tokens {written:,}, ratio "
                  f"{planned / written:.4f}" if written else "the run wrote no token counts")


if __name__ == "__main__":
    main()
