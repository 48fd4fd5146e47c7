"""Looking after a cache folder: what it holds, and keeping it within a size.

A cache only grows: every run that answers a new prompt adds a file. :func:`cache_contents`
says what a location holds (entry files, answers, bytes, damaged files);
:func:`prune_cache` removes the oldest entry files until the rest fit a size, those older
than an age, and damaged ones; :func:`clear_cache` removes every entry file. Only files
the cache wrote are ever removed (entry files and its own temporary files, the latter
only once no run can still be writing them), never anything else in the folder.

Removing entries is safe beside a run using the cache: entries never change, so a run
that read one keeps its answer, and one that didn't answers that prompt again.
"""

from __future__ import annotations

import contextlib
import time
from dataclasses import dataclass

from toolkit.run.answer_cache.entries import (
    ENTRY_SUFFIX,
    TEMPORARY_PREFIX,
    read_entry_file,
    resolve_location,
)

#: A temporary file older than this is left over from a run killed while writing it
#: (a whole entry file is written in well under a second).
LEFTOVER_AFTER_S = 3600.0


@dataclass(frozen=True)
class EntryFile:
    """One file of a cache: where it is, its size and age, and its answers (0 and a
    ``problem`` for a damaged one, or a temporary file left over)."""

    path: str
    size: int
    modified: float
    answers: int
    problem: str | None = None


@dataclass(frozen=True)
class CacheContents:
    """What a cache location holds."""

    location: str
    files: tuple[EntryFile, ...]

    @property
    def answers(self) -> int:
        return sum(f.answers for f in self.files)

    @property
    def size(self) -> int:
        return sum(f.size for f in self.files)

    @property
    def damaged(self) -> tuple[EntryFile, ...]:
        return tuple(f for f in self.files if f.problem is not None)


@dataclass(frozen=True)
class Removed:
    """What a prune or a clear removed (``gone``), and what is left."""

    gone: CacheContents
    left: CacheContents


def cache_contents(location: str, *, now: float | None = None) -> CacheContents:
    """Every entry file under ``location`` (each read and checked) and the temporary
    files runs killed mid-write left; nothing else there is looked at.

    Raises:
        FileNotFoundError: there is no folder (or prefix) at ``location``.
    """
    import pyarrow.fs

    fs, root = resolve_location(location)
    if fs.get_file_info(root).type == pyarrow.fs.FileType.NotFound:
        raise FileNotFoundError(root)
    now = time.time() if now is None else now
    files = []
    for info in fs.get_file_info(pyarrow.fs.FileSelector(root, allow_not_found=True)):
        if info.type != pyarrow.fs.FileType.File:
            continue
        name = info.path.rsplit("/", 1)[-1]
        modified = info.mtime.timestamp() if info.mtime is not None else now
        if name.endswith(ENTRY_SUFFIX):
            problem, answers = read_entry_file(fs, info.path)
            files.append(EntryFile(info.path, info.size or 0, modified, len(answers), problem))
        elif name.startswith(TEMPORARY_PREFIX) and now - modified > LEFTOVER_AFTER_S:
            files.append(EntryFile(info.path, info.size or 0, modified, 0,
                                   "left over by a run stopped while writing it"))
    return CacheContents(location, tuple(sorted(files, key=lambda f: (f.modified, f.path))))


def prune_cache(location: str, *, max_size: int | None = None,
                older_than_s: float | None = None, now: float | None = None) -> Removed:
    """Remove damaged and left-over files, entry files older than ``older_than_s``, then
    the oldest until the rest take at most ``max_size`` bytes."""
    now = time.time() if now is None else now
    contents = cache_contents(location, now=now)
    doomed = {f.path for f in contents.files if f.problem is not None
              or (older_than_s is not None and now - f.modified > older_than_s)}
    if max_size is not None:
        size = contents.size - sum(f.size for f in contents.files if f.path in doomed)
        for entry in contents.files:  # oldest first
            if size <= max_size:
                break
            if entry.path not in doomed:
                doomed.add(entry.path)
                size -= entry.size
    return _removed(location, contents, doomed)


def clear_cache(location: str, *, now: float | None = None) -> Removed:
    """Remove every entry file (and left-over temporary file) under ``location``."""
    now = time.time() if now is None else now
    contents = cache_contents(location, now=now)
    return _removed(location, contents, {f.path for f in contents.files})


def _removed(location: str, contents: CacheContents, doomed: set[str]) -> Removed:
    """Delete the files of ``contents`` whose paths are ``doomed``."""
    fs, _ = resolve_location(location)
    for path in doomed:
        with contextlib.suppress(FileNotFoundError):  # another prune got there first
            fs.delete_file(path)
    return Removed(CacheContents(location, tuple(f for f in contents.files if f.path in doomed)),
                   CacheContents(location, tuple(f for f in contents.files
                                                 if f.path not in doomed)))
