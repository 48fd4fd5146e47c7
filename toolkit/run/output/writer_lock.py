"""One writer per run folder: ``_lock.json``, held by the one process writing there.

Two drivers on one output folder share Ray Data's checkpoint and delete each other's
files: a second run finds the first's checkpoint half-written, a second run's
``--overwrite`` deletes what the first is writing, a ``toolkit retry`` prunes rows the
run is still writing. So every run, retry and ``--overwrite`` takes the folder's lock
before it changes anything, and refuses (exit 2, :class:`~toolkit.errors.OutputInUseError`)
while another live process holds it, naming that process.

The lock is a file in the folder (a name the run directory always owns), created
exclusively on a local disk; it says who holds it (host, pid, the command, when it
started, a random token), and while it is held a thread refreshes it every
:data:`HEARTBEAT_S`. A lock is stale, and the next run takes it over, when its process
is gone (same host) or its heartbeat is older than :data:`STALE_AFTER_S` (a driver on
another node that died). A crash therefore never blocks a resume for long.

A live process can miss its heartbeats too (a laptop asleep, a stopped process, a
driver stalled on a network mount) and wake to find its folder taken over. So the
heartbeat refreshes only a lock file that still holds this run's token (read, compare,
then refresh), and stops for good, marking the lock lost, once it doesn't; and every
write to the folder first checks the token (:mod:`toolkit.run.output.fence`), so the
run that woke stops with :class:`~toolkit.errors.WriterFencedError` and writes nothing
more. Releasing a lock another run holds now leaves its file alone.

``TOOLKIT_LOCK_STALE_AFTER_S`` sets the takeover limit (tests; a shared disk slow
enough to starve the heartbeat wants more); the heartbeat beats four times within it.

Object stores (``s3://``) have no exclusive create through Arrow's filesystems: there
the lock is written and read back, so two runs starting within the same moment could
both go on; any later run sees the holder (S3 reads what was last written since 2020).
The heartbeat rewrites the lock there, after reading it: a takeover landing between
that read and that write is overwritten, and whichever run reads the lock next and
finds another token stops (the new run at its read back, or at its next heartbeat).

Within one process the lock is re-entrant (``toolkit retry`` holds it from its setup
through the run it resumes).
"""

from __future__ import annotations

import datetime
import json
import os
import socket
import threading
import time
import uuid
from collections.abc import Mapping
from typing import TYPE_CHECKING

from toolkit.errors import OutputInUseError, SpecError
from toolkit.run.output.fence import Fence, Holder, folder_key, hold, let_go, read_holder
from toolkit.run.output.run_directory import LOCK_FILE, RUN_LOG_FILE
from toolkit.run.output.write_failure import output_write_error

if TYPE_CHECKING:
    from toolkit.run.output.run_directory import RunDirectory


def _stale_after_s(environ: Mapping[str, str] = os.environ) -> float:
    """``TOOLKIT_LOCK_STALE_AFTER_S`` when it is a positive number of seconds, else 120."""
    try:
        seconds = float(environ.get("TOOLKIT_LOCK_STALE_AFTER_S", ""))
    except ValueError:
        return 120.0
    return seconds if seconds > 0 else 120.0


#: A lock not refreshed for this long is a crashed run's (generous: a loaded machine
#: can starve a thread for a while, and taking a live run's lock is the worse error).
STALE_AFTER_S = _stale_after_s()
#: How often a held lock is refreshed.
HEARTBEAT_S = min(10.0, STALE_AFTER_S / 4)


class _Held:
    """A lock this process holds: how many holders nest in it, its heartbeat, and the
    fence every write checks."""

    def __init__(self, holder: Holder, fence: Fence) -> None:
        self.holder = holder
        self.fence = fence
        self.count = 1
        self.stop = threading.Event()
        self.thread: threading.Thread | None = None


_HELD: dict[str, _Held] = {}
_HELD_GUARD = threading.Lock()


class WriterLock:
    """The right to write one run directory, for as long as it is held.

    Example:
        >>> with WriterLock(run_dir, "toolkit run"):  # doctest: +SKIP
        ...     run_dir.prepare(spec, overwrite=True, resumable=True)
    """

    def __init__(self, run_dir: "RunDirectory", command: str) -> None:
        """
        Args:
            run_dir: The folder to hold.
            command: What holds it, for the message another run shows
                (``toolkit run``, ``toolkit retry``).
        """
        self.run_dir = run_dir
        self.command = command
        self._key = folder_key(run_dir.root, run_dir.location, run_dir.is_local)
        self._made_folder = False
        self._acquired = False

    def __enter__(self) -> "WriterLock":
        self.acquire()
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()

    def acquire(self) -> None:
        """Hold the folder, or refuse while another live run does.

        Raises:
            OutputInUseError: another live process holds it (named).
            SpecError: the folder can't be written, or its lock file is a link.
        """
        if self._acquired:
            return
        with _HELD_GUARD:
            held = _HELD.get(self._key)
            if held is not None:
                held.count += 1
                self._acquired = True
                return
        mine = Holder(token=uuid.uuid4().hex, host=socket.gethostname(), pid=os.getpid(),
                      command=self.command, started=_now())
        try:
            if self.run_dir.is_local:
                self._acquire_local(mine)
            else:
                self._acquire_remote(mine)
        except OSError as exc:
            raise output_write_error(exc, self.run_dir.location) or SpecError(
                f"data.output: can't write to {self.run_dir.location}: "
                f"{exc.strerror or exc}.",
                hint="Choose a directory you can write to with --output.",
            ) from None
        held = _Held(mine, Fence(self.run_dir.fs, self.run_dir.location, self._path, mine))
        held.thread = threading.Thread(target=self._beat, args=(held,), daemon=True,
                                       name="toolkit-writer-lock")
        held.thread.start()
        with _HELD_GUARD:
            _HELD[self._key] = held
        hold(self._key, held.fence)
        self._acquired = True

    def release(self) -> None:
        """Let the folder go (the last nested holder removes the lock file)."""
        if not self._acquired:
            return
        self._acquired = False
        with _HELD_GUARD:
            held = _HELD.get(self._key)
            if held is None:
                return
            held.count -= 1
            if held.count:
                return
            del _HELD[self._key]
        let_go(self._key)
        held.stop.set()
        if self._holder_now() == held.holder:
            try:
                self.run_dir.fs.delete_file(self._path)
            except OSError:
                pass
        if self._made_folder:  # a run refused before it wrote anything leaves no folder
            try:
                os.rmdir(self.run_dir.root)
            except OSError:
                pass

    # -- local disk: an exclusive create ---------------------------------------------------

    @property
    def _path(self) -> str:
        return f"{self.run_dir.root}/{LOCK_FILE}"

    def _acquire_local(self, mine: Holder) -> None:
        if not os.path.isdir(self.run_dir.root):
            if os.path.lexists(self.run_dir.root):
                self.run_dir.entries()  # a file, not a folder: its own clear message
            os.makedirs(self.run_dir.root, exist_ok=True)
            self._made_folder = True
        for _ in range(3):
            self.run_dir.check_no_link(LOCK_FILE)
            try:
                fd = os.open(self._path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW,
                             0o644)
            except FileExistsError:
                holder = self._holder_now()
                if holder is not None and not self._is_stale(holder):
                    raise self._in_use(holder)
                self._take_over_local(holder)
                continue
            try:
                with os.fdopen(fd, "w") as stream:
                    stream.write(_content(mine))
            except OSError:
                # A full disk: no empty lock is left for the next run to wait on.
                os.unlink(self._path)
                raise
            return
        raise self._in_use(self._holder_now())

    def _take_over_local(self, stale: Holder | None) -> None:
        """Remove a stale lock, unless another run replaced it meanwhile."""
        grave = f"{self._path}.{uuid.uuid4().hex}.stale"
        try:
            os.rename(self._path, grave)
        except FileNotFoundError:
            return  # another run took it over first; try again
        try:
            with open(grave, encoding="utf-8") as stream:
                taken = Holder.from_content(json.loads(stream.read() or "null"))
        except (OSError, ValueError):
            taken = None
        if taken != stale:  # a live lock made between our look and the rename: put it back
            try:
                os.link(grave, self._path)
            except OSError:
                pass
        os.unlink(grave)

    # -- object stores: write, then read back -----------------------------------------------

    def _acquire_remote(self, mine: Holder) -> None:
        holder = self._holder_now()
        if holder is not None and not self._is_stale(holder):
            raise self._in_use(holder)
        self._write(mine)
        time.sleep(0.2)  # a run that wrote just after us is seen on the read back
        now = self._holder_now()
        if now != mine:
            raise self._in_use(now)

    def _write(self, holder: Holder) -> None:
        with self.run_dir.fs.open_output_stream(self._path) as stream:
            stream.write(_content(holder).encode())

    # -- who holds it -------------------------------------------------------------------

    def _holder_now(self) -> Holder | None:
        try:
            return read_holder(self.run_dir.fs, self._path)
        except OSError:
            return None

    def _age_s(self) -> float | None:
        """Seconds since the lock was last refreshed, by its file's time."""
        info = self.run_dir.fs.get_file_info(self._path)
        if info.mtime is None:
            return None
        return time.time() - info.mtime.timestamp()

    def _is_stale(self, holder: Holder | None) -> bool:
        if holder is None:  # unreadable: one being written right now, or garbage
            age = self._age_s()
            return age is None or age > STALE_AFTER_S
        if holder.host == socket.gethostname():
            if holder.pid == os.getpid():
                return True  # this process holds nothing here (its locks are in _HELD)
            if not _pid_alive(holder.pid):
                return True
        age = self._age_s()
        return age is not None and age > STALE_AFTER_S

    def _in_use(self, holder: Holder | None) -> OutputInUseError:
        location = self.run_dir.location
        if holder is None:
            who = "another run"
        else:
            where = "this machine" if holder.host == socket.gethostname() else holder.host
            age = self._age_s()
            seen = f", last seen {age:.0f} s ago" if age is not None else ""
            who = (f"another run: {holder.command} (pid {holder.pid} on {where}), started "
                   f"{holder.started}{seen}")
        log = f"{location.rstrip('/')}/{RUN_LOG_FILE}"
        return OutputInUseError(
            f"data.output: {location} is being written by {who}. Two runs on one folder "
            "would share its checkpoint and delete each other's files, so this one did not "
            "start. Nothing was changed.",
            hint=f"Wait for it to end (its log: {log}), or stop it (Ctrl-C where it runs"
            + (f", or kill {holder.pid}" if holder is not None else "")
            + "); or choose another --output. A crashed run's lock is taken over at once "
            f"on the same machine, or after {STALE_AFTER_S:.0f} s without a heartbeat.",
        )

    # -- the heartbeat ------------------------------------------------------------------

    def _beat(self, held: _Held) -> None:
        while not held.stop.wait(HEARTBEAT_S) and self._refresh(held):
            pass

    def _refresh(self, held: _Held) -> bool:
        """One heartbeat: refresh the lock if it still holds our token; False (and the
        lock marked lost, so the next write stops at once) once another run's is there,
        or none: a run woken from a pause must not keep the new owner's lock alive as
        if it were its own, nor go on as if nothing happened."""
        try:
            holder = read_holder(self.run_dir.fs, self._path)
            if holder is None or holder.token != held.holder.token:
                held.fence.taken = (holder,)
                return False
            if self.run_dir.is_local:
                os.utime(self._path)
            else:
                self._write(held.holder)
        except OSError:
            pass  # the folder went away or can't be read now: the next write says so
        return True


def _content(holder: Holder) -> str:
    return json.dumps({"token": holder.token, "host": holder.host, "pid": holder.pid,
                       "command": holder.command, "started": holder.started}, indent=2)


def _now() -> str:
    return datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")


def _pid_alive(pid: int) -> bool:
    """Whether ``pid`` is a running process of this machine (a zombie is not: a killed
    run whose parent went too may wait unreaped where no init reaps it)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass  # someone else's process
    except OSError:
        return False
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as stream:
            state = stream.read().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return True  # no /proc (macOS): the signal said it exists
    return state not in ("Z", "X")
