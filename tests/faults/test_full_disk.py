"""A disk that fills, or turns read-only, under a run's output folder.

The run ends with one paragraph and exit code 11 naming the folder, its free space and
what to do (no traceback, no retrying for minutes); no half-written result file is
listed by the manifest, counted, or read when the run resumes; a rerun on a folder
remounted read-only is refused the same way, changing nothing; and once there is space
the same command finishes with each id exactly once.

Run as users meet it: ``toolkit run`` in its own process (its own local Ray) on a real
small tmpfs mounted for the test. Mounting needs root: elsewhere the tests are skipped,
saying so; what a test mounts it always unmounts.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from test_no_row_lost import assert_exact, kill_group
from toolkit.errors import OutputWriteError
from toolkit.run.output.run_directory import PARTIAL_SUFFIX, REPORT_FILE, RunDirectory
from toolkit.run.output.write_failure import output_write_error
from toolkit.spec.jobs.catalog import load_job
from toolkit.spec.loading import load_job_spec

ROWS = 2000
#: 20 result files of ~8 KiB and their checkpoints: a disk this small fills after a few.
SMALL = "96k"


class SmallDisk:
    """A tmpfs of our own at ``path``: grown, made read-only or writable again."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def remount(self, options: str) -> None:
        subprocess.run(["mount", "-o", f"remount,{options}", str(self.path)], check=True,
                       capture_output=True)


@pytest.fixture()
def small_disk(tmp_path: Path) -> Iterator[SmallDisk]:
    if os.geteuid() != 0 or shutil.which("mount") is None:
        pytest.skip("mounting a small tmpfs needs root (and mount)")
    path = tmp_path / "disk"
    path.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={SMALL}", "tmpfs",
                              str(path)], capture_output=True, text=True)
    if mounted.returncode != 0:
        pytest.skip(f"can't mount a tmpfs here: {mounted.stderr.strip()}")
    try:
        yield SmallDisk(path)
    finally:
        # Lazily, should a process of the run still hold a file there: it is ours alone.
        subprocess.run(["umount", "-l", str(path)], check=True)


def toolkit_run(out: Path, cwd: Path) -> tuple[int, str, str]:
    """The same command each time: a tabular smoke run written in 20 pieces."""
    proc = subprocess.Popen(
        ["toolkit", "run", "tabular-predict", "--smoke", "--rows", str(ROWS),
         "--partitions", "20", "--batch-size", "100", "--output", str(out)],
        cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env={**os.environ, "RAY_ADDRESS": ""}, start_new_session=True)
    try:
        stdout, stderr = proc.communicate(timeout=300)
    finally:
        kill_group(proc)
    return proc.returncode, stdout, stderr


def error_paragraph(stderr: str) -> str:
    assert "Traceback" not in stderr and "Unexpected error" not in stderr, stderr[-3000:]
    return stderr[stderr.index("Error: "):]


def listing(out: Path) -> dict[str, int]:
    return {str(p.relative_to(out)): p.stat().st_size for p in out.rglob("*") if p.is_file()}


def manifest_files(out: Path) -> list[str]:
    return json.loads((out / "_manifest.json").read_text())["files"]


def test_a_full_disk_stops_the_run_and_the_same_command_finishes_once_there_is_space(
        small_disk, tmp_path):
    out = small_disk.path / "out"

    code, _, stderr = toolkit_run(out, tmp_path)
    assert code == OutputWriteError.exit_code, stderr[-3000:]  # not killed by a signal
    error = error_paragraph(stderr)
    assert error.startswith(f"Error: Writing to {out} failed: the disk is full (ENOSPC; "), error
    assert f" KiB free of {SMALL[:-1]} KiB)" in error and "rows kept in" in error, error
    assert "the same command resumes once there is space" in error, error
    assert "Hint: Free some space on that disk" in error and "--output" in error, error
    # The manifest lists no file cut off mid-write (whatever else the disk holds).
    for name in manifest_files(out):
        pq.read_metadata(out / name)

    # Read-only before the resume: refused the same way, and nothing changes.
    before = listing(out)
    small_disk.remount("ro")
    code, _, stderr = toolkit_run(out, tmp_path)
    assert code == OutputWriteError.exit_code, stderr[-3000:]
    error = error_paragraph(stderr)
    assert f"Writing to {out} failed: its file system is read-only (EROFS" in error, error
    assert "Hint: Remount it read-write, then run the same command again" in error, error
    assert listing(out) == before

    small_disk.remount("rw,size=64m")
    code, stdout, stderr = toolkit_run(out, tmp_path)
    assert code == 0, stderr[-3000:]
    assert "Resumed:" in stdout and f"rows in:       {ROWS:,}" in stdout, stdout
    assert_exact(out, ROWS, id_column="account_id")
    summary = json.loads((out / "_summary.json").read_text())
    assert summary["rows_in"] == summary["rows_written"] == ROWS
    parts = sorted(p.name for p in out.glob("part-*"))
    assert sorted(manifest_files(out)) == parts
    assert not list(out.rglob(f"*{PARTIAL_SUFFIX}*"))


def test_a_failed_write_of_the_toolkits_own_file_keeps_the_old_one_whole(small_disk):
    out = small_disk.path / "out"
    job = load_job("tabular-predict")
    spec = load_job_spec(job, smoke=True, overrides={"data.output": str(out)})
    run_dir = RunDirectory(str(out))
    run_dir.prepare(spec, overwrite=False, resumable=True)
    run_dir.write_file(REPORT_FILE, b"<p>the report as it was</p>")

    with pytest.raises(OSError) as failed:
        run_dir.write_file(REPORT_FILE, os.urandom(512 * 1024))  # more than the disk holds
    assert (out / REPORT_FILE).read_bytes() == b"<p>the report as it was</p>"
    assert not list(out.rglob(f"*{PARTIAL_SUFFIX}*"))
    error = output_write_error(failed.value, str(out), f"0 rows kept in {out}")
    assert error is not None and error.exit_code == 11
    assert error.message.startswith(f"Writing to {out} failed: the disk is full (ENOSPC; ")


def test_a_disk_too_full_for_the_manifest_is_refused_before_ray_starts(small_disk, tmp_path):
    small_disk.remount("size=4k")  # one page: the lock file's
    out = small_disk.path / "out"

    code, _, stderr = toolkit_run(out, tmp_path)
    assert code == OutputWriteError.exit_code, stderr[-3000:]
    error = error_paragraph(stderr)
    assert error.startswith(f"Error: Writing to {out} failed: the disk is full (ENOSPC; 0 KiB "
                            "free of 4 KiB). What the folder holds stays"), error
    # Nothing half-written: no lock, no sibling of the manifest, no empty manifest.
    left = listing(out) if out.exists() else {}
    assert set(left) <= {"_manifest.json"}, left
    if left:
        json.loads((out / "_manifest.json").read_text())
