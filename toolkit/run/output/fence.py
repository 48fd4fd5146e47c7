"""Fencing: a run proves it still holds its folder before each thing it makes visible.

A run's lock (:mod:`toolkit.run.output.writer_lock`) is taken over once its heartbeat
is :data:`~toolkit.run.output.writer_lock.STALE_AFTER_S` old, also while its process
lives on: a laptop asleep, a stopped process, a driver stalled on a network mount. When
that run wakes, its threads and tasks carry on from where they were, so each commit
point checks the lock file's token first, and a token not its own stops it with
:class:`~toolkit.errors.WriterFencedError` and nothing more written:

- each result file and each of Ray Data's pending checkpoint files, on the Ray worker
  that makes it, right before it is made (:class:`FencedFilenames`: Ray asks the
  filename provider for a task's file name before it writes the pending checkpoint,
  and again before it writes the file); Ray Data then commits the checkpoint by
  renaming the pending file, with no hook of its own: only a file whose check passed
  is ever committed, and a pending checkpoint left uncommitted is what the new owner's
  resume deletes, with any file of its name;
- the manifest, summary, report and batch output file (``RunDirectory._replace``),
  and the deletes of the checkpoint and staged input when a run ends, on the driver.

What is guaranteed: no write starts after a check that saw another run's token. A
check and the write it guards are not one step, so a run paused between the two (a
few milliseconds for a JSON file; one result file's write, on a worker) still finishes
that one write. A local disk compares the token of a file created exclusively; an
object store (``s3://``) has had strong read-after-write consistency since December
2020, so a GET sees the last lock written, and the same holds there, except that a
lock written by two runs within the same moment (two starts, or a heartbeat and a
takeover) can go either way: see :mod:`toolkit.run.output.writer_lock`.
"""

from __future__ import annotations

import json
import os
import threading
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from toolkit.errors import WriterFencedError

if TYPE_CHECKING:
    import pyarrow.fs


@dataclass(frozen=True)
class Holder:
    """Who holds a lock, as its file says."""

    token: str
    host: str
    pid: int
    command: str
    started: str

    @classmethod
    def from_content(cls, content: Any) -> "Holder | None":
        if not isinstance(content, dict):
            return None
        try:
            return cls(token=str(content["token"]), host=str(content["host"]),
                       pid=int(content["pid"]), command=str(content["command"]),
                       started=str(content["started"]))
        except (KeyError, TypeError, ValueError):
            return None


def read_holder(fs: "pyarrow.fs.FileSystem", path: str) -> Holder | None:
    """Who the lock file at ``path`` names; None when there is none, or it is not a lock
    (one being written right now, or garbage).

    Raises:
        OSError: the file could not be read (not a missing file: a failing disk or
            network, where nobody can say who holds it).
    """
    try:
        with fs.open_input_stream(path) as stream:
            raw = stream.read()
    except FileNotFoundError:
        return None
    try:
        return Holder.from_content(json.loads(raw or b"null"))
    except ValueError:
        return None


class Fence:
    """The check a run makes before each commit: does the folder's lock still name it?

    Pickled to Ray workers with the result files' names (:class:`FencedFilenames`),
    so it holds only what a worker can use: the filesystem, the lock's path and the
    holder this run wrote.
    """

    def __init__(self, fs: "pyarrow.fs.FileSystem", location: str, lock_path: str,
                 mine: Holder) -> None:
        """
        Args:
            fs: The folder's filesystem (Arrow's, as the run directory resolved it).
            location: The folder as the user named it, for the message.
            lock_path: The lock file, as a path of ``fs``.
            mine: The holder this run wrote into the lock file.
        """
        self.fs = fs
        self.location = location
        self.lock_path = lock_path
        self.mine = mine
        #: Set (on the driver) once the heartbeat saw another token: every later check
        #: fails at once. ``(holder,)``: the holder seen there, None for no lock file.
        self.taken: tuple[Holder | None] | None = None

    def check(self) -> None:
        """Return while the lock file still holds this run's token.

        Raises:
            WriterFencedError: another run took the folder over (named), or its lock
                file is gone; nothing may be written.
            OSError: the lock file could not be read.
        """
        if self.taken is not None:
            raise self.error(self.taken[0])
        holder = read_holder(self.fs, self.lock_path)
        if holder is None or holder.token != self.mine.token:
            self.taken = (holder,)
            raise self.error(holder)

    def error(self, holder: Holder | None) -> WriterFencedError:
        """What a run that lost its folder says: who has it now, and what to do."""
        if holder is None:
            who = "another run (its lock file is gone)"
        else:
            where = "this machine" if holder.host == self.mine.host else holder.host
            who = (f"another run: {holder.command} (pid {holder.pid} on {where}, started "
                   f"{holder.started})")
        return WriterFencedError(
            f"data.output: {self.location} was taken over by {who} while this run was "
            "paused; nothing more was written. Its lock had no heartbeat for longer than "
            "the takeover limit (a machine asleep, a stopped process, a stalled disk), "
            "so the folder is the other run's now.",
            hint=f"Let that run finish (its log: {self.location.rstrip('/')}/_logs/run.log), "
            "or stop it; then run the same command again to resume: rows either run "
            "wrote stay, and only the rest are run.",
        )

    def __getstate__(self) -> dict[str, Any]:
        # A worker starts from the file, not from what the driver's heartbeat saw.
        return {**vars(self), "taken": None}


class FencedFilenames:
    """Ray's filename provider for a write, checking the fence before each file.

    Ray Data calls ``get_filename_for_task`` on the worker right before it writes a
    task's pending checkpoint and again right before its result file, so a task of a
    run that lost its folder fails there (``WriterFencedError``, not retried: every try
    would find the same lock) and makes neither.
    """

    def __init__(self, names: Any, fence: Fence) -> None:
        """
        Args:
            names: Ray's ``FilenameProvider`` that names the files.
            fence: This run's :class:`Fence`.
        """
        self.names = names
        self.fence = fence

    def get_filename_for_task(self, write_uuid: str, task_index: int) -> str:
        self.fence.check()
        return self.names.get_filename_for_task(write_uuid, task_index)

    def get_filename_for_block(self, block: Any, write_uuid: str, task_index: int,
                               block_index: int) -> str:
        self.fence.check()
        return self.names.get_filename_for_block(block, write_uuid, task_index, block_index)

    def get_filename_for_row(self, row: Any, write_uuid: str, task_index: int,
                             block_index: int, row_index: int) -> str:
        self.fence.check()
        return self.names.get_filename_for_row(row, write_uuid, task_index, block_index,
                                               row_index)


# -- the folders this process holds -------------------------------------------------------

_FENCES: dict[str, Fence] = {}
_FENCES_GUARD = threading.Lock()


def folder_key(root: str, location: str, local: bool) -> str:
    """One name per folder, however it is spelled (a local folder by its real path)."""
    return os.path.realpath(root) if local else location.rstrip("/")


def hold(key: str, fence: Fence) -> None:
    """From now on, writes to the folder ``key`` check ``fence`` (the lock was taken)."""
    with _FENCES_GUARD:
        _FENCES[key] = fence


def let_go(key: str) -> None:
    """The lock of ``key`` was released: its writes check nothing any more."""
    with _FENCES_GUARD:
        _FENCES.pop(key, None)


def fence_of(key: str) -> Fence | None:
    """The fence of a folder this process holds; None for one it doesn't."""
    with _FENCES_GUARD:
        return _FENCES.get(key)
