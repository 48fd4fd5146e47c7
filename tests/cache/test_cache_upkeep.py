"""`toolkit cache show|prune|clear` on a folder the cache's own writer filled: what it
says, what it removes (the oldest, the damaged, the left-over; never a user's file)."""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

import pytest

from toolkit.cli.cache_command import format_size, parse_size
from toolkit.run.answer_cache.cache_upkeep import cache_contents, prune_cache
from toolkit.run.answer_cache.entries import ENTRY_SUFFIX, AnswerEntries

DAY = 86400.0


def toolkit(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run(["toolkit", *args], cwd=cwd, capture_output=True, text=True,
                          timeout=60)


def answer(text: str) -> dict:
    return {"generated_text": text, "num_input_tokens": 12, "num_generated_tokens": 2}


@pytest.fixture
def cache(tmp_path: Path) -> Path:
    """Three batches of answers written 30, 20 and 10 days ago, a damaged entry, a
    file a run killed mid-write left, and the user's own notes."""
    folder = tmp_path / "answers"
    entries = AnswerEntries(str(folder))
    now = time.time()
    for age_days, keys in ((30, "abc"), (20, "de"), (10, "f")):
        before = set(folder.iterdir())
        entries.store({key * 8: answer(f"answer {key}") for key in keys})
        (written,) = set(folder.iterdir()) - before
        os.utime(written, (now - age_days * DAY, now - age_days * DAY))
    damaged = folder / f"{'0' * 32}{ENTRY_SUFFIX}"
    damaged.write_bytes(b'{"format": 1, "sha256": "00", "entries": 1}\n{"k": {}}')
    left_over = folder / ".partial-0123"
    left_over.write_bytes(b"half an entr")
    os.utime(left_over, (now - 2 * 3600, now - 2 * 3600))
    (folder / "NOTES.txt").write_text("my notes on this cache\n")
    return folder


def test_show_counts_the_answers_and_names_the_damaged_file(cache: Path) -> None:
    shown = toolkit("cache", "show", str(cache), cwd=cache.parent)

    assert shown.returncode == 0, shown.stderr
    lines = shown.stdout.splitlines()
    assert lines[0].startswith(f"{cache}: 6 answers in 5 files, ")
    assert lines[1].startswith("Oldest file written 720h")  # 30 days
    damaged = [line for line in lines if line.startswith("Damaged:")]
    assert len(damaged) == 2
    assert "doesn't match its checksum" in damaged[0] + damaged[1]
    assert "left over by a run stopped while writing it" in damaged[0] + damaged[1]


def test_prune_removes_the_damaged_and_the_oldest_until_the_rest_fit(cache: Path) -> None:
    healthy = [f for f in cache_contents(str(cache)).files if f.problem is None]
    newest_two = sum(f.size for f in healthy[-2:])

    pruned = toolkit("cache", "prune", str(cache), "--max-size", str(newest_two),
                     cwd=cache.parent)

    assert pruned.returncode == 0, pruned.stderr
    assert pruned.stdout.startswith("Removed 3 answers in 3 files ")
    left = cache_contents(str(cache))
    assert left.answers == 3 and left.damaged == () and left.size <= newest_two
    # What is left still answers, as a run reads it.
    assert set(AnswerEntries(str(cache)).look_up(["dddddddd", "ffffffff", "aaaaaaaa"])) == {
        "dddddddd", "ffffffff"}
    assert (cache / "NOTES.txt").read_text() == "my notes on this cache\n"


def test_prune_by_age_keeps_what_is_newer(cache: Path) -> None:
    pruned = toolkit("cache", "prune", str(cache), "--older-than", "15d", cwd=cache.parent)

    assert pruned.returncode == 0, pruned.stderr
    assert cache_contents(str(cache)).answers == 1
    assert sorted(p.name for p in cache.iterdir() if not p.name.endswith(ENTRY_SUFFIX)) == [
        "NOTES.txt"]


def test_clear_says_what_it_would_remove_and_removes_it_with_yes(cache: Path) -> None:
    asked = toolkit("cache", "clear", str(cache), cwd=cache.parent)
    assert asked.returncode == 0, asked.stderr
    assert "Would remove 6 answers in 5 files" in asked.stdout
    assert cache_contents(str(cache)).answers == 6

    cleared = toolkit("cache", "clear", str(cache), "--yes", cwd=cache.parent)

    assert cleared.returncode == 0, cleared.stderr
    assert [p.name for p in cache.iterdir()] == ["NOTES.txt"]
    assert "0 answers in 0 files (0 bytes) are left" in cleared.stdout


def test_a_temporary_file_a_run_is_writing_now_is_left_alone(tmp_path: Path) -> None:
    folder = tmp_path / "answers"
    AnswerEntries(str(folder)).store({"k" * 8: answer("yes")})
    writing = folder / ".partial-4567"
    writing.write_bytes(b"being writ")

    prune_cache(str(folder), max_size=0)

    assert [p.name for p in folder.iterdir()] == [".partial-4567"]


def test_a_folder_that_is_not_there_or_a_bad_size_is_named(tmp_path: Path) -> None:
    missing = toolkit("cache", "show", str(tmp_path / "nowhere"), cwd=tmp_path)
    assert missing.returncode == 2
    assert f"No answer cache at {tmp_path / 'nowhere'}" in missing.stderr
    assert "Traceback" not in missing.stderr

    (tmp_path / "answers").mkdir()
    bad = toolkit("cache", "prune", str(tmp_path / "answers"), "--max-size", "lots",
                  cwd=tmp_path)
    assert bad.returncode == 2
    assert "--max-size: 'lots' is not a size such as 500MB" in bad.stderr


@pytest.mark.parametrize("text, size", [("0", 0), ("500MB", 500_000_000), ("10 GB", 10**10),
                                        ("2GiB", 2 << 30), ("1.5k", 1500), ("64kib", 65536)])
def test_sizes_are_read_as_written(text: str, size: int) -> None:
    assert parse_size(text) == size


def test_sizes_are_said_in_the_units_people_read() -> None:
    assert [format_size(n) for n in (12, 340_000, 1_234_000_000)] == [
        "12 bytes", "340.0 kB", "1.2 GB"]


def test_cache_alone_means_the_default_folder_and_toolkit_cache_looks_there(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TOOLKIT_CACHE_DIR", str(tmp_path / "toolkit-cache"))
    default = tmp_path / "toolkit-cache" / "answers"

    shown = toolkit("show", "text-industry", "--cache", "--rows", "10", cwd=tmp_path)

    assert shown.returncode == 0, shown.stderr
    assert f"cache:\n  dir: {default}\n" in shown.stdout
    AnswerEntries(str(default)).store({"k" * 8: answer("yes")})
    looked = toolkit("cache", "show", cwd=tmp_path)
    assert looked.returncode == 0, looked.stderr
    assert looked.stdout.startswith(f"{default}: 1 answers in 1 files")
