"""CSV files as spreadsheets write them: read as one row per record, or refused saying why.

Excel and Google Sheets export a UTF-8 byte-order mark, CRLF line ends and quoted cells
holding line breaks and doubled quotes; Excel in much of Europe separates columns with
';', and on Windows saves "CSV" in cp1252. Each variant here is the bytes such a file
holds. The readable ones are read alike by every reader a run uses (the checks before
Ray, Ray's read, the staged ``--rows`` copy), with every id and cell exact; the others
are refused before Ray, naming the setting (``data.csv.delimiter``,
``data.csv.encoding``) that reads them. A real run's results are read back from Parquet.
"""

from __future__ import annotations

from pathlib import Path

import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner

from tests.faults.test_input_before_ray import error_of, refused_before_ray, run
from toolkit.cli.main import main
from toolkit.run.input import csv_files as reading
from toolkit.run.input.checks import check_input
from toolkit.run.input.reading import first_rows, open_input
from toolkit.run.output.fingerprint import results_fingerprint
from toolkit.spec.jobs.catalog import load_job
from toolkit.spec.loading import load_job_spec

#: (Index, Company): an id that must stay text, accents and the euro sign (in cp1252
#: too), doubled quotes, a cell with a line break, separators inside quotes.
ROWS = [("001", "Société Générale"), ("002", 'He said "hi"'), ("003", "two\nlines"),
        ("004", "Müller & Co €"), ("005", "Acme; Inc, Ltd\tx")]


def sheet(sep: str = ",", newline: str = "\n", bom: bool = False, encoding: str = "utf-8",
          rows: list[tuple[str, str]] = ROWS) -> bytes:
    """The bytes of a CSV file of ``rows`` as a spreadsheet writes it (a cell with a
    separator, quote or line break is quoted; a quote in it doubled)."""
    def cell(value: str) -> str:
        value = value.replace("\n", newline)
        if any(c in value for c in (",", ";", "\t", '"', "\n", "\r")):
            return '"' + value.replace('"', '""') + '"'
        return value
    lines = [sep.join(["Index", "Company"]), *(sep.join([i, cell(c)]) for i, c in rows)]
    return (("\ufeff" if bom else "") + newline.join(lines) + newline).encode(encoding)


# (name, bytes, --set values that read it, the cells' line break as read)
READABLE = [
    ("bom", sheet(bom=True), (), "\n"),
    ("crlf", sheet(newline="\r\n"), (), "\r\n"),
    ("cr", sheet(newline="\r"), (), "\r"),  # old Mac exports
    ("excel-utf8", sheet(newline="\r\n", bom=True), (), "\r\n"),
    ("semicolon", sheet(sep=";", newline="\r\n", bom=True), ("data.csv.delimiter=;",), "\r\n"),
    ("cp1252", sheet(newline="\r\n", encoding="cp1252"), ("data.csv.encoding=cp1252",), "\r\n"),
    ("tab", sheet(sep="\t"), (r"data.csv.delimiter=\t",), "\n"),
    ("utf-16", sheet(newline="\r\n", encoding="utf-16"), ("data.csv.encoding=utf-16",), "\r\n"),
    ("semicolon-latin-1", sheet(sep=";", encoding="latin-1", rows=[r for r in ROWS
                                                                   if "€" not in r[1]]),
     ("data.csv.delimiter=;", "data.csv.encoding=latin-1"), "\n"),
]


def expected(name: str, newline: str) -> list[dict[str, str]]:
    rows = [r for r in ROWS if name != "semicolon-latin-1" or "€" not in r[1]]
    return [{"Index": i, "Company": c.replace("\n", newline)} for i, c in rows]


def spec_for(path: Path, sets: tuple[str, ...] = (), rows: int | None = None):
    job = load_job("text-industry")
    overrides = {"data.input": str(path), "data.output": str(path.parent / "out")}
    if rows is not None:
        overrides["data.rows"] = rows
    return job, load_job_spec(job, smoke=True, overrides=overrides, sets=sets)


@pytest.mark.parametrize("name, content, sets, newline", READABLE, ids=[r[0] for r in READABLE])
def test_every_reader_reads_a_spreadsheet_csv_alike(name, content, sets, newline, local_ray,
                                                     tmp_path):
    """The checks before Ray, Ray's read and the staged ``--rows`` copy: the same rows."""
    path = tmp_path / f"{name}.csv"
    path.write_bytes(content)
    job, spec = spec_for(path, sets)
    want = expected(name, newline)

    assert check_input(job, spec) == len(want)  # every id read, each once
    read_by_ray = open_input(spec.data).select_columns(["Index", "Company"]).take_all()
    assert sorted(read_by_ray, key=lambda r: r["Index"]) == want
    _, limited = spec_for(path, sets, rows=3)
    check_input(job, limited)
    staged = [row for batch in first_rows(limited.data, 3) for row in batch.to_pylist()]
    assert staged == want[:3]


def written(out: Path) -> list[dict[str, str]]:
    return sorted(pq.read_table(out, columns=["Index", "Company"]).to_pylist(),
                  key=lambda r: r["Index"])


def test_a_run_writes_each_id_once_with_its_cells_exact(local_ray, tmp_path, monkeypatch):
    """One run (a run costs tens of seconds here) of the variant with most in it: Excel's
    ';' and cp1252, CRLF, quoted line breaks and quotes; the readers' test covers the rest."""
    monkeypatch.chdir(tmp_path)
    Path("sheet.csv").write_bytes(sheet(sep=";", newline="\r\n", encoding="cp1252"))

    result = CliRunner().invoke(main, [
        "run", "text-industry", "--smoke", "--input", "sheet.csv", "--output", "out",
        "--set", "data.csv.delimiter=;", "--set", "data.csv.encoding=cp1252"])

    assert result.exit_code == 0, result.output
    assert written(tmp_path / "out") == expected("cp1252", "\r\n")


#: Rows past the 64 KiB the header is read from: a bad byte there is found too.
FAR = 5_000
LATE = sheet(rows=[(f"{i:05d}", "plain") for i in range(FAR)] + [(f"{FAR}", "Société")],
             encoding="latin-1")
LATE_REFUSED = (
    f"Error: data.input: late.csv is not UTF-8 text (byte {14 + 12 * FAR + 9} is 0xe9), on "
    f"line {FAR + 2}, which reads as '{FAR},Société' in cp1252. Nothing was run.\nHint: "
    "Read it as cp1252 with --set data.csv.encoding=cp1252 (Excel on Windows saves \"CSV\" "
    "so), or re-save it as UTF-8 (iconv -f cp1252 -t utf-8 late.csv > late-utf8.csv).\n")

# (case, file name, bytes, flags, the text the user sees from "Error:" on)
REFUSED = [
    ("';' read as ','", "semi.csv", sheet(sep=";", newline="\r\n", bom=True), [],
     "Error: data.input: semi.csv has one column, 'Index;Company': it looks "
     "semicolon-separated (Index, Company), and it is read as comma-separated. Nothing was "
     "run.\nHint: Read it as semicolon-separated with --set data.csv.delimiter=';' (Excel "
     "writes CSV so where a comma is the decimal mark).\n"),
    ("';' read as ',', its rows as wide as its header", "semi.csv",
     sheet(sep=";", rows=[("001", "a"), ("002", "b")]), ["--rows", "10"],
     "Error: data.input: semi.csv has one column, 'Index;Company': it looks "
     "semicolon-separated (Index, Company), and it is read as comma-separated. Nothing was "
     "run.\nHint: Read it as semicolon-separated with --set data.csv.delimiter=';' (Excel "
     "writes CSV so where a comma is the decimal mark).\n"),
    ("tab read as ','", "tab.csv", sheet(sep="\t"), [],
     "Error: data.input: tab.csv has one column, 'Index\\tCompany': it looks tab-separated "
     "(Index, Company), and it is read as comma-separated. Nothing was run.\nHint: Read it "
     "as tab-separated with --set 'data.csv.delimiter=\\t'.\n"),
    ("',' read as ';'", "comma.csv", sheet(), ["--set", "data.csv.delimiter=;"],
     "Error: data.input: comma.csv has one column, 'Index,Company': it looks comma-separated "
     "(Index, Company), and it is read as semicolon-separated. Nothing was run.\nHint: Read "
     "it as comma-separated with --set data.csv.delimiter=,.\n"),
    ("cp1252 read as UTF-8", "cp1252.csv", sheet(encoding="cp1252"), [],
     "Error: data.input: cp1252.csv is not UTF-8 text (byte 22 is 0xe9), on line 2, which "
     "reads as '001,Société Générale' in cp1252. Nothing was run.\nHint: Read it as cp1252 "
     "with --set data.csv.encoding=cp1252 (Excel on Windows saves \"CSV\" so), or re-save "
     "it as UTF-8 (iconv -f cp1252 -t utf-8 cp1252.csv > cp1252-utf8.csv).\n"),
    ("Latin-1 far into the file", "late.csv", LATE, [], LATE_REFUSED),
    ("Latin-1 far into the rows run", "late.csv", LATE, ["--rows", f"{FAR + 1}"], LATE_REFUSED),
    ("UTF-16 read as UTF-8", "u16.csv", sheet(encoding="utf-16"), [],
     "Error: data.input: u16.csv is UTF-16 text (it starts with a UTF-16 byte-order mark), "
     "not utf-8. Nothing was run.\nHint: Read it as UTF-16 with --set "
     "data.csv.encoding=utf-16, or save it as CSV UTF-8.\n"),
    ("UTF-16 without a byte-order mark", "u16.csv", sheet(encoding="utf-16-le"), [],
     "Error: data.input: u16.csv is a quarter or more NUL bytes (0x00) at its start: it looks like "
     "UTF-16 text without a byte-order mark, not utf-8. Nothing was run.\nHint: Read it as "
     "UTF-16 with --set data.csv.encoding=utf-16-le, or save it as CSV UTF-8.\n"),
    ("no such separator", "comma.csv", sheet(), ["--set", "data.csv.delimiter=:"],
     "Error: Invalid spec for job text-industry + flags:\n  data.csv.delimiter: ':' is not a "
     "CSV separator; use ',', ';', '\\t' (tab) or '|' (pipe)\nHint: Fix the fields above in "
     "the job file, spec file, flags or --set values ('toolkit show text-industry' prints "
     "every key with its value).\n"),
]


@pytest.mark.parametrize("case, name, content, flags, expected", REFUSED,
                         ids=[c[0] for c in REFUSED])
def test_an_unreadable_dialect_is_refused_before_ray_naming_the_setting(
        case, name, content, flags, expected, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / name).write_bytes(content)

    with refused_before_ray(tmp_path / "out"):
        result = run("--input", name, *flags, "--output", "out/text-industry")

    assert result.exit_code == 2, result.output
    assert error_of(result) == expected
    assert "Traceback" not in result.output
    assert (tmp_path / name).read_bytes() == content


def test_quoted_line_breaks_past_the_readers_first_block_stay_in_their_rows(
        local_ray, tmp_path, monkeypatch):
    """Arrow's reader cuts a file into blocks at newlines unless told a quoted cell may
    hold one: the ids' read (Arrow's 1 MiB blocks) and Ray's (16 MiB, made 256 KiB here
    to keep the file small) both cross blocks here."""
    monkeypatch.setattr(reading, "CSV_BLOCK_BYTES", 256 << 10)
    rows = [(f"{i:05d}", f"{'x' * 500} one {i}\ntwo \"{i}\" {'y' * 500}") for i in range(1500)]
    path = tmp_path / "long.csv"
    path.write_bytes(sheet(newline="\r\n", bom=True, rows=rows))
    assert path.stat().st_size > 1.2 * (1 << 20)
    job, spec = spec_for(path)

    assert check_input(job, spec) == len(rows)
    read = open_input(spec.data).select_columns(["Index", "Company"]).take_all()
    assert sorted((r["Index"], r["Company"]) for r in read) == [
        (i, c.replace("\n", "\r\n")) for i, c in rows]


def test_a_spec_without_a_csv_setting_keeps_its_results_fingerprint():
    """Half-finished runs resume only while their fingerprint holds: the setting is out
    of the spec's dump (and so of the hash) unless it is set. (The built-in jobs'
    fingerprints themselves are pinned in tests/spec/test_engine_registry.py.)"""
    job = load_job("text-industry")
    default = load_job_spec(job)

    assert "csv" not in default.model_dump()["data"]
    spelled_out = load_job_spec(job, sets=("data.csv.delimiter=,", "data.csv.encoding=utf-8"))
    assert results_fingerprint(spelled_out) == results_fingerprint(default)
    assert results_fingerprint(load_job_spec(job, sets=("data.csv.delimiter=;",))) \
        != results_fingerprint(default)
