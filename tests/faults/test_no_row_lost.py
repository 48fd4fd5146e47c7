"""Every input row ends up exactly once in the output, whatever fails along the way.

These tests run `toolkit run` as users do, in its own process group with its own
local Ray, and break it for real: SIGKILL the engine actor, SIGKILL the driver.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

import psutil
import pyarrow.parquet as pq
import pytest

from toolkit.errors import EngineDiedError, JobFailedError
from toolkit.run.local_run import run_job
from toolkit.run.driver import run_pipeline
from toolkit.samples.provider import SAMPLES
from toolkit.spec.jobs.catalog import load_job
from toolkit.spec.loading import load_job_spec

ROWS = 2000
BATCH = 64


def toolkit_run(out: Path, *extra: str, job: str = "text-industry",
                rows: int = ROWS) -> subprocess.Popen:
    return toolkit_run_command(
        ["toolkit", "run", job, "--smoke", "--rows", str(rows), "--partitions", "40",
         "--batch-size", str(BATCH), "--output", str(out), *extra])


def toolkit_run_command(command: list[str]) -> subprocess.Popen:
    """``command`` in its own process group (so its whole local Ray can be killed)."""
    return subprocess.Popen(
        command, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
        env={**os.environ, "RAY_ADDRESS": ""}, start_new_session=True,
    )


def written_rows(out: Path) -> int:
    files = [f for f in out.glob("*.parquet")]
    rows = 0
    for f in files:
        try:
            rows += pq.read_metadata(f).num_rows
        except Exception:  # a file still being written
            continue
    return rows


def wait_for_rows(out: Path, proc: subprocess.Popen, at_least: int, timeout: float = 240) -> None:
    deadline = time.monotonic() + timeout
    while written_rows(out) < at_least:
        assert proc.poll() is None, "the run ended before the fault could be injected"
        assert time.monotonic() < deadline, "rows were not written in time"
        # Look often: a fast machine writes a 640-row smoke run's pieces in half a second.
        time.sleep(0.1)


def settled_row_count(out: Path, id_column: str, quiet_s: float = 3.0) -> int:
    """Distinct ids written, once no file has come for ``quiet_s``: a write task of the
    killed run can still be finishing its file a moment after the driver is gone."""
    counts = [len(set(whole_files_ids(out, id_column)))]
    while len(counts) < quiet_s or len(set(counts[-int(quiet_s):])) > 1:
        time.sleep(1)
        counts.append(len(set(whole_files_ids(out, id_column))))
        assert len(counts) < 60, f"files kept coming after the kill: {counts}"
    return counts[-1]


def kill_group(proc: subprocess.Popen) -> None:
    """SIGKILL the run and everything it started (its own local Ray included)."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    proc.wait(timeout=30)


def killed_after_a_piece_and_resumed(start: Callable[[], subprocess.Popen], out: Path,
                                     rows: int, id_column: str) -> None:
    """Start a run, kill it once its first result file is written, and check that the
    same command again resumes it and ends with each of the ``rows`` ids once."""
    killed = start()
    try:
        wait_for_rows(out, killed, at_least=1)
    finally:
        kill_group(killed)
    before = settled_row_count(out, id_column)
    assert 0 < before < rows

    rerun = start()
    stdout, _ = rerun.communicate(timeout=300)
    kill_group(rerun)
    assert rerun.returncode == 0, stdout
    assert "Resumed:" in stdout
    assert_exact(out, rows, id_column=id_column)


def whole_files_ids(out: Path, id_column: str) -> list[int]:
    """The ids of the result files a kill left whole (one it cut off mid-write has no
    footer: the next run deletes it and redoes its rows)."""
    ids: list[int] = []
    for path in out.glob("*.parquet"):
        try:
            ids += [int(i) for i in pq.read_table(path, columns=[id_column])[id_column].to_pylist()]
        except (OSError, ValueError):  # pyarrow's ArrowInvalid is a ValueError
            continue
    return ids


def output_ids(out: Path, id_column: str = "Index") -> list[int]:
    return [int(i) for i in pq.read_table(out, columns=[id_column])[id_column].to_pylist()]


def assert_exact(out: Path, rows: int = ROWS, id_column: str = "Index") -> None:
    ids = output_ids(out, id_column)
    assert len(ids) == rows, f"{len(ids)} rows written, {len(ids) - len(set(ids))} duplicates"
    assert set(ids) == set(range(1, rows + 1))


def test_a_killed_engine_actor_is_replaced_and_no_row_is_lost(tmp_path):
    out = tmp_path / "out"
    proc = toolkit_run(out)
    try:
        wait_for_rows(out, proc, at_least=300)
        engines = [p for p in psutil.Process(proc.pid).children(recursive=True)
                   if "TransformersChatEngine" in " ".join(p.cmdline())]
        assert engines, "no engine actor process found"
        for engine in engines:
            engine.send_signal(signal.SIGKILL)
        stdout, _ = proc.communicate(timeout=300)
    finally:
        kill_group(proc)
    assert proc.returncode == 0, stdout
    assert "rows written:  2,000 (2,000 ok, 0 with an error)" in stdout
    assert_exact(out)


def test_an_engine_actor_killed_past_max_restarts_stops_the_run_saying_so(tmp_path):
    out = tmp_path / "out"
    proc = subprocess.Popen(
        ["toolkit", "run", "text-industry", "--smoke", "--rows", str(ROWS), "--partitions",
         "40", "--batch-size", str(BATCH), "--set", "engine.max_restarts=0",
         "--output", str(out)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env={**os.environ, "RAY_ADDRESS": ""}, start_new_session=True)
    try:
        wait_for_rows(out, proc, at_least=300)
        for engine in psutil.Process(proc.pid).children(recursive=True):
            if "TransformersChatEngine" in " ".join(engine.cmdline()):
                engine.send_signal(signal.SIGKILL)
        _, stderr = proc.communicate(timeout=300)
    finally:
        kill_group(proc)
    assert proc.returncode == EngineDiedError.exit_code, stderr[-3000:]
    error = stderr[stderr.index("Error: "):]
    assert "died more often than Ray may restart it (engine.max_restarts 0)" in error
    assert "the same command resumes" in error and "Traceback" not in stderr
    kept = whole_files_ids(out, "Index")
    assert len(kept) >= 300 and len(kept) == len(set(kept))


@pytest.mark.parametrize("job, id_column, rows", [("text-industry", "Index", ROWS),
                                                  ("text-classify", "review_id", 800)])
def test_a_killed_driver_resumes_with_only_the_remaining_rows(tmp_path, job, id_column, rows):
    out = tmp_path / "out"
    proc = toolkit_run(out, job=job, rows=rows)
    try:
        wait_for_rows(out, proc, at_least=rows // 2)
    finally:
        kill_group(proc)
    before = settled_row_count(out, id_column)
    assert 0 < before < rows

    rerun = toolkit_run(out, job=job, rows=rows)
    stdout, _ = rerun.communicate(timeout=300)
    kill_group(rerun)
    assert rerun.returncode == 0, stdout
    assert_exact(out, rows, id_column=id_column)
    processed = int(next(line for line in stdout.splitlines() if "this run:" in line)
                    .split()[2].replace(",", ""))
    # At most the rows not yet written, plus one batch in flight per engine worker.
    assert rows - before <= processed <= rows - before + BATCH
    assert "Resumed:" in stdout

    third = toolkit_run(out, job=job, rows=rows)
    stdout, _ = third.communicate(timeout=300)
    kill_group(third)
    assert third.returncode == 0
    assert "Already complete" in stdout
    assert_exact(out, rows, id_column=id_column)


@pytest.mark.parametrize("stop", ["ctrl-c", "sigterm"])
def test_a_stopped_run_says_what_it_kept_and_the_same_command_resumes(tmp_path, stop):
    out = tmp_path / "out"
    proc = subprocess.Popen(
        ["toolkit", "run", "text-industry", "--smoke", "--rows", str(ROWS), "--partitions",
         "40", "--batch-size", str(BATCH), "--output", str(out)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env={**os.environ, "RAY_ADDRESS": ""}, start_new_session=True)
    try:
        wait_for_rows(out, proc, at_least=300)
        if stop == "ctrl-c":  # the terminal sends it to the whole foreground group
            os.killpg(proc.pid, signal.SIGINT)
        else:  # a scheduler or `docker stop`: the command alone
            proc.send_signal(signal.SIGTERM)
        _, stderr = proc.communicate(timeout=120)
    finally:
        kill_group(proc)

    assert proc.returncode == 130, stderr[-3000:]
    said = re.fullmatch(r"Stopped: ([\d,]+) of 2,000 rows kept in (.+); run the same command "
                        r"again to resume\.", stderr.strip().splitlines()[-1])
    assert said is not None, stderr[-3000:]
    assert said.group(2) == str(out)
    assert 300 <= int(said.group(1).replace(",", "")) <= settled_row_count(out, "Index") < ROWS
    assert "Traceback" not in stderr and "Aborted!" not in stderr
    if stop == "sigterm":
        return  # the folder is the same either way: one resume shows it resumes

    rerun = toolkit_run(out)
    stdout, _ = rerun.communicate(timeout=300)
    kill_group(rerun)
    assert rerun.returncode == 0 and "Resumed:" in stdout, stdout
    assert_exact(out)


@pytest.fixture()
def poisoned_csv(tmp_path) -> tuple[Path, set[str]]:
    """500 customers, 1 % poison: blank companies and names far past max_model_len."""
    from toolkit.samples.customers import write_customers_csv

    import pyarrow.csv as pacsv

    path = write_customers_csv(tmp_path / "clean.csv", rows=500, seed=3)
    table = pacsv.read_csv(path, convert_options=pacsv.ConvertOptions(
        column_types={"Index": "string", "Company": "string"}))
    companies = table["Company"].to_pylist()
    poison = {"7": "", "123": "   ", "250": "Mega " * 300, "377": "Acme " * 400, "499": ""}
    for index, company in poison.items():
        companies[int(index) - 1] = company
    table = table.set_column(table.schema.get_field_index("Company"), "Company",
                             __import__("pyarrow").array(companies))
    poisoned = tmp_path / "poisoned.csv"
    pacsv.write_csv(table, poisoned)
    return poisoned, set(poison)


def test_poison_rows_are_error_rows_on_exactly_those_ids(local_ray, poisoned_csv, tmp_path):
    csv, poison = poisoned_csv
    job = load_job("text-industry")
    spec = load_job_spec(job, smoke=True, overrides={"data.input": str(csv),
                                                     "data.output": str(tmp_path / "out")})
    summary = run_pipeline(job, spec, samples=SAMPLES)

    table = pq.read_table(tmp_path / "out").to_pylist()
    assert len(table) == 500 and len({r["Index"] for r in table}) == 500
    failed = {r["Index"]: r["error"] for r in table if r["error"]}
    assert set(failed) == poison
    assert failed["7"] == "preprocess: column 'Company' is empty"
    assert failed["250"].startswith("prompt is ") and "longer than max_model_len 256" in failed["250"]
    assert (summary.rows_in, summary.rows_ok, summary.error_rows) == (500, 495, 5)


def test_strict_fails_the_run_and_names_the_bad_row(local_ray, poisoned_csv, tmp_path):
    csv, poison = poisoned_csv
    job = load_job("text-industry")
    spec = load_job_spec(job, smoke=True, overrides={
        "data.input": str(csv), "data.output": str(tmp_path / "out"), "strict": True})
    with pytest.raises(JobFailedError) as excinfo:
        run_job(job, spec, samples=SAMPLES)
    message = excinfo.value.format_message()
    assert "StrictModeError: --strict: row Index=" in message
    bad_id = message.split("row Index='")[1].split("'")[0]
    assert bad_id in poison
