"""What a run's input was, and what changed in it since: so a rerun never mixes inputs.

A run records its input's identity in its manifest (``input``) when it starts writing:
for an input of files (a file, a folder or prefix of files, locally or on ``s3://``),
each file's path, size, modification time and a fingerprint of its bytes. The
fingerprint is cheap at any size: a SHA-256 of the file's size, its first 64 KiB and
its last 64 KiB (:data:`EDGE_BYTES`), so a file edited in the middle without changing
its size is told by its modification time. A folder of more than
:data:`MAX_FINGERPRINTED_FILES` files is recorded by size and modification time only.
Generated (``sample:``), streamed (``hf://``) and ``http(s)`` inputs are recorded by
their kind alone and never compared.

A rerun that would resume (or a ``toolkit retry``, or a rerun of a finished run) over
an input whose identity differs is refused before any row runs
(:func:`toolkit.run.retry.settle_input`), naming what changed, unless told what to do
(:class:`InputChanged`):

- ``keep``: every row already written stays as it is (those of ids no longer in the
  input too); ids not written yet (new ones included) are run;
- ``redo``: the rows whose columns the job reads differ between the input and what
  was written are redone, rows of ids no longer in the input are taken out, and ids
  not written yet are run: the output is what a fresh run of the input now gives.

Which rows changed is found without the old input: every output row keeps the input
columns the job reads, so :func:`row_changes` joins the current input's read columns
with the written rows' on the id column (Arrow, no Python loop over rows).
"""

from __future__ import annotations

import datetime
import enum
import hashlib
import posixpath
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from toolkit.errors import InputChangedError
from toolkit.redaction import redact
from toolkit.run.input.checks import TABLE_FORMATS
from toolkit.run.input.csv_files import csv_dataset_format
from toolkit.run.input.file_access import HF_PREFIX, input_format
from toolkit.run.input.formats import run_format
from toolkit.spec.job_definition import JobDefinition
from toolkit.spec.models import SAMPLE_PREFIX, DataConfig, JobSpec

if TYPE_CHECKING:
    import pyarrow as pa
    import pyarrow.fs

#: Bytes of each end of a file the fingerprint covers.
EDGE_BYTES = 64 << 10
#: A folder of more files than this is recorded by size and modification time only.
MAX_FINGERPRINTED_FILES = 1000
#: Files a changed folder's message names, of each kind of change.
_SHOWN = 5


class InputChanged(str, enum.Enum):
    """What a run does when its input changed since its rows were written."""

    KEEP = "keep"
    REDO = "redo"


def input_identity(data: DataConfig) -> dict[str, Any]:
    """The identity of ``data.input`` as the manifest records it.

    Returns:
        ``{"kind": "files", "files": [{"path", "size", "modified", "fingerprint"}]}``
        for files (``path`` relative to a folder; the input itself, redacted, for a
        file); ``{"kind": KIND}`` for inputs that can't be fingerprinted.
    """
    source = data.input
    if source.startswith(SAMPLE_PREFIX):
        return {"kind": "sample"}
    if source.startswith(HF_PREFIX):
        return {"kind": "huggingface"}
    if source.startswith(("http://", "https://")):
        return {"kind": "url"}
    try:
        fs, root = _filesystem(source)
        files = _listed(fs, root)
    except (OSError, ValueError):  # unreachable now: the run's own reading says why
        return {"kind": "unreadable"}
    if files is None:
        return {"kind": "unreadable"}
    fingerprinted = len(files) <= MAX_FINGERPRINTED_FILES
    recorded = []
    for info in files:
        name = redact(source) if info.path == root else posixpath.relpath(info.path, root)
        entry: dict[str, Any] = {"path": name, "size": info.size,
                                 "modified": _when(info.mtime)}
        if fingerprinted:
            entry["fingerprint"] = fingerprint(fs, info.path, info.size)
        recorded.append(entry)
    return {"kind": "files", "files": recorded}


def fingerprint(fs: "pyarrow.fs.FileSystem", path: str, size: int) -> str:
    """SHA-256 (16 hex digits) of the file's size, first and last :data:`EDGE_BYTES`."""
    digest = hashlib.sha256(str(size).encode())
    with fs.open_input_file(path) as stream:
        digest.update(stream.read_at(min(size, EDGE_BYTES), 0))
        if size > EDGE_BYTES:
            tail = min(EDGE_BYTES, size - EDGE_BYTES)
            digest.update(stream.read_at(tail, size - tail))
    return digest.hexdigest()[:16]


def _filesystem(source: str) -> tuple["pyarrow.fs.FileSystem", str]:
    import pyarrow.fs

    if "://" in source:
        return pyarrow.fs.FileSystem.from_uri(source)
    return pyarrow.fs.LocalFileSystem(), str(Path(source).expanduser().resolve())


def _listed(fs: "pyarrow.fs.FileSystem", root: str) -> "list[pyarrow.fs.FileInfo] | None":
    """The file, or the files of the folder (sorted, recursively, hidden ones left out
    as Ray's readers leave them); None where there is nothing."""
    import pyarrow.fs

    info = fs.get_file_info(root)
    if info.type == pyarrow.fs.FileType.File:
        return [info]
    if info.type != pyarrow.fs.FileType.Directory:
        return None
    found = fs.get_file_info(pyarrow.fs.FileSelector(root, recursive=True))
    return sorted((item for item in found if item.type == pyarrow.fs.FileType.File
                   and not any(part.startswith((".", "_")) for part in
                               posixpath.relpath(item.path, root).split("/"))),
                  key=lambda item: item.path)


def _when(mtime: datetime.datetime | None) -> str | None:
    if mtime is None:
        return None
    if mtime.tzinfo is None:
        mtime = mtime.replace(tzinfo=datetime.timezone.utc)
    return mtime.astimezone(datetime.timezone.utc).isoformat(timespec="microseconds")


# -- what changed ---------------------------------------------------------------------


def file_changes(before: dict[str, Any] | None, now: dict[str, Any]) -> list[str]:
    """What differs between two identities, one phrase per change; empty when the
    same, or where either can't be compared (an older run's manifest, ``sample:``)."""
    if not before or before.get("kind") != "files" or now.get("kind") != "files":
        return []
    old = {entry["path"]: entry for entry in before.get("files", [])}
    new = {entry["path"]: entry for entry in now.get("files", [])}
    changes = []
    for path in sorted(old.keys() & new.keys()):
        was, is_ = old[path], new[path]
        said = []
        if was.get("size") != is_.get("size"):
            said.append(f"{_bytes(was.get('size'))} -> {_bytes(is_.get('size'))} bytes")
        if was.get("modified") != is_.get("modified"):
            said.append(f"modified {_shown(was.get('modified'))} -> {_shown(is_.get('modified'))}")
        if not said and was.get("fingerprint") != is_.get("fingerprint"):
            said.append("its first or last 64 KiB differ")
        if said:
            changes.append(f"{path}: {', '.join(said)}")
    for verb, names in (("added", sorted(new.keys() - old.keys())),
                        ("removed", sorted(old.keys() - new.keys()))):
        if names:
            shown = ", ".join(names[:_SHOWN]) + (
                f" and {len(names) - _SHOWN} more" if len(names) > _SHOWN else "")
            changes.append(f"{'a file' if len(names) == 1 else f'{len(names)} files'} "
                           f"{verb}: {shown}")
    return changes


def _bytes(size: Any) -> str:
    return f"{size:,}" if isinstance(size, int) else "?"


def _shown(when: Any) -> str:
    """A recorded time as a person reads it (local time, to the second)."""
    if not isinstance(when, str):
        return "?"
    try:
        moment = datetime.datetime.fromisoformat(when).astimezone()
    except ValueError:
        return when
    return moment.strftime("%Y-%m-%d %H:%M:%S")


@dataclass(frozen=True)
class RowChanges:
    """The written rows against the input now, by id.

    Attributes:
        changed: Ids written whose read columns differ in the input now.
        removed: Ids written that the input no longer has.
        added: How many ids of the input were never written (new ones, and any a
            stopped run had not reached yet).
    """

    changed: "pa.Array"
    removed: "pa.Array"
    added: int

    @property
    def none(self) -> bool:
        return len(self.changed) == 0 and len(self.removed) == 0 and self.added == 0


def row_changes(data: DataConfig, columns: Sequence[str], result_files: Sequence[str],
                results_fs: "pyarrow.fs.FileSystem") -> RowChanges | None:
    """Compare the input's ``columns`` (the ones the job reads) with the written rows'.

    Reads the id column and ``columns`` of the input (the first ``data.rows`` with
    ``--rows``) and of the Parquet result files, and joins them on the id column.

    Returns:
        None where it can't be told: an input Arrow can't read alone (http(s), a
        format that stages its own rows), output that isn't Parquet, or a read column
        the output doesn't keep (a job drops it, e.g. image bytes).
    """
    import pyarrow as pa
    import pyarrow.compute as pc

    read = [c for c in dict.fromkeys(columns) if c != data.id_column]
    if (data.output_format != "parquet" or run_format(data).stages_rows
            or data.input.startswith((SAMPLE_PREFIX, HF_PREFIX, "http://", "https://"))):
        return None
    try:
        fmt = input_format(data)
    except Exception:  # noqa: BLE001 - an unknown format is refused by the run itself
        return None
    if fmt not in TABLE_FORMATS:
        return None
    written = _read_results(result_files, results_fs, [data.id_column, *read])
    if written is None:
        return None
    now = _read_input(data, fmt, [data.id_column, *read], written.schema)
    if now is None:
        return None
    now_ids = now.column(data.id_column)
    written_ids = written.column(data.id_column)
    added = int(pc.sum(pc.invert(pc.is_in(now_ids, value_set=written_ids))).as_py() or 0)
    present = "__toolkit_present__"
    renamed = now.rename_columns([data.id_column, *(f"{c}__now__" for c in read)])
    renamed = renamed.append_column(present, pa.repeat(True, now.num_rows))
    joined = written.join(renamed, keys=data.id_column, join_type="left outer")
    here = pc.is_valid(joined.column(present))
    differs = pa.repeat(False, joined.num_rows)
    for column in read:
        old, new = joined.column(column), joined.column(f"{column}__now__")
        same = pc.if_else(pc.and_(pc.is_null(old), pc.is_null(new)), True,
                          pc.fill_null(pc.equal(old, new), False))
        differs = pc.or_(differs, pc.invert(same))
    ids = joined.column(data.id_column)
    return RowChanges(changed=pc.unique(ids.filter(pc.and_(here, differs))),
                      removed=pc.unique(ids.filter(pc.invert(here))), added=added)


def _read_results(files: Sequence[str], fs: "pyarrow.fs.FileSystem",
                  columns: list[str]) -> "pa.Table | None":
    import pyarrow.dataset as pads

    try:
        dataset = pads.dataset(list(files), filesystem=fs, format="parquet")
    except Exception:  # noqa: BLE001 - a file cut short: the run cleans it up
        return None
    if any(c not in dataset.schema.names for c in columns):
        return None  # the job drops a column it reads
    return dataset.to_table(columns=columns)


def _read_input(data: DataConfig, fmt: str, columns: list[str],
                written: "pa.Schema") -> "pa.Table | None":
    """The input's ``columns`` as the run reads them (CSV as text), in the written
    rows' types where they differ; None where Arrow can't read them here."""
    import pyarrow as pa
    import pyarrow.dataset as pads

    file_format: Any = fmt
    if fmt == "csv":  # as Ray reads it: text in the file's dialect, so "007" stays "007"
        file_format = csv_dataset_format(data.csv, columns)
    try:
        fs, root = _filesystem(data.input)
        dataset = pads.dataset(root, format=file_format, filesystem=fs)
        table = (dataset.head(data.rows, columns=columns) if data.rows
                 else dataset.to_table(columns=columns))
        return table.cast(pa.schema([written.field(c) for c in columns]))
    except Exception:  # noqa: BLE001 - unreadable here, or types that don't cast
        return None


def describe_rows(changes: RowChanges | None, columns: Sequence[str]) -> str:
    """``3 rows changed in the columns the job reads (Company), 20 added, 1 removed``."""
    if changes is None:
        return ""
    read = ", ".join(columns)
    return (f"{len(changes.changed):,} written row(s) changed in the columns the job reads "
            f"({read}), {changes.added:,} not written yet (new or not reached), "
            f"{len(changes.removed):,} no longer in the input")


def changed_input_error(data: DataConfig, changes: Sequence[str], rows: str, *,
                        finished: bool, retry: bool = False) -> InputChangedError:
    """The refusal of a rerun over a changed input: what changed and the choices."""
    run = "finished run" if finished else "unfinished run"
    what = "; ".join(changes)
    counted = f" Of the rows it wrote: {rows}." if rows else ""
    flag = "--input-changed"
    return InputChangedError(
        f"data.input: {redact(data.input)} changed since the {run} in "
        f"{redact(data.output)} wrote its rows ({what}).{counted} Its rows would answer "
        "two versions of the input, so nothing was run.",
        hint=f"Rerun with {flag} keep (rows written keep their answers, ids not written "
        f"yet are run, rows of ids no longer in the input stay), {flag} redo (also redo "
        "the rows whose columns the job reads changed, and take out those no longer in "
        "the input)" + ("." if retry else ", or --overwrite (start over)."),
    )


def can_compare_rows(data: DataConfig) -> bool:
    """Whether telling the changed rows apart is cheap enough to do for a message
    (a local input: just the columns the job reads)."""
    return "://" not in data.input


def read_columns(job: JobDefinition[Any], spec: JobSpec) -> list[str]:
    """The input columns the job's stages read (as the input checks name them)."""
    options = job.options_of(spec)
    return list(dict.fromkeys(c for stage in job.stages for c in stage.required_columns(options)))
