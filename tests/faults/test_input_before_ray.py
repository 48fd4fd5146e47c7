"""Bad input is refused before Ray starts, in about a second, and leaves nothing behind.

``toolkit run`` starts a local Ray (seconds) or joins ``--address``; whatever can be
told from the input without Ray (a missing file, a JSON line that isn't a row,
repeated or missing ids, a missing id column) is refused first, by preflight, before
the output folder is made. Each case is what a user typed, run through the real CLI;
the evidence that no Ray started is that the refused run made no output folder (Ray
starts only after its folder is prepared), that it took seconds, and, where this test
process had no Ray of its own yet, that it still has none.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner, Result

from toolkit.cli.main import main

SAME_IDS = ("Rows are written, reported and resumed by their data.id_column, so each row "
            "needs an id of its own (a rerun would skip a repeated id's other rows as already "
            "written). Nothing was run.")
HINT_IDS = ("Hint: Key the rows on a column that is unique per row with --set "
            "data.id_column=<column> (the other columns: Company), or give every row its own "
            "Index in the input.\n")
#: A refused run returns in about a second; Ray alone takes 3-5 s to start, and a run
#: that started it would have made its output folder first (the firmer evidence).
REFUSED_WITHIN_S = 5.0


def write_inputs(folder: Path) -> None:
    """The files the cases read, in the user's folder."""
    (folder / "mixed.jsonl").write_text('{"Index":1,"Company":"a"}\n{"Index":"1","Company":"b"}\n')
    (folder / "cut.jsonl").write_text('{"Index":1,"Company":"a"}\n{"Index":2,"Company":"b"}\n'
                                      '{"Index":3,"Comp')
    (folder / "twice.jsonl").write_text('{"Index":1,"Company":"a"}\n{"Index":2,"Company":"b"}\n'
                                        '{"Index":2,"Company":"c"}\n')
    (folder / "twice.csv").write_text("Index,Company\n1,a\n2,b\n2,c\n")
    (folder / "blank-id.csv").write_text("Index,Company\n1,a\n,b\n3,c\n")
    pq.write_table(pa.table({"Index": [1, 2, 2], "Company": ["a", "b", "c"]}),
                   folder / "twice.parquet")
    # Rows 1-3 are fine; row 4 repeats row 3's id.
    pq.write_table(pa.table({"Index": [1, 2, 3, 3], "Company": ["a", "b", "c", "d"]}),
                   folder / "late-twice.parquet")


@contextlib.contextmanager
def refused_before_ray(output: Path) -> Iterator[None]:
    """The command inside was refused before Ray: quickly, without its output folder
    (made before Ray starts), and without a Ray in this process where there was none."""
    import ray

    had_ray = ray.is_initialized()  # another test module's in-process Ray, perhaps
    started = time.monotonic()
    yield
    assert time.monotonic() - started < REFUSED_WITHIN_S
    assert not output.exists(), sorted(p.name for p in output.rglob("*"))
    if not had_ray:
        assert not ray.is_initialized()


def run(*args: str) -> Result:
    return CliRunner().invoke(main, ["run", "text-industry", "--smoke", *args])


def error_of(result: Result) -> str:
    """What the user sees from ``Error:`` on (the lines before say what runs)."""
    assert "Error: " in result.output, result.output
    return result.output[result.output.index("Error: "):]


# (case, flags, the text the user sees from "Error:" on)
CASES = [
    ("JSON id changes type", ["--input", "mixed.jsonl"],
     "Error: data.input: mixed.jsonl: line 2's Index is text (\"1\") where line 1's is a "
     "number (1); a column holds one type, so the file can't be read as rows. Nothing was "
     "run.\nHint: Write Index the same way on every line (e.g. all numbers, or all quoted "
     "text), then run again.\n"),
    ("JSON last line cut short", ["--input", "cut.jsonl", "--rows", "2"],
     "Error: data.input: cut.jsonl: line 3 is not complete JSON (Unterminated string "
     "starting at column 12). Nothing was run.\nHint: Each line must be one whole JSON "
     "object; line 3 is the last and the file ends inside it: it looks cut short (an export "
     "or copy that stopped early?). Export the file again, or remove line 3.\n"),
    ("Parquet repeated ids", ["--input", "twice.parquet"],
     "Error: data.input: twice.parquet has repeated Index values: 2 is on more than one row "
     f"(3 rows, 2 distinct ids). {SAME_IDS}\n{HINT_IDS}"),
    ("Parquet repeated ids within --rows", ["--input", "late-twice.parquet", "--rows", "4"],
     "Error: data.input: late-twice.parquet (in the first 4 rows, which this run reads) has "
     "repeated Index values: 3 is on more than one row (4 rows, 3 distinct ids). "
     f"{SAME_IDS}\n{HINT_IDS}"),
    ("CSV repeated ids", ["--input", "twice.csv"],
     "Error: data.input: twice.csv has repeated Index values: '2' is on more than one row "
     f"(3 rows, 2 distinct ids). {SAME_IDS}\n{HINT_IDS}"),
    ("CSV missing id", ["--input", "blank-id.csv", "--rows", "10"],
     "Error: data.input: blank-id.csv (in the first 10 rows, which this run reads) has 1 row "
     f"without a Index (null or empty): data row 2. {SAME_IDS}\n{HINT_IDS}"),
    ("JSON Lines repeated ids", ["--input", "twice.jsonl"],
     "Error: data.input: twice.jsonl has repeated Index values: 2 is on more than one row "
     f"(3 rows, 2 distinct ids). {SAME_IDS}\n{HINT_IDS}"),
    ("id column not in the input", ["--input", "twice.csv", "--set", "data.id_column=Nope"],
     "Error: data.input: twice.csv has no column 'Nope'. Available columns: Index, Company.\n"
     "Hint: Key the rows on a column that is unique per row with --set "
     "data.id_column=<column> (one of: Index, Company), or add a Nope column to the input.\n"),
    ("typo'd input", ["--input", "custmers.csv", "--rows", "100"],
     "Error: data.input: custmers.csv does not exist.\nHint: Check the path, or try the "
     "pipeline first with --smoke (generated rows).\n"),
]


@pytest.mark.parametrize("case, flags, expected", CASES, ids=[c[0] for c in CASES])
def test_bad_input_is_refused_before_ray(case, flags, expected, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    write_inputs(tmp_path)

    with refused_before_ray(tmp_path / "out"):
        result = run(*flags, "--output", "out/text-industry")

    assert result.exit_code == 2, result.output
    assert error_of(result) == expected
    assert "Traceback" not in result.output


def test_a_repeated_id_beyond_the_rows_run_is_not_refused(tmp_path):
    """``--rows 3`` runs the file's first 3 rows (staged in file order): their ids are
    unique, so the 4th row repeating the 3rd's id is no reason to refuse the run."""
    from toolkit.run.input.checks import check_input
    from toolkit.spec.jobs.catalog import load_job
    from toolkit.spec.loading import load_job_spec

    write_inputs(tmp_path)
    job = load_job("text-industry")
    for name in ("late-twice.parquet", "twice.csv", "twice.jsonl"):
        spec = load_job_spec(job, overrides={"data.input": str(tmp_path / name),
                                             "data.output": str(tmp_path / "out"),
                                             "data.rows": 2})
        check_input(job, spec)  # no error
    assert not (tmp_path / "out").exists()


def test_an_empty_id_column_is_refused_by_the_spec(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)

    with refused_before_ray(tmp_path / "out"):
        result = run("--set", "data.id_column=", "--output", "out/text-industry")

    assert result.exit_code == 2, result.output
    assert error_of(result) == (
        "Error: Invalid spec for job text-industry + flags:\n"
        "  data.id_column: is empty; name the input column that identifies each row, "
        "e.g. --set data.id_column=Index (a column unique per row)\n"
        "Hint: Fix the fields above in the job file, spec file, flags or --set values "
        "('toolkit show text-industry' prints every key with its value).\n")


def toolkit(*args: str, cwd: Path, env: dict[str, str] | None = None
            ) -> subprocess.CompletedProcess[str]:
    """The real ``toolkit`` command, in a process of its own."""
    here = Path(sys.executable).with_name("toolkit")
    command = str(here) if here.exists() else shutil.which("toolkit") or "toolkit"
    return subprocess.run([command, *args], capture_output=True, text=True, cwd=cwd,
                          timeout=600, env={**os.environ, "RAY_ADDRESS": "", **(env or {})})


@pytest.fixture(scope="module")
def earlier_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A user's folder holding an earlier smoke run's output, ``out/text-industry``."""
    folder = tmp_path_factory.mktemp("project")
    result = toolkit("run", "text-industry", "--smoke", "--rows", "20", cwd=folder)
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-3000:]
    assert (folder / "out" / "text-industry" / "_summary.json").exists()
    return folder


def files_under(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in folder.rglob("*") if p.is_file()}


def test_a_typo_in_the_input_is_named_not_the_earlier_runs_folder(earlier_run, monkeypatch):
    """Not "holds results of a run with a different spec ... Pass --overwrite"."""
    monkeypatch.chdir(earlier_run)
    before = files_under(earlier_run)

    started = time.monotonic()
    result = run("--input", "custmers.csv", "--rows", "100")

    assert time.monotonic() - started < REFUSED_WITHIN_S
    assert result.exit_code == 2, result.output
    assert error_of(result) == ("Error: data.input: custmers.csv does not exist.\nHint: Check "
                                "the path, or try the pipeline first with --smoke (generated "
                                "rows).\n")
    assert "--overwrite" not in result.output
    assert files_under(earlier_run) == before  # the earlier run's folder, byte for byte


def test_a_finished_run_run_again_answers_from_its_folder_without_ray(earlier_run):
    """Nothing to run, so nothing to start: the cluster named here doesn't exist, and a
    run that tried to join it would fail (exit 3) instead of answering."""
    before = files_under(earlier_run / "out")

    again = toolkit("run", "text-industry", "--smoke", "--rows", "20", cwd=earlier_run,
                    env={"RAY_ADDRESS": "127.0.0.1:9"})

    assert again.returncode == 0, again.stdout + again.stderr
    assert "Already complete: the same spec finished here earlier" in again.stdout
    assert "rows written:  20 (20 ok" in again.stdout
    assert files_under(earlier_run / "out") == before


def test_a_local_ray_that_cannot_start_is_one_paragraph_and_exit_3(tmp_path):
    """Ray can't make its session folder here; under load its start times out instead
    (30 s, fixed in Ray): either way the user reads why and what to try, not Ray's
    traceback, and no thread of ours prints one as the process exits."""
    (tmp_path / "a-file").write_text("")
    result = toolkit("run", "text-industry", "--smoke", "--rows", "5", cwd=tmp_path,
                     env={"RAY_TMPDIR": str(tmp_path / "a-file" / "ray")})

    assert result.returncode == 3, result.stdout + result.stderr
    assert "Error: Ray could not start on this machine: [Errno 20] Not a directory" \
        in result.stderr
    assert "Hint: Ray needs free memory and a writable temp folder" in result.stderr
    assert "Traceback" not in result.stderr and "Exception in thread" not in result.stderr


def unwritable_place(tmp_path: Path) -> tuple[Path, str]:
    """A file path this user can't write, and the OS's reason: a read-only folder,
    or (as root, whom permissions don't stop) a system folder that refuses files."""
    read_only = tmp_path / "read-only"
    read_only.mkdir()
    read_only.chmod(0o555)
    for folder in (read_only, Path("/sys"), Path("/proc")):
        try:
            (folder / "probe.html").write_bytes(b"")
        except OSError as exc:
            return folder / "x.html", exc.strerror
        (folder / "probe.html").unlink()
    pytest.skip("no place here refuses a file")


def test_a_report_that_cant_be_written_there_says_where_and_why(earlier_run, tmp_path):
    destination, reason = unwritable_place(tmp_path)
    output = str(earlier_run / "out" / "text-industry")

    result = CliRunner().invoke(main, ["report", output, "-o", str(destination)])

    assert result.exit_code == 2, result.output
    assert result.output == (
        f"Error: Can't write the report to {destination}: {reason}.\n"
        "Hint: Choose another -o, in a folder you can write to (e.g. -o report.html here).\n")


def test_a_report_into_a_folder_that_does_not_exist_makes_it(earlier_run, tmp_path):
    destination = tmp_path / "reports" / "june" / "industry.html"

    result = CliRunner().invoke(main, ["report", str(earlier_run / "out" / "text-industry"),
                                       "-o", str(destination)])

    assert result.exit_code == 0, result.output
    assert result.output == f"{destination}\n"
    assert destination.read_text().startswith("<!DOCTYPE html>")


@pytest.fixture(scope="module")
def head_elsewhere() -> Iterator[str]:
    """A Ray head started (as ``ray start --head``) from another folder than the user's,
    so its workers' working directory is not theirs; stopped by its own processes."""
    from toolkit.cluster.backends.local_head import pids_using, start_head, stop_head

    temp_dir = Path(tempfile.mkdtemp(prefix="tkin-", dir="/tmp"))
    elsewhere = Path(tempfile.mkdtemp(prefix="tkin-cwd-"))
    previous = Path.cwd()
    os.chdir(elsewhere)  # the head's processes start here
    try:
        head, process = start_head(temp_dir, num_cpus=2)
    finally:
        os.chdir(previous)
    try:
        yield head.gcs_address
    finally:
        stop_head(head, process=process)
        leftovers = pids_using(str(temp_dir))
        shutil.rmtree(temp_dir, ignore_errors=True)
        shutil.rmtree(elsewhere, ignore_errors=True)
        assert not leftovers, f"Ray processes of the test head survived: {leftovers}"


@pytest.mark.cluster
def test_a_relative_input_means_the_same_file_on_a_joined_cluster(head_elsewhere, tmp_path):
    lines = ["Index,Company"] + [f"{i},Firm {i}" for i in range(1, 31)]
    (tmp_path / "c30.csv").write_text("\n".join(lines) + "\n")

    result = toolkit("run", "text-industry", "--smoke", "--input", "c30.csv", "--output",
                     "out/all", "--address", head_elsewhere, cwd=tmp_path)

    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-3000:]
    assert "rows written:  30 (" in result.stdout
    assert pq.read_table(tmp_path / "out" / "all").num_rows == 30


@pytest.mark.cluster
def test_a_missing_input_is_refused_before_joining_the_cluster(head_elsewhere, tmp_path):
    started = time.monotonic()
    result = toolkit("run", "text-industry", "--smoke", "--input", "c200.csv", "--output",
                     "out/all", "--address", head_elsewhere, cwd=tmp_path)

    assert time.monotonic() - started < 10  # a process of its own: imports included
    assert result.returncode == 2, result.stderr
    assert result.stderr.endswith("Error: data.input: c200.csv does not exist.\nHint: Check "
                                  "the path, or try the pipeline first with --smoke (generated "
                                  "rows).\n")
    assert "Joined the Ray cluster" not in result.stderr + result.stdout
    assert not (tmp_path / "out").exists()
