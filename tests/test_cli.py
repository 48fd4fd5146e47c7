"""The toolkit command as users type it: output text and exit codes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner

from toolkit.cli.main import main

# pyarrow and pandas: what reading a run (and writing its report) imports, ~0.5 s more.
HEAVY = ("ray", "torch", "transformers", "vllm", "pyarrow", "pandas")

CHECK_IMPORTS = """
import sys
from toolkit.cli.main import main
try:
    main({args!r}, prog_name="toolkit")
except SystemExit as exit:
    code = exit.code
print("HEAVY:" + ",".join(m for m in {heavy!r} if m in sys.modules))
"""


@pytest.mark.parametrize("args", [["--help"], ["show", "text-industry", "--rows", "1M"],
                                  ["run", "--help"], ["report", "--help"], ["jobs"]])
def test_fast_commands_do_not_import_heavy_libraries(args):
    result = subprocess.run(
        [sys.executable, "-c", CHECK_IMPORTS.format(args=args, heavy=HEAVY)],
        capture_output=True, text=True, check=True,
    )
    assert result.stdout.strip().splitlines()[-1] == "HEAVY:"


def test_show_prints_the_effective_spec_as_yaml():
    result = CliRunner().invoke(main, ["show", "text-industry", "--rows", "10k",
                                       "--model", "Qwen/Qwen2.5-0.5B-Instruct"])
    assert result.exit_code == 0
    assert "  rows: 10000\n" in result.output
    assert "  model: Qwen/Qwen2.5-0.5B-Instruct\n" in result.output
    assert result.output.startswith("job: text-industry\nprompt:\n")


def test_spec_errors_exit_2_with_the_field_and_no_traceback():
    result = CliRunner().invoke(main, ["show", "text-industry", "--rows", "-5",
                                       "--set", "engine.batch_size=0"])
    assert result.exit_code == 2
    assert "data.rows: row count must be positive" in result.output
    assert "engine.batch_size: Input should be greater than 0 (got 0)" in result.output
    assert "Traceback" not in result.output


def test_unknown_job_exits_2_and_lists_jobs():
    result = CliRunner().invoke(main, ["show", "text-industri"])
    assert result.exit_code == 2
    assert "Unknown job 'text-industri'. Available jobs: " in result.output


def test_samples_customers_writes_the_seed_schema(tmp_path: Path):
    result = CliRunner().invoke(main, ["samples", "customers", "--rows", "2k",
                                       "-o", str(tmp_path / "c.csv")])
    assert result.exit_code == 0, result.output
    assert "Wrote 2,000 customers to" in result.output
    header = (tmp_path / "c.csv").read_text().splitlines()[0]
    assert header == ('"Index","Customer Id","First Name","Last Name","Company","City",'
                      '"Country","Phone 1","Phone 2","Email","Subscription Date","Website"')


def test_smoke_run_end_to_end_from_the_command_line(tmp_path: Path):
    """README's main command, run as a user would: its own local Ray (fewer rows: the docs
    test runs README's 1,000 and compares what it prints)."""
    out = tmp_path / "out"
    result = subprocess.run(
        ["toolkit", "run", "text-industry", "--rows", "300", "--smoke", "--output", str(out)],
        capture_output=True, text=True, env={**os.environ, "RAY_ADDRESS": ""}, timeout=600,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert "Job text-industry finished in" in result.stdout
    assert "rows in:       300" in result.stdout
    assert "rows written:  300 (300 ok, 0 with an error)" in result.stdout
    assert "NOT meaningful predictions" in result.stdout
    # The local Ray runs without its dashboard unless asked (--dashboard).
    assert "Ray Dashboard" not in result.stderr

    table = pq.read_table(out)
    choices = ["Law Firm", "Healthcare", "Technology", "Retail", "Consulting",
               "Manufacturing", "Finance", "Real Estate", "Other"]
    assert table.num_rows == 300
    assert sorted(table["Index"].to_pylist()) == list(range(1, 301))
    assert set(table["inferred_industry"].to_pylist()) <= set(choices)
    from toolkit.samples.customers import customers_batch

    expected = customers_batch(0, 300, seed=0)
    written = table.sort_by("Index")
    for column in expected.column_names:
        assert written[column].to_pylist() == expected[column].to_pylist(), column
    summary = json.loads((out / "_summary.json").read_text())
    assert summary["rows_in"] == summary["rows_written"] == 300


def test_secrets_in_the_environment_never_reach_show_output(monkeypatch):
    monkeypatch.setenv("HF_TOKEN", "hf_secret_value_123")
    result = CliRunner().invoke(main, ["show", "text-industry", "--smoke"])
    assert result.exit_code == 0
    assert "hf_secret_value_123" not in result.output
