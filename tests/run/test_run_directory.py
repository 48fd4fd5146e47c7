"""The run directory: what the toolkit may touch in an output directory, and when a rerun resumes.

Runs against a local folder and against an in-memory filesystem that behaves like
an object store (no real directories), as ``s3://`` does.
"""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.fs
import pyarrow.parquet as pq
import pytest

from toolkit.errors import SpecError
from toolkit.run.output.fingerprint import results_fingerprint
from toolkit.run.output.run_directory import (
    CHECKPOINT_DIR,
    SUMMARY_FILE,
    RunDirectory,
    RunState,
)
from toolkit.spec.jobs.catalog import load_job
from toolkit.spec.loading import load_job_spec

JOB = load_job("text-industry")


def spec(output: str, *sets: str):
    return load_job_spec(JOB, smoke=True, overrides={"data.output": output}, sets=sets)


def memory_filesystem() -> pyarrow.fs.FileSystem:
    import fsspec

    memory = fsspec.filesystem("memory")
    memory.store.clear()
    memory.pseudo_dirs.clear()
    memory.pseudo_dirs.append("")
    return pyarrow.fs.PyFileSystem(pyarrow.fs.FSSpecHandler(memory))


@pytest.fixture(params=["local", "object-store"])
def place(request: pytest.FixtureRequest, tmp_path: Path):
    """(location, filesystem) of an output directory."""
    if request.param == "local":
        return str(tmp_path / "out"), None
    return "/bucket/out", memory_filesystem()


def open_dir(place) -> RunDirectory:
    location, fs = place
    return RunDirectory(location, filesystem=fs)


def write_file(run_dir: RunDirectory, name: str, content: bytes = b"x") -> None:
    run_dir.fs.create_dir(f"{run_dir.root}/{name}".rsplit("/", 1)[0], recursive=True)
    with run_dir.fs.open_output_stream(f"{run_dir.root}/{name}") as stream:
        stream.write(content)


def write_results(run_dir: RunDirectory, rows: int = 3) -> str:
    """What a run writes: a write id in the manifest, then files named by it."""
    write_id = run_dir.begin_write()
    table = pa.table({"Index": [str(i) for i in range(rows)], "error": [None] * rows})
    with run_dir.fs.open_output_stream(f"{run_dir.root}/part-{write_id}_abc_000000-0.parquet") as f:
        pq.write_table(table, f)
    run_dir.end_write(write_id)
    return write_id


def test_a_folder_with_the_users_files_is_refused_even_with_overwrite(place):
    run_dir = open_dir(place)
    write_file(run_dir, "notes.txt", b"my notes")
    write_file(run_dir, "code/analysis.py", b"print(1)")
    for overwrite in (False, True):
        with pytest.raises(SpecError) as refused:
            run_dir.prepare(spec(place[0]), overwrite=overwrite, resumable=True)
        assert refused.value.exit_code == 2
        assert "holds 2 file(s) this toolkit did not write (code/analysis.py, notes.txt)" in str(
            refused.value)
        assert refused.value.hint == "Choose an empty or new directory with --output."
    assert run_dir.entries() == ["code/analysis.py", "notes.txt"]  # all still there


def test_overwrite_replaces_only_what_the_toolkit_wrote(place):
    run_dir = open_dir(place)
    assert run_dir.prepare(spec(place[0]), overwrite=False, resumable=True) is RunState.EMPTY
    write_results(run_dir)
    run_dir.write_json(SUMMARY_FILE, {"rows_written": 3})
    assert run_dir.prepare(spec(place[0]), overwrite=False, resumable=True) is RunState.COMPLETE

    assert run_dir.prepare(spec(place[0]), overwrite=True, resumable=True) is RunState.EMPTY
    assert run_dir.entries() == ["_manifest.json"]
    assert run_dir.read_manifest().write_ids == []


def test_a_foreign_file_among_results_blocks_overwrite_and_is_kept(place):
    run_dir = open_dir(place)
    run_dir.prepare(spec(place[0]), overwrite=False, resumable=True)
    write_results(run_dir)
    write_file(run_dir, "README.md", b"mine")
    with pytest.raises(SpecError, match=r"did not write \(README.md\)"):
        run_dir.prepare(spec(place[0]), overwrite=True, resumable=True)
    assert "README.md" in run_dir.entries()
    assert len(run_dir.result_files()) == 1


def test_a_different_result_setting_is_a_different_spec(place):
    run_dir = open_dir(place)
    run_dir.prepare(spec(place[0]), overwrite=False, resumable=True)
    write_results(run_dir)
    run_dir.write_json(SUMMARY_FILE, {})
    for change, named in [
        ("engine.engine_kwargs.max_model_len=512", "engine.engine_kwargs.max_model_len"),
        ("engine.kind=vllm", "engine.kind"),
        ("prompt.system=Answer in French.", "prompt.system"),
        ("engine.engine_kwargs.dtype=bfloat16", "engine.engine_kwargs.dtype"),
        ("sampling.temperature=0.7", "sampling.temperature"),
    ]:
        with pytest.raises(SpecError, match=rf"different spec \(changed: {named}\)"):
            run_dir.prepare(spec(place[0], change), overwrite=False, resumable=True)


def test_speed_settings_keep_the_fingerprint_so_a_crashed_run_resumes(place):
    base = spec(place[0])
    for change in ("engine.batch_size=8", "engine.concurrency=2", "data.partitions=7",
                   "engine.engine_kwargs.gpu_memory_utilization=0.5", "strict=true",
                   "compute.max_workers=3"):
        assert results_fingerprint(spec(place[0], change)) == results_fingerprint(base), change
    run_dir = open_dir(place)
    run_dir.prepare(base, overwrite=False, resumable=True)
    write_results(run_dir)
    write_file(run_dir, f"{CHECKPOINT_DIR}/ids.parquet")  # Ray Data's checkpoint, unfinished
    smaller = spec(place[0], "engine.batch_size=8")
    assert run_dir.prepare(smaller, overwrite=False, resumable=True) is RunState.PARTIAL
    assert run_dir.read_manifest().spec["engine"]["batch_size"] == 8


def test_results_without_a_checkpoint_can_only_be_overwritten(place):
    run_dir = open_dir(place)
    run_dir.prepare(spec(place[0]), overwrite=False, resumable=True)
    write_results(run_dir)
    with pytest.raises(SpecError, match="unfinished run that can't be resumed"):
        run_dir.prepare(spec(place[0]), overwrite=False, resumable=True)


def test_rows_are_counted_from_the_files_written(place):
    run_dir = open_dir(place)
    run_dir.prepare(spec(place[0]), overwrite=False, resumable=True)
    first = write_results(run_dir, rows=5)
    second = run_dir.begin_write()
    assert run_dir.end_write(second) == []  # a write that produced nothing
    files = run_dir.result_files()
    assert len(files) == 1 and f"part-{first}_" in files[0]
    assert run_dir.count_rows(files, "parquet") == 5
    assert run_dir.open_results("parquet").count_rows() == 5


def test_an_output_that_is_a_file_is_refused(tmp_path: Path):
    (tmp_path / "results").write_text("not a directory")
    with pytest.raises(SpecError, match="exists and is a file, not a directory"):
        RunDirectory(str(tmp_path / "results")).prepare(
            spec(str(tmp_path / "results")), overwrite=False, resumable=True)


def test_names_starting_with_an_underscore_are_not_enough_to_be_the_toolkits(place):
    run_dir = open_dir(place)
    write_file(run_dir, "_input/precious.csv", b"mine")
    write_file(run_dir, "_logs/notes.txt", b"my notes")
    for overwrite in (False, True):
        with pytest.raises(SpecError, match=r"did not write \(_input/precious.csv, "
                                            r"_logs/notes.txt\)"):
            run_dir.prepare(spec(place[0]), overwrite=overwrite, resumable=True)
    assert run_dir.entries() == ["_input/precious.csv", "_logs/notes.txt"]


def test_only_what_the_manifest_records_is_the_toolkits(place):
    run_dir = open_dir(place)
    run_dir.prepare(spec(place[0]), overwrite=False, resumable=True)
    run_dir.claim("_logs/run.log")  # as toolkit run does before opening its log
    write_file(run_dir, "_logs/run.log", b"ray said things")
    write_results(run_dir)
    run_dir.write_json(SUMMARY_FILE, {"rows_written": 3})
    write_file(run_dir, "_logs/notes.txt", b"my notes")
    with pytest.raises(SpecError, match=r"did not write \(_logs/notes.txt\)"):
        run_dir.prepare(spec(place[0]), overwrite=True, resumable=True)
    assert len(run_dir.entries()) == 5  # manifest, log, results, summary, notes
    run_dir.fs.delete_file(f"{run_dir.root}/_logs/notes.txt")
    assert run_dir.prepare(spec(place[0]), overwrite=True, resumable=True) is RunState.EMPTY
    assert run_dir.entries() == ["_manifest.json"]


def test_a_run_refused_before_its_first_row_gives_way_to_the_fixed_spec(place):
    run_dir = open_dir(place)
    run_dir.prepare(spec(place[0], "data.id_column=Company"), overwrite=False, resumable=True)
    assert run_dir.prepare(spec(place[0]), overwrite=False, resumable=True) is RunState.EMPTY
    assert run_dir.read_manifest().spec["data"]["id_column"] == "Index"


def test_a_reader_never_sees_a_half_written_manifest(tmp_path: Path):
    """``toolkit status`` and progress polls read the manifest while a run rewrites it."""
    import json
    import threading

    run_dir = RunDirectory(str(tmp_path / "out"))
    run_dir.prepare(spec(str(tmp_path / "out")), overwrite=False, resumable=True)
    done = threading.Event()

    def keep_writing() -> None:
        for _ in range(300):
            run_dir.end_write(run_dir.begin_write())
        done.set()

    writer = threading.Thread(target=keep_writing)
    writer.start()
    reads = 0
    while not done.is_set():
        json.loads((tmp_path / "out" / "_manifest.json").read_text())
        reads += 1
    writer.join()
    assert reads > 0
    assert sorted(run_dir.entries()) == ["_manifest.json"]  # no partial file left behind


def test_a_partial_file_left_by_a_killed_run_is_the_toolkits(place):
    run_dir = open_dir(place)
    run_dir.prepare(spec(place[0]), overwrite=False, resumable=True)
    write_file(run_dir, "_manifest.json.partial-0123456789ab", b"{")
    assert run_dir.prepare(spec(place[0]), overwrite=True, resumable=True) is RunState.EMPTY
    assert run_dir.entries() == ["_manifest.json"]
