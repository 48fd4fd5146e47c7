"""An id column that isn't text or whole numbers is refused before Ray, never run into a crash.

Rows are written, resumed and reported by ``data.id_column``. A Parquet or JSON id
column of records, lists, maps, floats, bytes, nulls, timestamps or a pandas category
used to run every row, then end the process with a segmentation fault (exit 139, no
message) in the summary's sort of the first ids (Arrow's ``select_k_unstable`` has no
struct kernel and crashes rather than raising). Each such input is now refused in a
second, naming the column, its type and the fix; integer types of every width and
text of every kind still run. The summary's own sorting of ids never crashes either,
whatever an output folder holds.
"""

from __future__ import annotations

import datetime
import subprocess
import sys
import textwrap
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from tests.faults.test_input_before_ray import error_of, refused_before_ray, run

ROWS = 6
HINT = ("Hint: Key the rows on a column of text or whole numbers with --set "
        "data.id_column=<column> (the other columns: Company), or write Index as text or "
        "integers in the input (pandas: df['Index'] = df['Index'].astype(str)).\n")

#: (case, the id column's values, what the refusal says of them)
REFUSED = [
    ("record", pa.array([{"region": "eu", "n": i} for i in range(ROWS)]),
     "struct<region: string, n: int64>: nested values (lists, records or maps), which "
     "can't be compared as ids"),
    ("list", pa.array([[i, i + 1] for i in range(ROWS)]),
     "list<element: int64>: nested values (lists, records or maps), which can't be "
     "compared as ids"),
    ("map", pa.array([[("k", i)] for i in range(ROWS)], pa.map_(pa.string(), pa.int64())),
     "map<string, int64 ('Index')>: nested values (lists, records or maps), which can't be compared "
     "as ids"),
    ("float", pa.array([i + 0.5 for i in range(ROWS)]),
     "double: floating-point numbers, which don't key rows exactly (1.0 and "
     "1.0000000000000002 print alike; a CSV or JSON round trip may change them)"),
    ("pandas category", pa.array([f"c{i}" for i in range(ROWS)]).dictionary_encode(),
     "dictionary<values=string, indices=int32, ordered=0>: dictionary-encoded values (a "
     "pandas 'category'), which Arrow can't match as ids"),
    ("bytes", pa.array([f"{i}".encode() for i in range(ROWS)]),
     "binary: raw bytes, which can't be shown or typed as ids"),
    ("all null", pa.nulls(ROWS), "null: no values at all (every id is null)"),
    ("string_view", pa.array([f"c{i}" for i in range(ROWS)], pa.string_view()),
     "string_view: text in Arrow's string_view layout, which Arrow's take and filter "
     "kernels (and so Ray Data) don't handle yet"),
    ("timestamp", pa.array([datetime.datetime(2026, 1, 1 + i) for i in range(ROWS)]),
     "timestamp[us]: neither text nor whole numbers"),
]


def accounts(ids: pa.Array) -> pa.Table:
    return pa.table({"Index": ids, "Company": [f"Company {i}" for i in range(len(ids))]})


def refusal(source: str, type_and_why: str) -> str:
    return (f"Error: data.id_column: column 'Index' of {source} is of type {type_and_why}. "
            "Rows are written, reported and resumed by their id, so an id must be text or a "
            f"whole number. Nothing was run.\n{HINT}")


@pytest.mark.parametrize("case, ids, why", REFUSED, ids=[c[0] for c in REFUSED])
def test_an_id_column_of_another_type_is_refused_before_ray(case, ids, why, tmp_path,
                                                            monkeypatch):
    monkeypatch.chdir(tmp_path)
    pq.write_table(accounts(ids), "accounts.parquet")

    with refused_before_ray(tmp_path / "out"):
        result = run("--input", "accounts.parquet", "--output", "out/industry")

    assert result.exit_code == 2, result.output
    assert error_of(result) == refusal("accounts.parquet", why)
    assert "Traceback" not in result.output


def test_a_folder_is_refused_with_or_without_rows(tmp_path, monkeypatch):
    """A folder's ids are read whole for a run of every row, and only its schema with
    ``--rows`` (its first rows are staged by Ray): both refuse before Ray."""
    monkeypatch.chdir(tmp_path)
    Path("parts").mkdir()
    for part in range(2):
        pq.write_table(accounts(pa.array([{"n": part * 10 + i} for i in range(ROWS)])),
                       f"parts/{part}.parquet")

    for flags in ([], ["--rows", "3"]):
        with refused_before_ray(tmp_path / "out"):
            result = run("--input", "parts", "--output", "out/industry", *flags)
        assert result.exit_code == 2, result.output
        assert "column 'Index' of parts is of type struct<n: int64>: nested values" \
            in error_of(result), flags
        assert "Traceback" not in result.output


def test_a_json_lines_file_of_object_or_fractional_ids_is_refused(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    Path("objects.jsonl").write_text('{"Index": {"shop": 1}, "Company": "a"}\n'
                                     '{"Index": {"shop": 2}, "Company": "b"}\n')
    Path("halves.jsonl").write_text('{"Index": 1.5, "Company": "a"}\n'
                                    '{"Index": 2.5, "Company": "b"}\n')

    for name, why in (("objects.jsonl", "struct<shop: int64>: nested values"),
                      ("halves.jsonl", "double: floating-point numbers")):
        with refused_before_ray(tmp_path / "out"):
            result = run("--input", name, "--output", "out/industry")
        assert result.exit_code == 2, result.output
        assert f"column 'Index' of {name} is of type {why}" in error_of(result)


@pytest.mark.parametrize("id_type", [pa.int8(), pa.uint64(), pa.large_string()], ids=str)
def test_text_and_whole_numbers_of_any_width_are_ids(id_type, tmp_path):
    """What preflight lets through: checked in-process, no run needed."""
    from toolkit.run.input.checks import check_input
    from toolkit.spec.jobs.catalog import load_job
    from toolkit.spec.loading import load_job_spec

    ids = pa.array([str(i) if pa.types.is_large_string(id_type) else i for i in range(ROWS)])
    pq.write_table(accounts(ids.cast(id_type)), tmp_path / "accounts.parquet")
    job = load_job("text-industry")
    spec = load_job_spec(job, overrides={"data.input": str(tmp_path / "accounts.parquet"),
                                         "data.output": str(tmp_path / "out")})

    assert check_input(job, spec) == ROWS


def test_the_summary_never_crashes_on_the_ids_of_an_older_output(tmp_path):
    """An output folder written before ids were checked may hold any id type: picking
    the first rows and looking for repeats must return, not end the process (in a
    process of its own, since a crash would take pytest with it)."""
    script = textwrap.dedent("""
        import pyarrow as pa
        from toolkit.run.output.summary import first_rows, repeated_ids

        for ids in (pa.array([{"n": 2}, {"n": 1}, {"n": 1}]), pa.array([[2], [1], [1]]),
                    pa.array(["b", "a", "a"]).dictionary_encode()):
            table = pa.table({"Index": ids, "error": pa.nulls(3, pa.string())})
            assert first_rows(table, "Index", 2).num_rows == 2
            assert repeated_ids(table["Index"]) is None
        ids = pa.array([3, 1, 2, 1])
        assert first_rows(pa.table({"Index": ids}), "Index", 2)["Index"].to_pylist() == [1, 1]
        assert repeated_ids(pa.chunked_array([ids])) == (1, "1")
        print("returned")
    """)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          timeout=120)

    assert done.returncode == 0, (done.returncode, done.stderr[-2000:])
    assert done.stdout.strip() == "returned"
