"""A CSV output for results CSV can't hold: refused before anything runs, and a
failure inside a write is told by its own words, not Ray's retry advice."""

from __future__ import annotations

import subprocess
import sys

from toolkit.error_causes import root_cause


def test_csv_output_of_list_results_is_refused_before_the_run(tmp_path):
    done = subprocess.run(
        [sys.executable, "-m", "toolkit.cli.main", "run", "tabular-predict", "--smoke",
         "--set", "data.output_format=csv", "--output", "out"],
        cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert done.returncode == 2, done.stderr
    assert "data.output_format: csv can't hold the result column 'probabilities'" in done.stderr
    assert "--set data.output_format=json" in done.stderr
    assert "Traceback" not in done.stderr
    assert not (tmp_path / "out").exists()


def test_root_cause_is_the_workers_error_not_rays_advice():
    told = RuntimeError(
        "ray::MapBatches(step)->Write() (pid=1, ip=192.0.2.2)\n"
        '  File "pyarrow/error.pxi", line 92, in pyarrow.lib.check_status\n'
        "pyarrow.lib.ArrowInvalid: Unsupported Type:list<item: double>\n"
        "Failed to apply UDF transform after 1/1 attempts (total backoff 0.0s).\n"
        "To change retry attempts, backoff, or which errors are retried, configure "
        "`ray.data.DataContext.get_current()` if you believe this to be transient.")
    assert root_cause(told) == "pyarrow.lib.ArrowInvalid: Unsupported Type:list<item: double>"
    assert root_cause(RuntimeError("Hint: not an error\nValueError: bad row")) == \
        "ValueError: bad row"
