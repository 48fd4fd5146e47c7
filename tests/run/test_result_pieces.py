"""Results land in pieces: a small file's rows are cut into whole batches, so files
arrive as the run goes; a large input's pieces stay large."""

from __future__ import annotations

import pyarrow.parquet as pq
import pytest

from toolkit.run.input.source import rows_per_piece
from toolkit.run.driver import run_pipeline
from toolkit.samples.customers import customers_batch
from toolkit.samples.provider import SAMPLES
from toolkit.spec.jobs.catalog import load_job
from toolkit.spec.loading import load_job_spec


@pytest.mark.parametrize("total_rows, batch_size, rows", [
    (640, 64, 64),              # a tenth of a small input, in whole batches: 10 pieces
    (3000, 64, 320),
    (10, 64, 64),               # never less than a batch
    (1_000_000, 64, 32 * 64),   # 489 files at a million rows, not a million
    (None, 64, 32 * 64),        # total unknown (a file Arrow cannot read ahead): the largest piece
])
def test_rows_per_piece(total_rows, batch_size, rows):
    assert rows_per_piece(total_rows, batch_size) == rows


def test_a_640_row_parquet_file_read_as_one_block_is_written_in_ten_pieces(
        local_ray, tmp_path):
    rows = tmp_path / "customers.parquet"
    pq.write_table(customers_batch(0, 640), rows)  # one row group: one block as Ray reads it
    job = load_job("text-industry")
    spec = load_job_spec(job, smoke=True, overrides={
        "data.input": str(rows), "data.output": str(tmp_path / "out"),
        "engine.batch_size": 64, "engine.concurrency": 1})

    summary = run_pipeline(job, spec, samples=SAMPLES)

    pieces = sorted((tmp_path / "out").glob("part-*.parquet"))
    assert [pq.read_metadata(f).num_rows for f in pieces] == [64] * 10
    ids = pq.read_table(tmp_path / "out", columns=["Index"])["Index"].to_pylist()
    assert sorted(ids) == list(range(1, 641))
    assert summary.rows_written == 640
