"""A local file's schema and its ``--rows`` slice are read here with Arrow, no Ray job.

The slice is the file's first rows in order, read as Ray's CSV reader reads them
(every column text), split into ``--partitions`` files; the schema comes from the
file's first block, and a file Arrow can't parse fails as it did through Ray.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from toolkit.errors import InputDataError
from toolkit.run.input.csv_files import CSV_BLOCK_BYTES, local_csv_schema
from toolkit.run.input.source import stage_input
from toolkit.run.output.run_directory import RunDirectory
from toolkit.spec.jobs.catalog import load_job
from toolkit.spec.loading import load_job_spec


def customers_csv(path: Path, rows: int) -> Path:
    lines = ["Index,Company,Phone 1"] + [f"{i},Firm {i},00{i}" for i in range(1, rows + 1)]
    path.write_text("\n".join(lines) + "\n")
    return path


def spec_for(source: Path, output: Path, **overrides):
    return load_job_spec(load_job("text-industry"), overrides={
        "data.input": str(source), "data.output": str(output), "engine.kind": "transformers",
        **overrides})


def test_rows_of_a_local_csv_are_its_first_rows_in_order_as_text(tmp_path: Path) -> None:
    spec = spec_for(customers_csv(tmp_path / "c.csv", 200), tmp_path / "out",
                    **{"data.rows": 50, "data.partitions": 4})
    run_dir = RunDirectory(spec.data.output)
    run_dir.prepare(spec, overwrite=False, resumable=True)
    staged = Path(stage_input(spec, run_dir))
    parts = sorted(staged.glob("part-*.parquet"))
    assert [pq.read_metadata(p).num_rows for p in parts] == [13, 13, 13, 11]
    table = pq.read_table(parts)
    assert table.schema == pa.schema([("Index", pa.string()), ("Company", pa.string()),
                                      ("Phone 1", pa.string())])
    assert table.column("Index").to_pylist() == [str(i) for i in range(1, 51)]
    assert table.column("Phone 1").to_pylist()[:2] == ["001", "002"]  # text, zeros kept
    assert run_dir.staged_input_complete()


def test_the_schema_of_a_local_csv_comes_from_its_first_block(tmp_path: Path) -> None:
    spec = spec_for(customers_csv(tmp_path / "c.csv", 3), tmp_path / "out")
    assert local_csv_schema(spec.data).names == ["Index", "Company", "Phone 1"]
    header_only = tmp_path / "header.csv"
    header_only.write_text("Index,Company\n")
    with pytest.raises(InputDataError, match="header.csv has no rows"):
        local_csv_schema(spec_for(header_only, tmp_path / "out").data)
    ragged = tmp_path / "ragged.csv"
    ragged.write_text("Index,Company\n1,Acme\n2,Beta,extra\n")
    with pytest.raises(InputDataError, match="ragged.csv"):
        local_csv_schema(spec_for(ragged, tmp_path / "out").data)
    # Anything else is left to Ray's readers.
    assert local_csv_schema(spec_for(tmp_path, tmp_path / "out", **{"data.format": "csv"}).data) \
        is None


def test_the_schema_of_a_big_csv_reads_one_block_and_a_quoted_newline_at_its_end_is_fine(
        tmp_path: Path) -> None:
    # Rows past the first block, one of them a quoted cell whose newline sits right
    # where the block is cut: the schema still comes back, and Arrow never reads the
    # file ahead (it read up to 32 blocks, 512 MiB, and kept them for the whole run).
    row = "1,Firm,001\n"
    rows_before = (CSV_BLOCK_BYTES - len("Index,Company,Phone 1\n")) // len(row) - 1
    cut = "2,\"Two\nlines\",002\n"
    big = tmp_path / "big.csv"
    with big.open("w") as f:
        f.write("Index,Company,Phone 1\n" + row * rows_before + cut)
        for _ in range(7):
            f.write(row * rows_before)
    spec = spec_for(big, tmp_path / "out")
    assert local_csv_schema(spec.data) == pa.schema([
        ("Index", pa.string()), ("Company", pa.string()), ("Phone 1", pa.string())])
    # Its peak memory, in a process of its own: the block and its rows parsed, about
    # 110 MiB; reading the whole file (8 blocks) ahead took 270.
    measure = (
        "import resource, sys\n"
        "from toolkit.run.input.csv_files import local_csv_schema\n"
        "from toolkit.spec.models import DataConfig\n"
        "before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss\n"
        "local_csv_schema(DataConfig(input=sys.argv[1], output=sys.argv[2], id_column='Index'))\n"
        "print((resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) * 1024)\n")
    grew = subprocess.run([sys.executable, "-c", measure, str(big), str(tmp_path / "out")],
                          capture_output=True, text=True, check=True).stdout
    assert int(grew) < 12 * CSV_BLOCK_BYTES
