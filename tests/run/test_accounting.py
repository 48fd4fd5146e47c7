"""End-of-run accounting: workers, GPU-hours and tokens, summed from what was written."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from toolkit.engines.transformers.chat_engine import TransformersChatEngine, generate_texts
from toolkit.run.output.run_directory import RunDirectory
from toolkit.run.output.summary import RunSummary, accounting, summarize_output
from toolkit.run.output.summary_text import format_summary
from toolkit.spec.jobs.catalog import load_job
from toolkit.spec.loading import load_job_spec

JOB = load_job("text-industry")


def test_gpu_hours_are_seconds_times_workers_times_gpus() -> None:
    spec = load_job_spec(JOB)  # vLLM on 4 L4 workers
    figures = accounting(spec, seconds=900, rows_per_second=40.0,
                         token_totals={"num_input_tokens": 9000, "num_generated_tokens": 900},
                         resumed=False)
    assert figures == {
        "engine_workers": 4, "gpus_per_worker": 1, "rows_per_second_per_worker": 10.0,
        "gpu_hours": 1.0, "input_tokens": 9000, "output_tokens": 900, "tokens_per_second": 11.0,
    }
    tensor_parallel = load_job_spec(JOB, sets=("engine.engine_kwargs.tensor_parallel_size=2",))
    assert accounting(tensor_parallel, 900, 40.0, {}, False)["gpu_hours"] == 2.0
    cpu = accounting(load_job_spec(JOB, smoke=True), 900, 40.0, {}, False)
    assert (cpu["gpus_per_worker"], cpu["gpu_hours"], cpu["input_tokens"]) == (0, 0.0, None)
    # A resumed run's tokens include earlier runs': no tokens/s.
    assert accounting(spec, 900, 40.0, {"num_input_tokens": 1, "num_generated_tokens": 1},
                      True)["tokens_per_second"] is None


def test_the_summary_sums_the_token_columns_of_the_written_rows(tmp_path: Path) -> None:
    spec = load_job_spec(JOB, smoke=True, overrides={"data.output": str(tmp_path / "out")})
    run_dir = RunDirectory(spec.data.output)
    run_dir.prepare(spec, overwrite=False, resumable=True)
    write_id = run_dir.begin_write()
    for part, rows in enumerate([[("1", 30, 2), ("2", 40, 3)], [("3", None, None)]]):
        pq.write_table(pa.table({
            "Index": [r[0] for r in rows],
            "inferred_industry": pa.array(["Retail" if r[1] else None for r in rows], pa.string()),
            "num_input_tokens": pa.array([r[1] for r in rows], pa.int64()),
            "num_generated_tokens": pa.array([r[2] for r in rows], pa.int64()),
            "error": pa.array([None if r[1] else "preprocess: blank" for r in rows], pa.string()),
        }), tmp_path / "out" / f"part-{write_id}_x_{part:06d}-0.parquet")

    summary = summarize_output(JOB, spec, run_dir, seconds=10.0, rows_in=3, rows_this_run=3)
    assert (summary.input_tokens, summary.output_tokens, summary.tokens_per_second) == (70, 5, 7.5)
    assert (summary.engine_workers, summary.gpus_per_worker, summary.gpu_hours) == (1, 0, 0.0)
    assert summary.rows_per_second_per_worker == 0.3
    saved = json.loads((tmp_path / "out" / "_summary.json").read_text())
    assert saved["input_tokens"] == 70 and saved["rows_per_second_per_worker"] == 0.3
    text = format_summary(summary)
    assert "  workers:       1 on CPU, 0.3 rows/s per worker (0 GPU-hours)\n" in text
    assert "  tokens:        70 in, 5 out (7.5 tokens/s)\n" in text


def test_summaries_written_before_accounting_still_load() -> None:
    old = RunSummary(job="j", output="o", rows_in=1, rows_written=1, rows_ok=1, error_rows=0,
                     seconds=1.0, rows_per_second=1.0, smoke=False)
    assert old.engine_workers is None and old.input_tokens is None
    assert "workers:" not in format_summary(old) and "tokens:" not in format_summary(old)
    gpu = old.model_copy(update={"engine_workers": 4, "gpus_per_worker": 1,
                                 "rows_per_second_per_worker": 12.5, "gpu_hours": 0.52})
    assert ("  workers:       4 x 1 GPU, 12.5 rows/s per worker, 0.52 GPU-hours"
            in format_summary(gpu))


def test_the_transformers_engine_reports_prompt_and_generated_tokens(tiny_chat_model: Path) -> None:
    engine = TransformersChatEngine(str(tiny_chat_model), {"max_model_len": 256})
    messages = [{"role": "user", "content": "Acme Corp"}]
    longer = [{"role": "user", "content": "Acme Corp, a company with a much longer name"}]
    params = {"temperature": 0.0, "max_tokens": 4}
    out = generate_texts(engine, [{"messages": m, "sampling_params": params, "error": None}
                                  for m in (messages, longer)])
    for row, conversation in zip(out, (messages, longer)):
        text = engine.tokenizer.apply_chat_template(conversation, add_generation_prompt=True,
                                                    tokenize=False)
        prompt = engine.tokenizer(text, add_special_tokens=False)["input_ids"]
        # Left padding of the shorter prompt is not counted.
        assert row["num_input_tokens"] == len(prompt)
        assert 1 <= row["num_generated_tokens"] <= 4
