"""Run folders and job files someone else made are data: nothing in them runs, nothing
outside them is touched, and two runs never write one folder at once.

Each case is the command a careless user (or someone handing over a folder) types,
run through the `toolkit` command in its own process from a folder that is not the
checkout, checking the exit code, the words on the terminal and the files afterwards.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from toolkit.errors import OutputInUseError
from toolkit.run.output.run_directory import LOCK_FILE, RunDirectory
from toolkit.run.output.writer_lock import STALE_AFTER_S, WriterLock


def toolkit(*args: str, cwd: Path, timeout: float = 600) -> subprocess.CompletedProcess:
    return subprocess.run(["toolkit", *args], cwd=cwd, capture_output=True, text=True,
                          timeout=timeout, env={**os.environ, "RAY_ADDRESS": ""})


def refused(result: subprocess.CompletedProcess, *words: str) -> None:
    """Exit 2 with one clear message (no traceback) holding ``words``."""
    assert result.returncode == 2, result.stdout + result.stderr
    for word in words:
        assert word in result.stderr, result.stderr
    assert "Traceback" not in result.stderr and "Unexpected error" not in result.stderr


def edit_manifest(folder: Path, change) -> None:
    manifest = json.loads((folder / "_manifest.json").read_text())
    change(manifest)
    (folder / "_manifest.json").write_text(json.dumps(manifest))


def victim(root: Path) -> Path:
    """Someone's files beside the run folder, that no command may touch."""
    folder = root / "victim"
    (folder / "sub").mkdir(parents=True)
    (folder / "thesis.txt").write_text("four years of work")
    (folder / "sub" / "data.csv").write_text("a,b\n1,2\n")
    return folder


def untouched(folder: Path) -> None:
    assert (folder / "thesis.txt").read_text() == "four years of work"
    assert (folder / "sub" / "data.csv").read_text() == "a,b\n1,2\n"


@pytest.fixture(scope="module")
def finished_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A finished 20-row smoke run, to copy and hand over."""
    folder = tmp_path_factory.mktemp("base")
    result = toolkit("run", "text-industry", "--smoke", "--rows", "20", "--output", "base",
                     cwd=folder)
    assert result.returncode == 0, result.stderr
    return folder / "base"


def handed_over(finished_run: Path, tmp_path: Path) -> Path:
    shutil.copytree(finished_run, tmp_path / "handed")
    return tmp_path / "handed"


# -- links and claims in a handed-over folder ------------------------------------------------

LINKED = ["_input", "_checkpoint", "_logs", "_summary.json"]
COMMANDS = {
    "run --overwrite": ["run", "text-industry", "--smoke", "--rows", "20", "--output", "handed",
                        "--overwrite"],
    "run (resume)": ["run", "text-industry", "--smoke", "--rows", "20", "--output", "handed"],
    "retry": ["retry", "handed"],
    "report": ["report", "handed"],
}


@pytest.mark.parametrize("entry", LINKED)
@pytest.mark.parametrize("command", COMMANDS, ids=list(COMMANDS))
def test_a_linked_bookkeeping_entry_is_refused_and_nothing_outside_is_touched(
        finished_run, tmp_path, entry, command):
    # cp -r out/base handed; ln -s "$PWD/../victim" handed/_input; "_input" in made
    handed, outside = handed_over(finished_run, tmp_path), victim(tmp_path)
    target = outside if entry != "_summary.json" else outside / "thesis.txt"
    shutil.rmtree(handed / entry, ignore_errors=True)
    (handed / entry).unlink(missing_ok=True)
    (handed / entry).symlink_to(target)
    if entry != "_logs":  # the manifest owns _logs/run.log, not the folder
        edit_manifest(handed, lambda m: m["made"].append(entry) if entry not in m["made"] else None)

    result = toolkit(*COMMANDS[command], cwd=tmp_path)

    refused(result, f"handed/{entry} is a symbolic link (to {target})", "Nothing was changed")
    untouched(outside)
    assert (handed / entry).is_symlink()


def test_a_result_file_that_is_a_link_is_neither_read_nor_deleted(finished_run, tmp_path):
    handed, outside = handed_over(finished_run, tmp_path), victim(tmp_path)
    part = next(handed.glob("part-*.parquet"))
    part.unlink()
    part.symlink_to(outside / "thesis.txt")
    for command in ("run --overwrite", "report", "retry"):
        refused(toolkit(*COMMANDS[command], cwd=tmp_path), f"{part.name} is a symbolic link")
    untouched(outside)


@pytest.mark.parametrize("claim, entry", [
    (lambda m: m["made"].append("../victim"), "'../victim'"),
    (lambda m: m["made"].append("/etc"), "'/etc'"),
    (lambda m: m["made"].append("_logs/x"), "'_logs/x'"),
    (lambda m: m["files"].append("../victim/thesis.txt"), "the result file '../victim/thesis.txt'"),
    (lambda m: m["write_ids"].append("../../x"), "the write id '../../x'"),
], ids=["made ../victim", "made /etc", "made _logs/x", "files ../", "write id ../"])
def test_a_manifest_that_claims_what_the_toolkit_never_makes_is_refused(
        finished_run, tmp_path, claim, entry):
    handed, outside = handed_over(finished_run, tmp_path), victim(tmp_path)
    edit_manifest(handed, claim)
    for command in ("run --overwrite", "retry", "report"):
        refused(toolkit(*COMMANDS[command], cwd=tmp_path),
                f"handed/_manifest.json claims {entry} as the toolkit's")
    untouched(outside)


# -- code a manifest names ------------------------------------------------------------------

EVIL = "open({marker!r}, 'w').write('ran')\nfrom toolkit.spec.job_definition import JobDefinition\n"


@pytest.mark.parametrize("where", ["inside the folder", "beside it", "a module"])
def test_retry_never_runs_code_a_manifest_names(finished_run, tmp_path, where):
    handed = handed_over(finished_run, tmp_path)
    marker = tmp_path / "the-code-ran"
    if where == "inside the folder":  # _logs/x/evil.py, spec.job set to that file
        (handed / "_logs" / "x").mkdir()
        code = handed / "_logs" / "x" / "evil.py"
        named, expected = "handed/_logs/x/evil.py", "this toolkit did not write (_logs/x/evil.py)"
    elif where == "beside it":
        code = tmp_path / "elsewhere" / "evil.py"
        code.parent.mkdir()
        named, expected = str(code), "is not a job name"
    else:
        code = tmp_path / "evil_module.py"
        named, expected = "evil_module.sub", "neither a built-in nor a job file"
    code.write_text(EVIL.format(marker=str(marker)))
    edit_manifest(handed, lambda m: m["spec"].update(job=named))

    refused(toolkit("retry", "handed", cwd=tmp_path), expected)
    assert not marker.exists(), "code named by the manifest ran"


# -- job names ------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["../../../escaped", "/tmp/escaped-abs", "a/b", ".hidden"])
def test_a_job_name_that_climbs_out_of_the_project_is_refused(tmp_path, name):
    project = tmp_path / "a" / "b" / "project"
    project.mkdir(parents=True)
    assert toolkit("new", "esc", cwd=project).returncode == 0
    job_file = project / "esc.yaml"
    job_file.write_text(job_file.read_text().replace("job: esc", f"job: {json.dumps(name)}"))
    before = sorted(p.name for p in tmp_path.rglob("*"))

    for command in (["show", "./esc.yaml"], ["render", "./esc.yaml"],
                    ["run", "./esc.yaml", "--smoke"]):
        refused(toolkit(*command, cwd=project), f"job: {name!r} is not a job name")

    assert sorted(p.name for p in tmp_path.rglob("*")) == before
    assert not Path("/tmp/escaped-abs").exists()


def test_a_python_jobs_name_is_checked_too(tmp_path):
    assert toolkit("new", "pyjob", "--python", cwd=tmp_path).returncode == 0
    code = next(tmp_path.glob("pyjob*.py"))
    text = code.read_text()
    code.write_text(text.replace('name="pyjob"', 'name="../pyjob"'))
    assert 'name="../pyjob"' in code.read_text()
    refused(toolkit("show", f"./{code.name}", cwd=tmp_path), "JOB's name '../pyjob' is not a job name")


# -- one writer per output folder -------------------------------------------------------------


def rows_in(out: Path) -> int:
    rows = 0
    for part in out.glob("part-*.parquet"):
        try:
            rows += pq.read_metadata(part).num_rows
        except Exception:  # noqa: BLE001 - still being written
            continue
    return rows


def test_a_second_run_an_overwrite_or_a_retry_never_write_a_folder_a_run_is_writing(tmp_path):
    # 800 rows in 40 pieces, answers cut at 2 tokens; once pieces land, the others try.
    run = ["run", "text-industry", "--smoke", "--rows", "800", "--partitions", "40",
           "--batch-size", "20", "--output", "out/rr", "--set", "sampling.max_tokens=2",
           "--set", "stop_loss.failure_rate=null"]
    first = subprocess.Popen(["toolkit", *run], cwd=tmp_path, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True,
                             env={**os.environ, "RAY_ADDRESS": ""})
    out = tmp_path / "out" / "rr"
    deadline = time.monotonic() + 300
    while rows_in(out) < 60:
        assert first.poll() is None, "the run ended before the others could try"
        assert time.monotonic() < deadline, "no rows in time"
        time.sleep(0.1)

    others = {
        "second run": toolkit(*run, cwd=tmp_path),
        "overwrite": toolkit(*run, "--overwrite", cwd=tmp_path),
        "retry": toolkit("retry", "out/rr", "--set", "sampling.max_tokens=16", cwd=tmp_path),
    }
    stdout, stderr = first.communicate(timeout=600)

    for name, result in others.items():
        refused(result, "data.output: out/rr is being written by another run: toolkit run "
                f"(pid {first.pid} on this machine)", f"kill {first.pid}")
        assert "redoing" not in result.stdout, name
    assert first.returncode == 0, stderr
    ids = pq.read_table(out, columns=["Index"])["Index"].to_pylist()
    assert sorted(ids) == list(range(1, 801))
    assert not (out / LOCK_FILE).exists()
    # Once it ended, the retry is welcome.
    fixed = toolkit("retry", "out/rr", "--set", "sampling.max_tokens=16", cwd=tmp_path)
    assert fixed.returncode == 0, fixed.stderr
    assert sorted(pq.read_table(out, columns=["Index"])["Index"].to_pylist()) == sorted(ids)


def lock_file(folder: Path, **holder) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    content = {"token": "t", "host": socket.gethostname(), "pid": 1,
               "command": "toolkit run", "started": "2026-11-26T00:00:00+00:00", **holder}
    (folder / LOCK_FILE).write_text(json.dumps(content))
    return folder / LOCK_FILE


def a_dead_pid() -> int:
    done = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True, check=True)
    return int(done.stdout)


def test_a_crashed_runs_lock_is_taken_over_and_a_live_one_is_not(tmp_path):
    # A driver killed on this machine: its pid is gone, so the next run goes ahead.
    lock_file(tmp_path / "crashed", pid=a_dead_pid())
    with WriterLock(RunDirectory(str(tmp_path / "crashed")), "toolkit run"):
        held = json.loads((tmp_path / "crashed" / LOCK_FILE).read_text())
        assert held["pid"] == os.getpid()
    assert not (tmp_path / "crashed" / LOCK_FILE).exists()

    # A driver on another node: live while its heartbeat is fresh...
    fresh = lock_file(tmp_path / "elsewhere", host="gpu-node-7", pid=4242)
    with pytest.raises(OutputInUseError, match=r"toolkit run \(pid 4242 on gpu-node-7\)"):
        WriterLock(RunDirectory(str(tmp_path / "elsewhere")), "toolkit run").acquire()
    # ...and a crashed one's once the heartbeat is older than the limit.
    old = time.time() - STALE_AFTER_S - 5
    os.utime(fresh, (old, old))
    with WriterLock(RunDirectory(str(tmp_path / "elsewhere")), "toolkit run"):
        pass


def test_a_lock_refused_run_leaves_no_folder_behind(tmp_path):
    lock = WriterLock(RunDirectory(str(tmp_path / "new")), "toolkit run")
    lock.acquire()
    assert (tmp_path / "new" / LOCK_FILE).exists()
    lock.release()
    assert not (tmp_path / "new").exists()


# -- what a hand did to the files ----------------------------------------------------------


def test_retry_redoes_the_rows_of_a_deleted_file_and_counts_a_copied_row_once(tmp_path):
    run = toolkit("run", "text-industry", "--smoke", "--rows", "200", "--partitions", "10",
                  "--batch-size", "20", "--output", "out", cwd=tmp_path)
    assert run.returncode == 0, run.stderr
    out = tmp_path / "out"
    parts = sorted(out.glob("part-*.parquet"))
    lost = pq.read_table(parts[0]).num_rows
    parts[0].unlink()  # a result file deleted by hand
    table = pq.read_table(parts[1])  # ...and a row copied by hand into another one
    pq.write_table(pa.concat_tables([table, table.slice(0, 1)]), parts[1])

    retry = toolkit("retry", "out", cwd=tmp_path)  # no row failed: only the lost ones run

    assert retry.returncode == 0, retry.stderr
    assert f"redoing 0 failed rows, {lost:,} missing from the result files" in retry.stdout
    ids = pq.read_table(out, columns=["Index"])["Index"].to_pylist()
    assert set(ids) == set(range(1, 201)) and len(ids) == 201
    summary = json.loads((out / "_summary.json").read_text())
    copied = table["Index"][0].as_py()
    assert summary["rows_in"] == 200 and summary["rows_written"] == 201
    assert any(f"1 row(s) of the output repeat a Index another row has ({copied!r})" in note
               for note in summary["notes"]), summary["notes"]


def test_retry_finds_a_yaml_job_whose_file_is_named_otherwise(tmp_path):
    # README's own example: review-sentiment.yaml holding job: sentiment.
    assert toolkit("new", "review-sentiment", cwd=tmp_path).returncode == 0
    job_file = tmp_path / "review-sentiment.yaml"
    job_file.write_text(job_file.read_text().replace("job: review-sentiment", "job: sentiment"))
    run = toolkit("run", "./review-sentiment.yaml", "--smoke", cwd=tmp_path)
    assert run.returncode == 0, run.stderr

    # (the scaffold's data.output stays out/review-sentiment)
    retry = toolkit("retry", "out/review-sentiment", "--only", "error", cwd=tmp_path)

    assert retry.returncode == 0, retry.stderr
    assert "Nothing to retry" in retry.stdout
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    lost = toolkit("retry", str(tmp_path / "out" / "review-sentiment"), cwd=elsewhere)
    refused(lost, "The run is of job 'sentiment', which is neither a built-in nor a job file",
            "--job")
    named = toolkit("retry", str(tmp_path / "out" / "review-sentiment"), "--only", "error",
                    "--job", str(job_file), cwd=elsewhere)
    assert named.returncode == 0 and "Nothing to retry" in named.stdout, named.stderr


# -- odd output folders ---------------------------------------------------------------------


def test_an_empty_output_is_named(tmp_path):
    refused(toolkit("run", "text-industry", "--smoke", "--output", "", cwd=tmp_path),
            "data.output: is empty")


def test_an_output_of_someone_elses_files_is_refused_from_its_first_few(tmp_path):
    refused(toolkit("run", "text-industry", "--smoke", "--rows", "10", "--output", "/proc/self",
                    cwd=tmp_path), "data.output: /proc/self holds 5+ file(s) this toolkit did "
            "not write (")
    # A big folder: refused from its first few files, not walked to its last.
    big = tmp_path / "big"
    (big / "deep").mkdir(parents=True)
    for i in range(6):
        (big / f"mine-{i}.txt").write_text("x")
    for i in range(2000):
        (big / "deep" / f"{i}.txt").write_text("x")
    foreign = RunDirectory(str(big)).foreign_files(None)
    assert foreign == [f"mine-{i}.txt" for i in range(6)]


def test_a_link_to_the_root_in_an_output_folder_is_not_followed(finished_run, tmp_path):
    plain = tmp_path / "plain"
    plain.mkdir()
    (plain / "root").symlink_to("/")
    refused(toolkit("run", "text-industry", "--smoke", "--rows", "10", "--output", "plain",
                    cwd=tmp_path), "holds 1 file(s) this toolkit did not write (root (a link))")
    handed = handed_over(finished_run, tmp_path)
    (handed / "root").symlink_to("/")
    refused(toolkit(*COMMANDS["run --overwrite"], cwd=tmp_path),
            "handed/root is a symbolic link (to /)")
