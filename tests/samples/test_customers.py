"""The synthetic customers sample: schema, determinism and CSV round trips."""

from __future__ import annotations

import csv
import datetime
import re

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pacsv
import pytest

from toolkit.samples.customers import (
    CUSTOMER_COLUMNS,
    CUSTOMER_SCHEMA,
    customers_batch,
    write_customers_csv,
)


def read_customers_csv(path) -> pa.Table:
    # Read every column as written (no type inference turning phones into ints).
    return pacsv.read_csv(
        path,
        convert_options=pacsv.ConvertOptions(
            column_types={field.name: field.type for field in CUSTOMER_SCHEMA},
            strings_can_be_null=False,
        ),
    )


def test_columns_match_the_public_customers_file():
    table = customers_batch(0, 10)

    assert tuple(table.column_names) == CUSTOMER_COLUMNS
    assert CUSTOMER_COLUMNS[:3] == ("Index", "Customer Id", "First Name")
    assert table.schema.field("Index").type == pa.int64()
    assert all(table.schema.field(name).type == pa.string() for name in CUSTOMER_COLUMNS[1:])


def test_index_is_one_based_and_follows_the_range():
    assert customers_batch(0, 3)["Index"].to_pylist() == [1, 2, 3]
    assert customers_batch(10, 13)["Index"].to_pylist() == [11, 12, 13]
    assert customers_batch(5, 5).num_rows == 0


def test_rows_do_not_depend_on_how_the_range_is_split():
    whole = customers_batch(0, 100, seed=3)
    pieces = pa.concat_tables([customers_batch(0, 37, seed=3), customers_batch(37, 100, seed=3)])

    assert whole.equals(pieces)
    assert customers_batch(50, 51, seed=3).equals(whole.slice(50, 1))


def test_same_seed_same_rows_and_different_seeds_differ():
    assert customers_batch(0, 200, seed=1).equals(customers_batch(0, 200, seed=1))

    seed1 = customers_batch(0, 200, seed=1)
    seed2 = customers_batch(0, 200, seed=2)
    for name in CUSTOMER_COLUMNS[1:]:
        assert seed1[name].to_pylist() != seed2[name].to_pylist(), name


def test_values_look_like_the_original_file():
    table = customers_batch(0, 5000)
    rows = table.to_pylist()

    assert len(set(table["Customer Id"].to_pylist())) == 5000
    assert all(re.fullmatch(r"[0-9a-fA-F]{15}", row["Customer Id"]) for row in rows)
    phone = re.compile(
        r"(\d{3}-\d{3}-\d{4}|\(\d{3}\)\d{3}-\d{4}|\d{3}\.\d{3}\.\d{4}|\+1-\d{3}-\d{3}-\d{4}"
        r"|001-\d{3}-\d{3}-\d{4}|\d{10})(x\d{3,5})?"
    )
    assert all(phone.fullmatch(row["Phone 1"]) and phone.fullmatch(row["Phone 2"]) for row in rows)
    assert all(
        re.fullmatch(r"[a-z0-9]+@[a-z0-9]+\.(com|net|org|info|biz)", row["Email"]) for row in rows
    )
    assert all(
        re.fullmatch(r"https?://[a-z0-9.-]+\.(com|net|org|info|biz)/", row["Website"])
        for row in rows
    )
    dates = [datetime.date.fromisoformat(row["Subscription Date"]) for row in rows]
    assert min(dates) >= datetime.date(2020, 1, 1)
    assert max(dates) <= datetime.date(2022, 12, 31)
    assert len(set(table["First Name"].to_pylist())) > 200
    assert len(set(table["Last Name"].to_pylist())) > 200

    companies = table["Company"].to_pylist()
    # The styles of the original file, plus some with quotes to exercise CSV quoting.
    assert any(re.fullmatch(r"[A-Z][\w']+, [A-Z][\w']+ and [A-Z][\w']+", c) for c in companies)
    assert any(re.fullmatch(r"[A-Z][\w']+-[A-Z][\w']+", c) for c in companies)
    assert any(re.fullmatch(r"[A-Z][\w']+ (Inc|Group|LLC|Ltd|PLC|and Sons)", c) for c in companies)
    assert any("'" in c for c in companies)
    assert any('"' in c for c in companies)


def test_csv_round_trip_keeps_commas_quotes_and_apostrophes(tmp_path):
    path = write_customers_csv(tmp_path / "customers.csv", rows=1000, seed=0)

    assert path == tmp_path / "customers.csv"
    back = read_customers_csv(path)
    assert tuple(back.column_names) == CUSTOMER_COLUMNS
    assert back.num_rows == 1000
    assert back.equals(customers_batch(0, 1000, seed=0))
    companies = back["Company"].to_pylist()
    assert any(", " in c and " and " in c for c in companies)  # "Vega, Gibson and Rowland"
    assert any('"' in c for c in companies)
    assert pc.any(pc.match_substring(back["Country"], ",")).as_py()  # "Virgin Islands, British"


def test_csv_reads_with_the_standard_library_too(tmp_path):
    path = write_customers_csv(tmp_path / "customers.csv", rows=300, seed=5)

    with open(path, newline="", encoding="utf-8") as handle:
        records = list(csv.DictReader(handle))

    assert len(records) == 300
    assert tuple(records[0]) == CUSTOMER_COLUMNS
    assert [r["Company"] for r in records] == customers_batch(0, 300, seed=5)["Company"].to_pylist()
    assert records[-1]["Index"] == "300"


def test_chunking_does_not_change_the_file(tmp_path):
    one_chunk = write_customers_csv(tmp_path / "a.csv", rows=1000, seed=9)
    many_chunks = write_customers_csv(tmp_path / "b.csv", rows=1000, seed=9, chunk_rows=128)

    assert one_chunk.read_bytes() == many_chunks.read_bytes()
    assert one_chunk.read_bytes().count(b'"Index"') == 1  # header written once


def test_write_creates_parent_directories_and_leaves_no_partial_files(tmp_path):
    path = write_customers_csv(tmp_path / "nested" / "dir" / "empty.csv", rows=0)

    assert read_customers_csv(path).num_rows == 0
    assert [p.name for p in path.parent.iterdir()] == ["empty.csv"]


def test_invalid_arguments_are_rejected(tmp_path):
    with pytest.raises(ValueError):
        customers_batch(5, 4)
    with pytest.raises(ValueError):
        customers_batch(-1, 4)
    with pytest.raises(ValueError):
        write_customers_csv(tmp_path / "x.csv", rows=-1)
    with pytest.raises(ValueError):
        write_customers_csv(tmp_path / "x.csv", rows=10, chunk_rows=0)
