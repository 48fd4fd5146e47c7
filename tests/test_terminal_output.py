"""What ``toolkit run`` shows on a terminal: our progress line; Ray's output in the run's log.

The real command, in a subprocess under a pseudo-terminal (stderr is a TTY, as for a
user), reading everything it printed. No assertion depends on timing: the progress
line always ends with the finished count.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

from tests.terminal_session import ANSI, run_on_terminal

#: Ray's Python log lines: "2026-11-23 01:35:49,403\tINFO streaming_executor.py:215 -- ..."
RAY_LOG_LINE = re.compile(r"\d{2}:\d{2}:\d{2},\d{3}\s+(DEBUG|INFO|WARNING|ERROR)\s")
#: glog lines of Ray's C++ layer: "[2026-11-23 01:35:53,883 E 11446 11446] core_worker.cc:..."
GLOG_LINE = re.compile(r"^\[\S+ \S+ [EWF] \d+ \d+\]|^[EWF]\d{4} ")


def toolkit_command() -> str:
    here = Path(sys.executable).with_name("toolkit")
    return str(here) if here.exists() else shutil.which("toolkit") or "toolkit"


def run_in_terminal(args: list[str], cwd: Path, timeout_s: float = 600) -> tuple[str, int]:
    """Run toolkit on a pseudo-terminal (160 columns); everything it printed and its
    exit code."""
    return run_on_terminal([toolkit_command(), *args], cwd,
                           {**os.environ, "RAY_ADDRESS": "", "TERM": "xterm"}, timeout_s)


def screen_lines(text: str) -> list[str]:
    """What was printed, one entry per line or per redraw of the live line."""
    return [line.strip() for line in re.split(r"[\r\n]+", ANSI.sub("", text)) if line.strip()]


def test_a_run_on_a_terminal_shows_our_progress_and_keeps_rays_output_in_the_log(tmp_path):
    out = tmp_path / "out"
    printed, code = run_in_terminal(
        ["run", "text-industry", "--smoke", "--rows", "300", "--output", str(out), "--dashboard"],
        tmp_path)
    lines = screen_lines(printed)
    assert code == 0, printed[-3000:]

    assert not [line for line in lines if RAY_LOG_LINE.search(line)], lines
    assert not [line for line in lines if GLOG_LINE.search(line) or "core_worker.cc" in line]
    assert not [line for line in lines if line.startswith("E ") or "Error" in line], lines
    assert not [line for line in lines if "Running Dataset" in line or "row/s]" in line]

    progress = [line for line in lines if re.search(r"\d+/(\d+|\?) rows", line)]
    assert progress and "300/300 rows" in progress[-1] and "0 errors" in progress[-1]
    assert sum("Ray Dashboard: http" in line for line in lines) == 1
    log_file = out / "_logs" / "run.log"
    assert f"Ray's own output goes to {log_file} (-v shows it here)." in lines
    assert f"ray log:       {log_file}" in lines
    assert "rows written:  300 (300 ok, 0 with an error)" in lines

    log = log_file.read_text()
    assert "Execution plan of Dataset" in log  # Ray Data's INFO lines went here
    assert "ReadSampleCustomers" in log
    # Ray 2.60's C++ core worker writes this to fd 2 itself (ray-project/ray#53727);
    # it lands in the log, not on the terminal.
    assert "core_worker.cc" in log and "constructor arguments in the object store" in log


def test_verbose_brings_rays_output_back_and_writes_no_log(tmp_path):
    out = tmp_path / "out"
    result = subprocess.run(
        [toolkit_command(), "run", "text-industry", "--smoke", "--rows", "20",
         "--output", str(out), "-v"],
        capture_output=True, text=True, cwd=tmp_path, timeout=600,
        env={**os.environ, "RAY_ADDRESS": ""},
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert "Execution plan of Dataset" in result.stderr
    assert RAY_LOG_LINE.search(result.stderr)
    assert "Done: 20/20 rows (100%)" in result.stderr  # not a terminal: plain lines
    assert "Ray's own output goes to" not in result.stderr
    assert "ray log:" not in result.stdout
    assert "rows written:  20 (20 ok, 0 with an error)" in result.stdout
    assert not (out / "_logs").exists()
