"""An input edited under a run: a rerun says what changed and goes on only when told.

One story, as a user lives it, through the `toolkit` command in its own process: a run
over a CSV is killed after its first result file, the CSV is edited (a written row's
text fixed, rows added), and the same command is refused, naming the file and what
changed, with nothing run; `--input-changed redo` finishes with each id once and the
fixed row answered again; the same command over the input it recorded is not refused;
a finished run whose input changed says so too, and `--input-changed keep` leaves its
rows as they were.
"""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pyarrow.parquet as pq

from tests.faults.test_handed_over_folders import refused, toolkit
from tests.faults.test_no_row_lost import (
    kill_group,
    settled_row_count,
    toolkit_run_command,
    wait_for_rows,
    whole_files_ids,
)

ROWS = 400
ADDED = 10


def _command(out: Path, *extra: str) -> list[str]:
    return ["toolkit", "run", "text-industry", "--smoke", "--input", "customers.csv",
            "--output", str(out), "--batch-size", "16", *extra]


def _edit(path: Path, index: int, company: str, add: int = 0) -> None:
    """Set row ``index``'s Company, and append ``add`` copies of the first row under new ids."""
    rows = list(csv.reader(path.open(newline="")))
    header = rows[0]
    at = header.index("Index")
    for row in rows[1:]:
        if row[at] == str(index):
            row[header.index("Company")] = company
    last = max(int(row[at]) for row in rows[1:])
    for n in range(1, add + 1):
        rows.append([str(last + n) if i == at else v for i, v in enumerate(rows[1])])
    with path.open("w", newline="") as out:
        csv.writer(out).writerows(rows)


def _companies(out: Path) -> dict[str, str]:
    table = pq.read_table(out, columns=["Index", "Company"])
    ids = table.column("Index").to_pylist()
    assert len(ids) == len(set(ids)), "an id was written twice"
    return dict(zip(ids, table.column("Company").to_pylist()))


def _customers() -> tuple[Path, Path, Path]:
    """The test's own folder (not the checkout), a customers CSV there, and the output."""
    here = Path.cwd()
    csv_file = here / "customers.csv"
    made = toolkit("samples", "customers", "--rows", str(ROWS), "-o", str(csv_file), cwd=here)
    assert made.returncode == 0, made.stderr
    return here, csv_file, here / "out"


def _files(out: Path) -> dict[str, int]:
    return {p.name: p.stat().st_mtime_ns for p in out.iterdir() if p.name.startswith("part-")}


def test_an_edited_input_is_refused_then_redone_or_kept_as_told():
    here, csv_file, out = _customers()

    killed = toolkit_run_command(_command(out))
    try:
        wait_for_rows(out, killed, at_least=1)
    finally:
        kill_group(killed)
    written = settled_row_count(out, "Index")
    assert 0 < written < ROWS
    recorded = json.loads((out / "_manifest.json").read_text())["input"]
    assert [f["path"] for f in recorded["files"]] == ["customers.csv"]
    assert recorded["files"][0]["size"] == csv_file.stat().st_size

    fixed = min(whole_files_ids(out, "Index"))
    _edit(csv_file, fixed, "Fixed Name Ltd", add=ADDED)
    before = _files(out)
    result = toolkit(*_command(out)[1:], cwd=here)
    refused(result, "customers.csv changed since the unfinished run", "bytes", "modified",
            "1 written row(s) changed", "--input-changed keep", "--input-changed redo")
    assert _files(out) == before, "a refused rerun changed the output"

    result = toolkit(*_command(out, "--input-changed", "redo")[1:], cwd=here)
    assert result.returncode == 0, result.stdout + result.stderr
    companies = _companies(out)
    assert set(companies) == {str(i) for i in range(1, ROWS + ADDED + 1)}
    assert companies[str(fixed)] == "Fixed Name Ltd"

    # The input is now the one recorded: no message, nothing to do.
    result = toolkit(*_command(out)[1:], cwd=here)
    assert result.returncode == 0, result.stderr
    assert "Already complete" in result.stdout and "changed" not in result.stderr

    # A finished run over an edited input says so too; keep leaves its rows as they were.
    _edit(csv_file, fixed, "Edited Again")
    refused(toolkit(*_command(out)[1:], cwd=here), "since the finished run",
            "1 written row(s) changed")
    result = toolkit(*_command(out, "--input-changed", "keep")[1:], cwd=here)
    assert result.returncode == 0, result.stdout + result.stderr
    assert _companies(out)[str(fixed)] == "Fixed Name Ltd"
    assert len(_companies(out)) == ROWS + ADDED
    refreshed = json.loads((out / "_manifest.json").read_text())["input"]["files"][0]
    assert refreshed["size"] == csv_file.stat().st_size


def test_an_input_edited_while_the_run_reads_it_is_named_in_its_summary():
    """Edited mid-run, rows may answer either version: the summary says so, and the
    manifest keeps the input the run started from, so the same command is refused."""
    here, csv_file, out = _customers()

    running = toolkit_run_command(_command(out))
    try:
        wait_for_rows(out, running, at_least=1)
        _edit(csv_file, 1, "Renamed Mid-Run Ltd", add=ADDED)
        stdout, _ = running.communicate(timeout=600)
    finally:
        kill_group(running)
    assert running.returncode == 0, stdout
    assert "WARNING: the input changed while this run read it (customers.csv: " in stdout
    assert "--input-changed redo" in stdout

    refused(toolkit(*_command(out)[1:], cwd=here), "since the finished run")


def test_the_choice_travels_to_a_submitted_job(tmp_path):
    from toolkit.cluster.render import prepare_submission
    from toolkit.spec.jobs.catalog import load_job
    from toolkit.spec.loading import load_job_spec

    job = load_job("text-industry")
    spec = load_job_spec(job, smoke=True, overrides={"data.output": str(tmp_path / "out")})
    for choice in ("keep", "redo"):
        request = prepare_submission(job, spec, target="ray", local=True, working_dir=tmp_path,
                                     input_changed=choice).request
        assert request.entrypoint.endswith(f" --input-changed {choice}")
    assert "--input-changed" not in prepare_submission(
        job, spec, target="ray", local=True, working_dir=tmp_path).request.entrypoint
