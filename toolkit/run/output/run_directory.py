"""One owner for an output directory: what the toolkit wrote there, and the rules for it.

A run directory (``data.output``: a local path or a URI such as ``s3://``) holds
result files plus the toolkit's bookkeeping, under names starting with ``_`` so
Parquet/Arrow readers skip them:

- ``_manifest.json``: the spec (credentials in its URLs redacted, see
  :mod:`toolkit.redaction`) and its fingerprint, and the write ids of every
  write that went there; result files are named ``part-<write id>_...``, so the
  toolkit knows exactly which files are its own, even after a crash mid-write;
- ``_checkpoint/``: Ray Data's checkpoint of written row ids while a run is
  unfinished (what a rerun resumes from);
- ``_input/``: the exact input rows of a ``--rows``-limited run, staged once so a
  resumed run reads the same rows;
- ``_summary.json``: written when a run completes;
- ``_logs/run.log``: Ray's and the engine's own output during ``toolkit run``
  (the terminal shows only the toolkit's progress), appended to by each run;
- ``_batch_output.jsonl``: the Batch API output file of an OpenAI batch run
  (:mod:`toolkit.run.input.openai_batch`), written once the run is complete;
- ``_engine_records/``: what an engine keeps while a run is unfinished, so a rerun
  finds it (the batch-api engine's provider file and batch ids, one JSON file per
  provider batch; :mod:`toolkit.run.output.engine_records`).

Ownership goes by the manifest, not by names: the manifest lists the write ids and,
in ``made``, each bookkeeping path the toolkit makes here (``_checkpoint``, ``_input``,
``_logs/run.log``, ``_summary.json``, the batch output), each recorded before it is
written. Everything else in the directory is someone else's, ``_input/precious.csv``
and ``_logs/notes.txt`` included. The toolkit never deletes it: a directory holding
such files is refused, with or without ``--overwrite``, and ``--overwrite``, resume and
cleanup delete only what the manifest says the toolkit wrote.

A run folder may come from someone else (copied, unpacked, handed over), so what it
holds is data, never instructions:

- a manifest claims only names the toolkit itself makes (:data:`BOOKKEEPING`, result
  files ``part-<write id>_...``); any other claim (``../victim``, ``_logs/x.py``)
  refuses the folder, naming the entry;
- a local folder is listed without following links, and a symbolic link (or a FIFO,
  a device) anywhere in it refuses the folder, naming it: the toolkit never reads,
  writes or deletes through a link out of the folder;
- a folder of someone else's files is recognised from its first few, so
  ``--output /tmp`` is refused at once rather than after walking all of it.

One process at a time writes a run folder: see :mod:`toolkit.run.output.writer_lock`
(``_lock.json``, owned by whichever run holds it). While this process holds it, each
write here first checks that the lock is still its own (:mod:`toolkit.run.output.fence`).
"""

from __future__ import annotations

import contextlib
import enum
import json
import os
import posixpath
import re
import stat
import uuid
from collections import deque
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from toolkit.errors import SpecError
from toolkit.redaction import redact
from toolkit.run.output.fence import Fence, FencedFilenames, fence_of, folder_key
from toolkit.run.output.fingerprint import changed_fields, results_fingerprint
from toolkit.run.output.write_failure import output_write_error
from toolkit.spec.models import JobSpec

if TYPE_CHECKING:
    import pyarrow.fs

MANIFEST_FILE = "_manifest.json"
#: A file the toolkit is writing, renamed over its name when whole.
PARTIAL_SUFFIX = ".partial-"
SUMMARY_FILE = "_summary.json"
CHECKPOINT_DIR = "_checkpoint"
STAGED_INPUT_DIR = "_input"
LOGS_DIR = "_logs"
RUN_LOG_FILE = f"{LOGS_DIR}/run.log"
REPORT_FILE = "_report.html"
#: The Batch API output file of a ``data.format: openai-batch`` run.
BATCH_OUTPUT_FILE = "_batch_output.jsonl"
#: Engines' own records while a run is unfinished (``<stage field>/<name>.json``).
ENGINE_RECORDS_DIR = "_engine_records"
#: Held by the one run writing here (see :mod:`toolkit.run.output.writer_lock`).
LOCK_FILE = "_lock.json"
RESULT_FILE_PREFIX = "part-"
#: Ray Data's checkpoint of a piece not yet whole, ``_checkpoint/<piece>.pending.parquet``
#: (``ray.data.checkpoint.checkpoint_writer.PENDING_CHECKPOINT_SUFFIX`` + ``.parquet``).
PENDING_CHECKPOINT_SUFFIX = ".pending.parquet"
_STAGED_MARKER = "_complete"
#: A write id: ``uuid4().hex[:12]``.
_WRITE_ID = re.compile(r"^[0-9a-f]{12}$")
#: How many of someone else's files are enough to refuse a folder (and to name).
_FOREIGN_SHOWN = 5
#: What a manifest written before ``made`` existed is taken to have made.
_MADE_BEFORE_MADE_WAS_RECORDED = [CHECKPOINT_DIR, STAGED_INPUT_DIR, RUN_LOG_FILE, SUMMARY_FILE]


def bookkeeping() -> tuple[str, ...]:
    """Every name the toolkit may make in a run directory besides its result files;
    the only names a manifest's ``made`` may claim."""
    return (CHECKPOINT_DIR, STAGED_INPUT_DIR, RUN_LOG_FILE, SUMMARY_FILE, REPORT_FILE,
            BATCH_OUTPUT_FILE, ENGINE_RECORDS_DIR)


class RunState(enum.Enum):
    EMPTY = "empty"  # nothing from an earlier run: start
    PARTIAL = "partial"  # an unfinished run of the same spec: resume it
    COMPLETE = "complete"  # the same spec finished here: nothing to do


@dataclass
class Manifest:
    """What the toolkit wrote into a run directory."""

    fingerprint: str
    spec: dict[str, Any]
    write_ids: list[str] = field(default_factory=list)
    files: list[str] = field(default_factory=list)
    #: Bookkeeping paths the toolkit made here (a folder covers what is in it),
    #: recorded before each is written.
    made: list[str] = field(default_factory=list)
    #: The first run and each ``toolkit retry`` (see :mod:`toolkit.run.retry`);
    #: empty until the first retry.
    attempts: list[dict[str, Any]] = field(default_factory=list)
    #: What the run's input was when it started writing (see
    #: :mod:`toolkit.run.input.identity`); None for runs from before it was recorded.
    input: dict[str, Any] | None = None

    def owns(self, name: str) -> bool:
        """Whether ``name`` (relative to the directory) was written by the toolkit."""
        # A bookkeeping file's half-written sibling, left by a run killed mid-write.
        name = name.split(PARTIAL_SUFFIX, 1)[0]
        if name in (MANIFEST_FILE, LOCK_FILE) or any(
                name == m or name.startswith(f"{m}/") for m in self.made):
            return True
        top = name.split("/", 1)[0]
        return any(top.startswith(f"{RESULT_FILE_PREFIX}{write_id}_") for write_id in self.write_ids)

    @classmethod
    def from_content(cls, content: dict[str, Any], where: str) -> "Manifest | None":
        """The manifest ``content`` describes; None when it is not one of ours at all.

        Raises:
            SpecError: it claims something the toolkit never makes (a path out of the
                folder, a code file, a result file of no write), naming the entry.
        """
        content.setdefault("made", [*_MADE_BEFORE_MADE_WAS_RECORDED, BATCH_OUTPUT_FILE])
        try:
            manifest = cls(**content)
        except TypeError:
            return None
        if not (isinstance(manifest.spec, dict) and all(
                isinstance(value, list) for value in (
                    manifest.write_ids, manifest.files, manifest.made, manifest.attempts))
                and all(isinstance(attempt, dict) for attempt in manifest.attempts)
                and isinstance(manifest.input, (dict, type(None)))):
            return None
        write_ids = [*manifest.write_ids, *(attempt["write_id"] for attempt in manifest.attempts
                                            if attempt.get("write_id") is not None)]
        for write_id in write_ids:
            if not isinstance(write_id, str) or not _WRITE_ID.match(write_id):
                raise _claim_error(where, f"the write id {write_id!r}",
                                   "write ids are 12 hex digits")
        for name in manifest.files:
            if not isinstance(name, str) or "/" in name or "\\" in name \
                    or not manifest.owns(name) or not name.startswith(RESULT_FILE_PREFIX):
                raise _claim_error(where, f"the result file {name!r}",
                                   "result files are part-<write id>_... at the top of the folder")
        known = bookkeeping()
        for name in manifest.made:
            if name not in known:
                raise _claim_error(where, repr(name), "it makes only "
                                   + ", ".join(known))
        return manifest


def _claim_error(where: str, entry: str, rule: str) -> SpecError:
    return SpecError(
        f"data.output: {where}/{MANIFEST_FILE} claims {entry} as the toolkit's, but it is "
        f"not something the toolkit makes in a run folder ({rule}). The folder was edited "
        "or made elsewhere, so the toolkit won't read, resume, retry, overwrite or delete "
        "anything in it. Nothing was changed.",
        hint="Choose another --output, or copy just the result files (part-*) somewhere "
        "else to read them.",
    )


class RunDirectory:
    """An output directory and everything the toolkit keeps in it.

    Example:
        >>> run_dir = RunDirectory("out/industry")  # doctest: +SKIP
        >>> state = run_dir.prepare(spec, overwrite=False, resumable=True)
        >>> write_id = run_dir.begin_write()
        >>> ds.write_parquet(run_dir.location, filename_provider=run_dir.filenames(write_id))
        >>> run_dir.end_write(write_id)
    """

    def __init__(self, location: str, filesystem: "pyarrow.fs.FileSystem | None" = None):
        """
        Args:
            location: ``data.output``: a local path or a URI (``s3://bucket/dir``).
            filesystem: Use this filesystem with ``location`` as its path instead
                of resolving the URI (tests use an in-memory one).
        """
        self.location = location
        if filesystem is not None:
            self.fs, self.root = filesystem, location.rstrip("/")
        else:
            self.fs, self.root = _resolve(location)

    # -- paths -------------------------------------------------------------------------

    def path(self, name: str) -> str:
        """``name`` inside the directory, as a path or URI Ray and Arrow accept."""
        if "://" in self.location:
            return self.location.rstrip("/") + "/" + name
        return f"{self.root}/{name}"

    @property
    def ray_location(self) -> str:
        """The directory as Ray's writers and readers take it."""
        return self.location if "://" in self.location else self.root

    @property
    def checkpoint_path(self) -> str:
        return self.path(CHECKPOINT_DIR)

    @property
    def staged_input_path(self) -> str:
        return self.path(STAGED_INPUT_DIR)

    @property
    def log_file(self) -> str | None:
        """``_logs/run.log`` as a local path (as ``location`` spells it), for a local
        directory; None for a URI (``s3://``), where a log can't be appended to."""
        if "://" in self.location:
            return None
        return f"{self.location.rstrip('/')}/{RUN_LOG_FILE}"

    def _fs_path(self, name: str) -> str:
        return f"{self.root}/{name}"

    # -- the staged input of a --rows-limited run ---------------------------------------

    def staged_input_complete(self) -> bool:
        return self.exists(f"{STAGED_INPUT_DIR}/{_STAGED_MARKER}")

    def mark_staged_input_complete(self) -> None:
        self.check_still_ours()
        with self.fs.open_output_stream(self._fs_path(f"{STAGED_INPUT_DIR}/{_STAGED_MARKER}")):
            pass

    def begin_staged_input(self) -> str:
        """Record ``_input`` as the toolkit's before staging into it, after clearing a
        copy cut short by a crash; return its path."""
        self.clear_staged_input()
        self.claim(STAGED_INPUT_DIR)
        return self.staged_input_path

    def open_staged_file(self, name: str) -> Any:
        """A new file ``_input/NAME`` to write (an Arrow output stream)."""
        self.check_still_ours()
        self.fs.create_dir(self._fs_path(STAGED_INPUT_DIR), recursive=True)
        return self.fs.open_output_stream(self._fs_path(f"{STAGED_INPUT_DIR}/{name}"))

    def clear_staged_input(self) -> None:
        """Delete the staged input, if the manifest says the toolkit made it."""
        manifest = self.read_manifest()
        if manifest is not None and STAGED_INPUT_DIR in manifest.made and self.exists(
                STAGED_INPUT_DIR):
            self.check_no_link(STAGED_INPUT_DIR)
            self.check_still_ours()
            self.fs.delete_dir(self._fs_path(STAGED_INPUT_DIR))

    # -- what is there -----------------------------------------------------------------

    def exists(self, name: str) -> bool:
        import pyarrow.fs

        return self.fs.get_file_info(self._fs_path(name)).type != pyarrow.fs.FileType.NotFound

    def entries(self) -> list[str]:
        """Names of the files in the directory and its subdirectories (relative).

        Raises:
            SpecError: a symbolic link (or a FIFO, a device) is in the directory,
                named: nothing is ever read, written or deleted through one.
        """
        names = []
        for name, kind in self._walk():
            if kind != "file":
                raise self._not_a_file_error(name, kind)
            names.append(name)
        return sorted(names)

    def _walk(self) -> Iterator[tuple[str, str]]:
        """``(name, kind)`` of everything in the directory, nearest first; ``kind`` is
        ``file``, ``link`` or ``other`` (a FIFO, socket or device). A local directory is
        listed without following links: a linked folder is one ``link``, never entered."""
        import pyarrow.fs

        info = self.fs.get_file_info(self.root)
        if info.type == pyarrow.fs.FileType.NotFound:
            return
        if info.type != pyarrow.fs.FileType.Directory:
            raise SpecError(
                f"data.output: {self.location} exists and is a file, not a directory.",
                hint="Choose a directory with --output.",
            )
        if not self.is_local:  # object stores have neither links nor special files
            selector = pyarrow.fs.FileSelector(self.root, recursive=True)
            for item in self.fs.get_file_info(selector):
                if item.type == pyarrow.fs.FileType.File:
                    yield posixpath.relpath(item.path, self.root), "file"
            return
        pending = deque([""])
        while pending:
            folder = pending.popleft()
            try:
                with os.scandir(os.path.join(self.root, folder)) as listing:
                    items = sorted(listing, key=lambda item: item.name)
            except FileNotFoundError:
                continue  # removed while listed
            except OSError as exc:
                raise SpecError(
                    f"data.output: can't list {os.path.join(self.location, folder)}: "
                    f"{exc.strerror or exc}.",
                    hint="Choose a directory of your own (new or empty) with --output.",
                ) from None
            for item in items:
                name = f"{folder}/{item.name}" if folder else item.name
                if item.is_symlink():
                    yield name, "link"
                elif item.is_dir(follow_symlinks=False):
                    pending.append(name)
                elif item.is_file(follow_symlinks=False):
                    yield name, "file"
                else:
                    yield name, "other"

    @property
    def is_local(self) -> bool:
        import pyarrow.fs

        return isinstance(self.fs, pyarrow.fs.LocalFileSystem)

    def _not_a_file_error(self, name: str, kind: str) -> SpecError:
        path = os.path.join(self.location, name)
        if kind == "link":
            try:
                what = f"a symbolic link (to {os.readlink(self._fs_path(name))})"
            except OSError:
                what = "a symbolic link"
        else:
            what = "not a regular file (a FIFO, socket or device)"
        return SpecError(
            f"data.output: {path} is {what}. A run folder is data: the toolkit never "
            "reads, writes or deletes through a link or a special file in it, so it won't "
            "use this folder. Nothing was changed.",
            hint=f"Remove {path} (or put the real files in its place), or choose another "
            "--output.",
        )

    def check_still_ours(self) -> None:
        """Return while this process may write here: it holds no lock on the folder (a
        reader, a test), or the lock still names it (:mod:`toolkit.run.output.fence`).

        Raises:
            WriterFencedError: another run took the folder over meanwhile (this one was
                paused past the lock's takeover); nothing more may be written.
        """
        fence = self.fence()
        if fence is not None:
            fence.check()

    def fence(self) -> Fence | None:
        """The check of the lock this process holds on the folder (None: it holds none),
        for what its Ray workers write there."""
        return fence_of(folder_key(self.root, self.location, self.is_local))

    def check_no_link(self, name: str) -> None:
        """Refuse ``name`` in a local directory when it is a link or special file.

        Raises:
            SpecError: naming it.
        """
        if not self.is_local:
            return
        try:
            mode = os.lstat(self._fs_path(name)).st_mode
        except OSError:
            return  # not there (yet): made as a plain file or folder
        if stat.S_ISLNK(mode):
            raise self._not_a_file_error(name, "link")
        if not (stat.S_ISREG(mode) or stat.S_ISDIR(mode)):
            raise self._not_a_file_error(name, "other")

    def read_manifest(self) -> Manifest | None:
        """The directory's manifest; None when it has none (or not one of ours).

        Raises:
            SpecError: it claims what the toolkit never makes, or it is a link.
        """
        content = self._read_json(MANIFEST_FILE)
        if content is None:
            return None
        return Manifest.from_content(content, self.location)

    def foreign_files(self, manifest: Manifest | None) -> list[str]:
        """Files the toolkit did not write (by the manifest), relative to the directory;
        links and special files are named with what they are.

        Without a manifest the toolkit wrote nothing here, whatever the names, so the
        listing stops at the first few: that is enough to refuse the folder, and
        ``--output /tmp`` is not walked to its last file.
        """
        foreign = []
        for name, kind in self._walk():
            if manifest is not None and kind == "file" and manifest.owns(name):
                continue
            if name == LOCK_FILE and manifest is None:
                continue  # this run's own lock, taken before the manifest is written
            what = {"file": "", "link": " (a link)"}.get(kind, " (a special file)")
            foreign.append(f"{name}{what}")
            if manifest is None and len(foreign) > _FOREIGN_SHOWN:
                break
        return sorted(foreign)

    def check_owned(self, manifest: Manifest | None) -> None:
        """Refuse a directory holding anything but what ``manifest`` says the toolkit
        wrote: someone else's files, or a link or special file anywhere.

        Raises:
            SpecError: naming the first few such entries.
        """
        if manifest is not None:
            self.entries()  # a link, even under one of the toolkit's own names: named
        foreign = self.foreign_files(manifest)
        if foreign:
            if manifest is None and len(foreign) > _FOREIGN_SHOWN:  # the listing stopped
                count = f"{_FOREIGN_SHOWN}+"
                shown = ", ".join(foreign[:_FOREIGN_SHOWN]) + " and more"
            else:
                count = str(len(foreign))
                shown = ", ".join(foreign[:_FOREIGN_SHOWN]) + (
                    f" and {len(foreign) - _FOREIGN_SHOWN} more"
                    if len(foreign) > _FOREIGN_SHOWN else "")
            raise SpecError(
                f"data.output: {self.location} holds {count} file(s) this toolkit did "
                f"not write ({shown}); it never deletes or mixes results with files it "
                "doesn't own, even with --overwrite.",
                hint="Choose an empty or new directory with --output.",
            )

    def claim(self, name: str) -> None:
        """Record in the manifest that the toolkit makes ``name`` here, before it does."""
        manifest = self._require_manifest()
        if name not in manifest.made:
            manifest.made.append(name)
            self._write_manifest(manifest)

    def result_files(self, manifest: Manifest | None = None) -> list[str]:
        """Full paths of the toolkit's result files, as listed now."""
        manifest = manifest or self.read_manifest()
        if manifest is None:
            return []
        return [
            self._fs_path(name) for name in self.entries()
            if manifest.owns(name) and "/" not in name and name.startswith(RESULT_FILE_PREFIX)
        ]

    # -- the rules ---------------------------------------------------------------------

    def prepare(self, spec: JobSpec, *, overwrite: bool, resumable: bool) -> RunState:
        """Check the directory before any model loads and say what this run must do.

        Returns:
            EMPTY for a fresh run (the manifest is written), PARTIAL to resume an
            unfinished run of the same spec, COMPLETE when it already finished here.

        Raises:
            SpecError: the directory holds files the toolkit didn't write, or
                results of a different spec, or an unfinished run that can't be
                resumed, or it isn't writable.
        """
        fingerprint = results_fingerprint(spec)
        manifest = self.read_manifest()
        self.check_owned(manifest)
        state = RunState.EMPTY
        if (manifest is not None and not overwrite and manifest.fingerprint != fingerprint
                and not self._holds_rows(manifest)):
            # Refused before its first row (a missing column, duplicate ids): a fixed
            # spec starts afresh. Its staged input was for the old spec; its log stays.
            self.clear_staged_input()
            manifest = Manifest(fingerprint=fingerprint, spec=spec.model_dump(mode="json"),
                                made=[n for n in manifest.made if n != STAGED_INPUT_DIR])
        if manifest is not None and not overwrite:
            if manifest.fingerprint != fingerprint:
                changed = changed_fields(manifest.spec, redact(spec.model_dump(mode="json")))
                raise SpecError(
                    f"data.output: {self.location} holds results of a run with a different "
                    f"spec (changed: {', '.join(changed[:6]) or 'the job'}).",
                    hint="Pass --overwrite to replace those results (only files this toolkit "
                    "wrote are deleted), or choose another --output.",
                )
            if self.exists(SUMMARY_FILE):
                return RunState.COMPLETE
            has_results = bool(self.result_files(manifest))
            if has_results and (not resumable or not self.exists(CHECKPOINT_DIR)):
                raise SpecError(
                    f"data.output: {self.location} holds results of an unfinished run that "
                    "can't be resumed (no checkpoint of written rows).",
                    hint="Pass --overwrite to start again, or choose another --output.",
                )
            state = RunState.PARTIAL if has_results or self.exists(CHECKPOINT_DIR) else state
        try:
            if overwrite and manifest is not None:
                self.delete_own(manifest)
                manifest = None
            self.fs.create_dir(self.root, recursive=True)
            self._check_writable()
            if manifest is None or state is RunState.EMPTY:
                manifest = Manifest(fingerprint=fingerprint, spec=spec.model_dump(mode="json"),
                                    write_ids=manifest.write_ids if manifest else [],
                                    files=manifest.files if manifest else [],
                                    made=manifest.made if manifest else [])
            manifest.spec = spec.model_dump(mode="json")
            if resumable and CHECKPOINT_DIR not in manifest.made:
                manifest.made.append(CHECKPOINT_DIR)  # Ray Data writes it during the run
            self._write_manifest(manifest)
        except OSError as exc:
            kept, rows = None, 0
            with contextlib.suppress(Exception):  # what is kept, as far as it can be read
                rows = self.checkpointed_rows()
            if rows:
                kept = f"{rows:,} rows kept in {self.location}"
            raise output_write_error(exc, self.location, kept) or SpecError(
                f"data.output: can't write to {self.location}: {exc}.",
                hint="Choose a directory you can write to with --output.",
            ) from None
        return state

    def _holds_rows(self, manifest: Manifest) -> bool:
        """Whether a run of ``manifest`` wrote any row here (results, a checkpoint, a summary)."""
        return (bool(self.result_files(manifest)) or self.exists(SUMMARY_FILE)
                or (CHECKPOINT_DIR in manifest.made and self.exists(CHECKPOINT_DIR)))

    def delete_own(self, manifest: Manifest) -> list[str]:
        """Delete what the manifest says the toolkit wrote; nothing else. Returns the names."""
        import pyarrow.fs

        self.check_still_ours()
        deleted = []
        for name in self.entries():  # refuses a link anywhere, before deleting anything
            if manifest.owns(name) and name != LOCK_FILE:
                self.fs.delete_file(self._fs_path(name))
                deleted.append(name)
        for directory in (CHECKPOINT_DIR, STAGED_INPUT_DIR, ENGINE_RECORDS_DIR):
            self.check_no_link(directory)
            if directory in manifest.made and self.fs.get_file_info(
                    self._fs_path(directory)).type == pyarrow.fs.FileType.Directory:
                self.fs.delete_dir(self._fs_path(directory))
        return deleted

    # -- writing -----------------------------------------------------------------------

    def begin_write(self) -> str:
        """Record a new write id in the manifest before any file of it exists."""
        manifest = self._require_manifest()
        write_id = uuid.uuid4().hex[:12]
        manifest.write_ids.append(write_id)
        self._write_manifest(manifest)
        return write_id

    def filenames(self, write_id: str, file_format: str) -> Any:
        """Ray's filename provider for a write: ``part-<write id>_<ray's write uuid>_<task>``."""
        from ray.data.datasource import FilenameProvider

        names = FilenameProvider(dataset_uuid=f"{RESULT_FILE_PREFIX}{write_id}",
                                 file_format=file_format)
        fence = self.fence()
        # The workers check the lock before each file (a run may wake to find it taken).
        return names if fence is None else FencedFilenames(names, fence)

    def end_write(self, write_id: str) -> list[str]:
        """List the write's files in the manifest; return their full paths. A piece
        never committed (cut off by a full disk or a stop) is not listed."""
        manifest = self._require_manifest()
        uncommitted = tuple(self.uncommitted_pieces())
        manifest.files = [name for name in (posixpath.relpath(p, self.root)
                                            for p in self.result_files(manifest))
                          if not (uncommitted and name.startswith(uncommitted))]
        self._write_manifest(manifest)
        prefix = f"{RESULT_FILE_PREFIX}{write_id}_"
        return [self._fs_path(name) for name in manifest.files if name.startswith(prefix)]

    def count_rows(self, files: Iterable[str], file_format: str) -> int:
        """Rows in ``files`` (Parquet: from the footers, without reading the data)."""
        files = list(files)
        if not files:
            return 0
        import pyarrow.dataset as pads

        return pads.dataset(files, filesystem=self.fs, format=file_format).count_rows()

    def checkpointed_rows(self) -> int:
        """Rows Ray Data's checkpoint records as written whole (0 without a checkpoint).

        Only committed checkpoint files count: a pending one is for a piece whose file
        may be cut off (a full disk, a kill mid-write), which the next run's Ray Data
        deletes and writes again (:mod:`toolkit.run.output.write_failure`); a pending
        file may be cut off itself.
        """
        import pyarrow.dataset as pads
        import pyarrow.fs

        selector = pyarrow.fs.FileSelector(self._fs_path(CHECKPOINT_DIR), recursive=True,
                                           allow_not_found=True)
        committed = [info.path for info in self.fs.get_file_info(selector)
                     if info.type == pyarrow.fs.FileType.File
                     and not info.base_name.startswith((".", "_"))
                     and not info.base_name.endswith(PENDING_CHECKPOINT_SUFFIX)]
        if not committed:
            return 0
        return pads.dataset(committed, filesystem=self.fs, format="parquet").count_rows()

    def uncommitted_pieces(self) -> list[str]:
        """Result file name prefixes of pieces Ray Data began but never committed (a
        pending checkpoint of theirs is in ``_checkpoint``): their files, if any, may
        be cut off, and the next run deletes them before it reads anything."""
        import pyarrow.fs

        selector = pyarrow.fs.FileSelector(self._fs_path(CHECKPOINT_DIR), allow_not_found=True)
        return [info.base_name.removesuffix(PENDING_CHECKPOINT_SUFFIX)
                for info in self.fs.get_file_info(selector)
                if info.type == pyarrow.fs.FileType.File
                and info.base_name.endswith(PENDING_CHECKPOINT_SUFFIX)]

    def open_results(self, file_format: str) -> Any:
        """The toolkit's result files as one ``pyarrow.dataset.Dataset``."""
        import pyarrow.dataset as pads

        return pads.dataset(self.result_files(), filesystem=self.fs, format=file_format)

    def finish(self) -> None:
        """After the summary is written: the checkpoint, staged input and engines' records
        are no longer needed (a ``toolkit retry`` of the finished run asks afresh).

        They leave the manifest too, so a folder of that name made later is not the toolkit's.
        """
        self.check_still_ours()  # the checkpoint it deletes may be the new owner's by now
        manifest = self._require_manifest()
        for name in (CHECKPOINT_DIR, STAGED_INPUT_DIR, ENGINE_RECORDS_DIR):
            if name in manifest.made:
                if self.exists(name):
                    self.check_no_link(name)
                    self.fs.delete_dir(self._fs_path(name))
                manifest.made.remove(name)
        if manifest.attempts:
            manifest.attempts[-1]["state"] = "done"
        self._write_manifest(manifest)

    def write_manifest(self, manifest: Manifest) -> None:
        """Replace the manifest (a retry records its attempt; see :mod:`toolkit.run.retry`)."""
        self._write_manifest(manifest)

    # -- JSON files --------------------------------------------------------------------

    def write_json(self, name: str, content: dict[str, Any]) -> None:
        """Write one of the toolkit's JSON files (recorded in the manifest first)."""
        if name != MANIFEST_FILE:
            self.claim(name)
        self._replace(name, json.dumps(content, indent=2, default=str).encode())

    def write_file(self, name: str, content: bytes) -> str:
        """Write one of the toolkit's own files (recorded in the manifest first, so a
        rerun or ``--overwrite`` knows it is the toolkit's); return its path as
        ``location`` spells it."""
        self.claim(name)
        self._replace(name, content)
        return self.location.rstrip("/") + "/" + name

    def _replace(self, name: str, content: bytes) -> None:
        """Write ``name`` whole: whoever reads it meanwhile (``toolkit status``, a
        progress poll, the next attempt) sees the old content or the new, never an
        empty file. On local disk that is a sibling renamed over it; an object store
        makes an object visible only once its upload completes."""
        self.check_still_ours()
        self.check_no_link(name)
        if not self.is_local:
            with self.fs.open_output_stream(self._fs_path(name)) as stream:
                stream.write(content)
            return
        partial = f"{name}{PARTIAL_SUFFIX}{uuid.uuid4().hex[:12]}"
        try:
            fd = os.open(self._fs_path(partial),
                         os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644)
            with os.fdopen(fd, "wb") as stream:
                stream.write(content)
            os.replace(self._fs_path(partial), self._fs_path(name))
        finally:
            # A full disk leaves the old file whole and no sibling; a read-only one
            # can't lose the sibling either, and the write's own error is what to tell.
            with contextlib.suppress(OSError):
                os.unlink(self._fs_path(partial))

    def write_claimed(self, name: str, content: dict[str, Any]) -> None:
        """Write a JSON file inside a folder the manifest already claims (an engine's
        record, from a Ray worker: the manifest is the driver's to write)."""
        if self.is_local:
            os.makedirs(os.path.dirname(self._fs_path(name)), exist_ok=True)
        self._replace(name, json.dumps(content, indent=2).encode())

    def read_json(self, name: str) -> dict[str, Any] | None:
        return self._read_json(name)

    def json_files(self, folder: str) -> dict[str, dict[str, Any]]:
        """Every whole JSON file directly in ``folder``, by name without ``.json``."""
        import pyarrow.fs

        self.check_no_link(folder)
        selector = pyarrow.fs.FileSelector(self._fs_path(folder), allow_not_found=True)
        found = {}
        for info in self.fs.get_file_info(selector):
            if info.type == pyarrow.fs.FileType.File and info.base_name.endswith(".json"):
                content = self._read_json(f"{folder}/{info.base_name}")
                if content is not None:
                    found[info.base_name.removesuffix(".json")] = content
        return found

    def _read_json(self, name: str) -> dict[str, Any] | None:
        self.check_no_link(name)
        try:
            with self.fs.open_input_stream(self._fs_path(name)) as stream:
                content = json.loads(stream.read())
        except (FileNotFoundError, OSError, ValueError):
            return None
        return content if isinstance(content, dict) else None

    def _write_manifest(self, manifest: Manifest) -> None:
        self.write_json(MANIFEST_FILE, {
            "fingerprint": manifest.fingerprint, "spec": redact(manifest.spec),
            "write_ids": manifest.write_ids, "files": manifest.files, "made": manifest.made,
            **({"attempts": manifest.attempts} if manifest.attempts else {}),
            **({"input": manifest.input} if manifest.input is not None else {}),
        })

    def _require_manifest(self) -> Manifest:
        manifest = self.read_manifest()
        if manifest is None:
            raise RuntimeError(f"{self.location} has no {MANIFEST_FILE}: call prepare() first")
        return manifest

    def _check_writable(self) -> None:
        import pyarrow.fs

        if isinstance(self.fs, pyarrow.fs.LocalFileSystem):
            probe = self._fs_path(f".toolkit-write-check-{uuid.uuid4().hex}")
            with self.fs.open_output_stream(probe):
                pass
            self.fs.delete_file(probe)


def _resolve(location: str) -> tuple["pyarrow.fs.FileSystem", str]:
    import os

    import pyarrow.fs

    if "://" in location:
        try:
            return pyarrow.fs.FileSystem.from_uri(location)
        except (ValueError, OSError) as exc:  # a malformed URI, an unknown scheme
            raise SpecError(f"data.output: can't use {location}: {exc}",
                            hint="Write it as s3://bucket/dir (credentials come from the "
                            "environment, e.g. AWS_ACCESS_KEY_ID).") from None
    return pyarrow.fs.LocalFileSystem(), os.path.abspath(os.path.expanduser(location))
