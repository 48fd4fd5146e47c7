"""A small input still lands in pieces: a 640-row CSV at batch 64 is written as several
result files while it runs, so progress moves and a kill loses at most a piece.

Run as users run it: ``toolkit run`` on a CSV of their own, in its own process group
with its own local Ray, killed for real after its first piece and run again.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pyarrow.parquet as pq

from test_no_row_lost import killed_after_a_piece_and_resumed, toolkit_run_command
from toolkit.samples.customers import write_customers_csv

ROWS = 640


def run_small_csv(csv: Path, out: Path) -> subprocess.Popen:
    return toolkit_run_command(
        ["toolkit", "run", "text-industry", "--smoke", "--input", str(csv),
         "--batch-size", "64", "--concurrency", "1", "--set", "engine.num_cpus=1",
         "--output", str(out)])


def result_files(out: Path) -> list[Path]:
    return sorted(out.glob("*.parquet"))


def test_a_640_row_csv_is_written_in_pieces_and_a_kill_after_the_first_loses_nothing(
        tmp_path):
    csv = write_customers_csv(tmp_path / "customers.csv", rows=ROWS, seed=5)
    out = tmp_path / "out"

    killed_after_a_piece_and_resumed(lambda: run_small_csv(csv, out), out, ROWS, "Index")
    # Each run wrote its rows a batch or so at a time, not all at its end.
    pieces = result_files(out)
    assert len(pieces) >= 5, [pq.read_metadata(f).num_rows for f in pieces]
    # The reader cut the pieces: no repartition between the read and the model. (The
    # job's preprocess is a step of its own before the transformers engine, whose
    # actors' restarts are bounded, which a task step can't match to fuse; a resumed
    # run adds Ray Data's own checkpoint filter after the read.)
    plans = re.findall(r"Execution plan of Dataset text-industry[^:]*: (.*)",
                       (out / "_logs" / "run.log").read_text())
    assert len(plans) == 2 and all(plan.replace(
        "ActorPoolMapOperator[CheckpointFilter] -> ", "") == (
        "InputDataBuffer[Input] -> TaskPoolMapOperator[ReadCSV] -> "
        "TaskPoolMapOperator[MapBatches(prepare_batch)] -> "
        "ActorPoolMapOperator[MapBatches(TransformersChatEngine)] -> "
        "TaskPoolMapOperator[MapBatches(finish_batch)->Write]") for plan in plans), plans
