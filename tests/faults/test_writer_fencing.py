"""A run paused until another took its folder over wakes, sees so, and writes nothing more.

A laptop asleep, a stopped process, a driver stalled on a network mount: its lock's
heartbeat stops, the next run takes the folder over, and the paused run wakes in the
middle of its write. Run as users meet it: two `toolkit run` processes of the same
command, the first stopped for real (SIGSTOP) and woken (SIGCONT) after the second took
its folder; then the files on disk are read back. The takeover limit is a few seconds
here (``TOOLKIT_LOCK_STALE_AFTER_S``) instead of two minutes.
"""

from __future__ import annotations

import json
import os
import pickle
import re
import signal
import subprocess
import time
from pathlib import Path

import pyarrow.fs
import pytest

from test_no_row_lost import assert_exact, kill_group, settled_row_count, wait_for_rows
from toolkit.errors import WriterFencedError
from toolkit.run.output import writer_lock
from toolkit.run.output.run_directory import LOCK_FILE, Manifest, RunDirectory
from toolkit.run.output.writer_lock import WriterLock

ROWS = 500
STALE_S = 4
THEIRS = {"token": "theirs", "host": "gpu-node-7", "pid": 4242, "command": "toolkit run",
          "started": "2026-11-26T00:00:00+00:00"}


def object_store() -> pyarrow.fs.FileSystem:
    """An in-memory filesystem without real folders, as s3:// is."""
    import fsspec

    memory = fsspec.filesystem("memory")
    memory.store.clear()
    memory.pseudo_dirs[:] = [""]
    return pyarrow.fs.PyFileSystem(pyarrow.fs.FSSpecHandler(memory))


@pytest.mark.parametrize("where", ["local", "object-store"])
def test_a_lock_taken_over_is_never_refreshed_and_stops_every_write(tmp_path, monkeypatch,
                                                                     where):
    monkeypatch.setattr(writer_lock, "HEARTBEAT_S", 0.05)
    run_dir = (RunDirectory(str(tmp_path / "out")) if where == "local"
               else RunDirectory("/bucket/out", filesystem=object_store()))
    fs, lock_path = run_dir.fs, f"{run_dir.root}/{LOCK_FILE}"
    lock = WriterLock(run_dir, "toolkit run")
    lock.acquire()
    try:
        run_dir.write_manifest(Manifest(fingerprint="ours", spec={}))  # ours: it writes
        names = run_dir.filenames("0123456789ab", "parquet")
        assert names.get_filename_for_task("w", 3) == "part-0123456789ab_w_000003.parquet"

        # Another run takes the folder over while this one sleeps.
        with fs.open_output_stream(lock_path) as stream:
            stream.write(json.dumps(THEIRS).encode())
        if where == "local":
            os.utime(lock_path, (1_000_000_000, 1_000_000_000))
        time.sleep(0.5)  # ten heartbeats

        # The heartbeat left their lock as it was, and let go of it.
        with fs.open_input_stream(lock_path) as stream:
            assert json.loads(stream.read()) == THEIRS
        if where == "local":
            assert os.stat(lock_path).st_mtime == 1_000_000_000
        # Every write stops, saying who has the folder now; the manifest stays as it was.
        with pytest.raises(WriterFencedError) as fenced:
            run_dir.write_manifest(Manifest(fingerprint="after", spec={}))
        assert run_dir.read_manifest().fingerprint == "ours"
        with pytest.raises(WriterFencedError):
            run_dir.finish()
        # A worker's file name, asked for right before its file is made.
        with pytest.raises(WriterFencedError):
            names.get_filename_for_task("w", 4)
    finally:
        lock.release()
    message = str(fenced.value)
    assert ("was taken over by another run: toolkit run (pid 4242 on gpu-node-7, started "
            "2026-11-26T00:00:00+00:00) while this run was paused") in message, message
    assert "while this run was paused; nothing more was written" in message
    assert "run the same command again to resume" in fenced.value.hint
    # As a worker's error reaches the driver: whole, hint and all.
    again = pickle.loads(pickle.dumps(fenced.value))
    assert (str(again), again.hint) == (message, fenced.value.hint)
    # Releasing left the new owner's lock where it was.
    with fs.open_input_stream(lock_path) as stream:
        assert json.loads(stream.read()) == THEIRS


def start(out: Path, name: str) -> subprocess.Popen:
    """``toolkit run`` in its own process group with its own local Ray; its output goes
    to ``<name>.out`` and ``<name>.err`` beside ``out``."""
    with open(out.parent / f"{name}.out", "w") as stdout, \
            open(out.parent / f"{name}.err", "w") as stderr:
        return subprocess.Popen(
            ["toolkit", "run", "text-industry", "--smoke", "--rows", str(ROWS),
             "--partitions", "10", "--batch-size", "32", "--output", str(out)],
            stdout=stdout, stderr=stderr, cwd=out.parent, start_new_session=True,
            env={**os.environ, "RAY_ADDRESS": "", "TOOLKIT_LOCK_STALE_AFTER_S": str(STALE_S)})


def write_ids(out: Path) -> set[str]:
    return {m.group(1) for path in out.glob("part-*")
            if (m := re.match(r"part-([0-9a-f]{12})_", path.name))}


def files_of(out: Path, write_id: str) -> dict[str, tuple[int, int]]:
    """Result and checkpoint files of one write (both are named after it): mtime, size."""
    return {str(path.relative_to(out)): (path.stat().st_mtime_ns, path.stat().st_size)
            for path in out.rglob(f"*{write_id}*") if path.is_file()}


def lock_pid(out: Path) -> int | None:
    try:
        return json.loads((out / LOCK_FILE).read_text())["pid"]
    except (OSError, ValueError, KeyError):
        return None


def wait_until(condition, what: str, timeout: float = 180) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.1)


def test_a_run_paused_past_its_takeover_wakes_writes_nothing_and_says_who_has_the_folder(
        tmp_path):
    out = tmp_path / "out"
    first = start(out, "first")
    second = None
    try:
        wait_for_rows(out, first, at_least=1)
        os.kill(first.pid, signal.SIGSTOP)  # the laptop's lid closes
        settled_row_count(out, "Index")  # its workers finish the files they were writing
        (paused_id,) = write_ids(out)
        paused_files = files_of(out, paused_id)
        assert any(name.startswith("part-") for name in paused_files)
        # No heartbeat for longer than the limit: the next run may take the folder.
        wait_until(lambda: time.time() - (out / LOCK_FILE).stat().st_mtime > STALE_S + 1,
                   "the paused run's lock to go stale", timeout=60)

        second = start(out, "second")
        wait_until(lambda: lock_pid(out) == second.pid, "the second run to take the lock")
        os.kill(first.pid, signal.SIGCONT)  # the lid opens while the second starts its Ray
        first.wait(timeout=180)
        assert second.poll() is None, "the second run ended before the first had woken"

        error = (tmp_path / "first.err").read_text()
        assert first.returncode == WriterFencedError.exit_code, error[-3000:]
        assert (f"was taken over by another run: toolkit run (pid {second.pid} on this "
                "machine, started ") in error, error[-3000:]
        assert "while this run was paused; nothing more was written" in error
        assert "Traceback" not in error
        # The new owner's lock is where it was, and the woken run added or changed no
        # file of its own (the new owner's resume may have deleted some it never finished).
        assert lock_pid(out) == second.pid
        after = files_of(out, paused_id)
        assert all(paused_files.get(name) == seen for name, seen in after.items()), (
            sorted(set(after.items()) - set(paused_files.items())))

        second.wait(timeout=300)
        summary = (tmp_path / "second.out").read_text()
        assert second.returncode == 0, summary + (tmp_path / "second.err").read_text()[-3000:]
        assert "Resumed:" in summary
    finally:
        for proc in (first, second):
            if proc is not None:
                kill_group(proc)
    assert_exact(out, ROWS)
    assert not (out / LOCK_FILE).exists()  # the second let its own lock go
