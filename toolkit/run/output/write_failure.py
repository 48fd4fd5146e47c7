"""When the output folder can't be written: a full disk, a used-up quota, a file system
remounted read-only, a permission lost mid-run.

Writes to a run folder happen in two places: Ray workers write the result files and
Ray Data's checkpoint, and the driver writes the manifest, the staged input, the
summary, the report and Ray's log. Wherever one fails with ENOSPC, EDQUOT, EROFS,
EACCES or EPERM (one code path for all five, by ``errno``, however Ray wrapped it),
the run ends with one :class:`~toolkit.errors.OutputWriteError` (exit 11) naming the
folder, its free space, what the run kept and what to do; never a traceback, and not
after minutes of retries: a full disk stays full.

What a failed write leaves is never taken for a result:

- a result file cut off mid-write: Ray Data writes each piece's checkpoint as
  ``_checkpoint/<piece>.pending.parquet`` *before* the piece, and renames it to
  ``<piece>.parquet`` only once the piece is whole (a two-phase commit, see
  ``ray/data/_internal/planner/checkpoint/plan_write_op.py``). A resumed run's Ray
  Data first deletes the result files of every pending checkpoint and the pending
  files themselves, so the piece's rows are written again, once; the manifest lists
  no file of an uncommitted piece, and rows are counted from committed checkpoints
  only (:meth:`~toolkit.run.output.run_directory.RunDirectory.checkpointed_rows`);
- the driver's own files (manifest, summary, report) are written to a sibling and
  renamed over the old one: a failed write leaves the old file whole and removes
  the sibling;
- a ``--rows`` input staged into ``_input/`` is marked complete only once all of it
  is there; a copy cut short is staged again.
"""

from __future__ import annotations

import contextlib
import errno
import os
import re
import shutil
from collections.abc import Callable, Iterator

from toolkit.errors import OutputWriteError, ToolkitError, debug_enabled, error_chain, toolkit_cause

#: What each errno means for the folder, as the message says it.
WRITE_ERRNOS: dict[int, str] = {
    errno.ENOSPC: "the disk is full",
    errno.EDQUOT: "the disk quota is used up",
    errno.EROFS: "its file system is read-only",
    errno.EACCES: "permission to write there was denied",
    errno.EPERM: "writing there is not permitted",
}
#: These two also come from reading (an input file of someone else's): they count only
#: where the failed path is in the output folder.
_PERMISSION_ERRNOS = (errno.EACCES, errno.EPERM)
#: ``[Errno 28]`` (Python), ``[errno 28]`` (Arrow's detail): what survives of an
#: ``OSError`` in the text of an error Ray re-raised without its fields.
_ERRNO_TEXT = re.compile(r"\[errno (\d+)\]", re.IGNORECASE)
#: The file an error names: Arrow's ``Failed to open local file '/x/part-...'``,
#: Python's ``[Errno 28] No space left on device: '/x/_manifest.json'``.
_QUOTED_PATH = re.compile(r"'(/[^']+)'")


def failed_write_errno(exc: BaseException, location: str | None = None) -> int | None:
    """The errno of the failed write ``exc`` is or wraps (see :data:`WRITE_ERRNOS`);
    None when it is something else.

    Args:
        location: ``data.output``, where local: a failure that names a path elsewhere
            (Ray's own temp folder, say) is not the folder's; EACCES and EPERM count
            only where their path names the folder.
    """
    root = _local_root(location) if location else None
    for seen in error_chain(exc):
        found = seen.errno if isinstance(seen, OSError) else None
        text = str(seen)
        if found not in WRITE_ERRNOS:
            match = _ERRNO_TEXT.search(text)
            found = int(match.group(1)) if match else None
        if found not in WRITE_ERRNOS:
            continue
        named = _QUOTED_PATH.findall(text)
        if isinstance(seen, OSError) and seen.filename:
            named.append(os.path.abspath(os.fsdecode(seen.filename)))
        ours = [path for path in named if root is not None and _inside(path, root)]
        if (named and root is not None and not ours) or (
                found in _PERMISSION_ERRNOS and not ours):
            continue
        return found
    return None


def _inside(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip("/") + "/")


def output_write_error(exc: BaseException, location: str,
                       kept: str | None = None) -> OutputWriteError | None:
    """The :class:`OutputWriteError` to raise for ``exc``, a failed write to the run
    folder ``location``; None where ``exc`` is not one.

    Args:
        kept: What the folder holds now (``700 of 2,000 rows kept in out/x``).
    """
    code = failed_write_errno(exc, location)
    if code is None:
        return None
    what = WRITE_ERRNOS[code]
    space = free_space(location)
    said = f"{what} ({errno.errorcode.get(code, code)}{'; ' + space if space else ''})"
    stopped = f"The run stopped with {kept}" if kept else "What the folder holds stays"
    until = ("once there is space" if code in (errno.ENOSPC, errno.EDQUOT)
             else "once it can be written again")
    message = (f"Writing to {location} failed: {said}. {stopped} (nothing half-written "
               f"is kept), and the same command resumes {until}.")
    if code == errno.ENOSPC:
        hint = "Free some space on that disk"
    elif code == errno.EDQUOT:
        hint = "Free some of your quota there (or have it raised)"
    elif code == errno.EROFS:
        hint = "Remount it read-write"
    else:
        hint = "Give this user write permission on the folder again"
    hint += (", then run the same command again to resume; or choose another --output "
             "(a new folder starts from the first row).")
    return OutputWriteError(message, hint=hint)


@contextlib.contextmanager
def failed_writes_explained(location: str, kept: Callable[[], str | None]) -> Iterator[None]:
    """Turn a failed write to the run folder ``location``, raised inside the block, into
    :class:`OutputWriteError`; anything else (the toolkit's own errors included) goes
    through as it is, and with ``TOOLKIT_DEBUG=1`` everything does.

    Args:
        kept: Says what the folder holds now, called only after a failed write (an
            error reading it leaves that part of the message out).
    """
    try:
        yield
    except Exception as exc:
        if debug_enabled() or isinstance(exc, ToolkitError) or toolkit_cause(exc) is not None:
            raise
        if failed_write_errno(exc, location) is None:
            raise
        try:
            now = kept()
        except Exception:  # noqa: BLE001 - the message goes without the count
            now = None
        failed = output_write_error(exc, location, now)
        assert failed is not None
        raise failed from None


def free_space(location: str) -> str | None:
    """``1.3 MiB free of 64.0 MiB`` for a local folder (or the nearest folder above it
    that exists); None for object storage, or where it can't be told."""
    path = _local_root(location)
    if path is None:
        return None
    while not os.path.exists(path) and os.path.dirname(path) != path:
        path = os.path.dirname(path)
    try:
        usage = shutil.disk_usage(path)
    except OSError:
        return None
    return f"{_size(usage.free)} free of {_size(usage.total)}"


def _size(size: int) -> str:
    if size < 2**20:
        return f"{size / 2**10:,.0f} KiB"
    if size < 10 * 2**30:
        return f"{size / 2**20:,.1f} MiB"
    return f"{size / 2**30:,.1f} GiB"


def _local_root(location: str | None) -> str | None:
    if not location or "://" in location:
        return None
    return os.path.abspath(os.path.expanduser(location))
