"""The cache's entries: one immutable file per batch of answers, written whole.

A file is a header line (the payload's SHA-256 and its entry count) and the payload,
a JSON object of key -> answer; it is named by its payload's hash, so two runs that
store the same answers write the same file. On local disk it is written under a
temporary name and renamed; an object store shows an object only once its upload is
complete. A file whose payload doesn't match its header (cut short, edited) is a
miss for every key in it, named once in the log.

Each worker process keeps one :class:`AnswerEntries` per cache location, with the
entries it has read: a batch's lookup lists the folder and reads only the files new
since its last (entries never change, so one read is enough).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import sys
import threading
import uuid
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import pyarrow.fs

#: What an entry file's name ends with; anything else in the folder is not read.
ENTRY_SUFFIX = ".answers.json"
#: How a file being written starts (renamed to its entry name once whole).
TEMPORARY_PREFIX = ".partial-"
_FORMAT = 1


class AnswerEntries:
    """The entries under one cache location (a folder, or s3://, gs://, ...)."""

    def __init__(self, location: str) -> None:
        self.location = location
        self.fs, self.root = resolve_location(location)
        self.fs.create_dir(self.root, recursive=True)
        self._local = type(self.fs).__name__ == "LocalFileSystem"
        self._answers: dict[str, dict[str, Any]] = {}
        self._read: set[str] = set()
        self._lock = threading.Lock()

    def look_up(self, keys: Iterable[str]) -> dict[str, dict[str, Any]]:
        """The stored answer of each key that has one."""
        with self._lock:
            self._read_new()
            return {key: self._answers[key] for key in keys if key in self._answers}

    def store(self, answers: Mapping[str, dict[str, Any]]) -> None:
        """Write ``answers`` (key -> answer) as one entry file."""
        if not answers:
            return
        payload = json.dumps(dict(answers), sort_keys=True, separators=(",", ":")).encode()
        digest = hashlib.sha256(payload).hexdigest()
        header = json.dumps({"format": _FORMAT, "sha256": digest, "entries": len(answers)})
        content = header.encode() + b"\n" + payload
        name = f"{self.root}/{digest[:32]}{ENTRY_SUFFIX}"
        if not self._local:
            with self.fs.open_output_stream(name) as stream:
                stream.write(content)
            return
        partial = f"{self.root}/{TEMPORARY_PREFIX}{uuid.uuid4().hex}"
        try:
            with open(partial, "wb") as stream:
                stream.write(content)
            os.replace(partial, name)
        finally:
            with contextlib.suppress(OSError):
                os.unlink(partial)
        with self._lock:
            self._answers.update(answers)
            self._read.add(name)

    def _read_new(self) -> None:
        import pyarrow.fs

        listed = self.fs.get_file_info(pyarrow.fs.FileSelector(self.root, allow_not_found=True))
        for info in listed:
            path = info.path
            if path in self._read or not path.endswith(ENTRY_SUFFIX):
                continue
            self._read.add(path)
            problem, answers = self._read_file(path)
            if problem is not None:
                print(f"answer cache: {path} is damaged ({problem}); its rows are answered "
                      "again", file=sys.stderr, flush=True)
                continue
            self._answers.update(answers)

    def _read_file(self, path: str) -> tuple[str | None, dict[str, dict[str, Any]]]:
        return read_entry_file(self.fs, path)


def read_entry_file(fs: "pyarrow.fs.FileSystem", path: str
                    ) -> tuple[str | None, dict[str, dict[str, Any]]]:
    """(why the entry file at ``path`` can't be used, or None; its answers)."""
    try:
        with fs.open_input_stream(path) as stream:
            content = stream.read()
    except OSError as exc:
        return f"unreadable: {exc}", {}
    head, _, payload = content.partition(b"\n")
    try:
        header = json.loads(head)
        if not isinstance(header, dict) or header.get("format") != _FORMAT:
            return "not an entry file of this toolkit", {}
        if hashlib.sha256(payload).hexdigest() != header.get("sha256"):
            return "its content doesn't match its checksum: cut short or edited", {}
        answers = json.loads(payload)
    except ValueError as exc:
        return f"not JSON: {exc}", {}
    if not isinstance(answers, dict) or len(answers) != header.get("entries"):
        return "not the entries its header names", {}
    return None, answers


_OPEN: dict[str, AnswerEntries] = {}


def cache_entries(location: str) -> AnswerEntries:
    """This process's :class:`AnswerEntries` for ``location`` (kept between batches)."""
    if location not in _OPEN:
        _OPEN[location] = AnswerEntries(location)
    return _OPEN[location]


def resolve_location(location: str) -> tuple["pyarrow.fs.FileSystem", str]:
    """The filesystem and path of ``location``, as the run directory resolves
    ``data.output``: a URI by its scheme, else a local folder."""
    import pyarrow.fs

    if "://" in location:
        fs, path = pyarrow.fs.FileSystem.from_uri(location)
        return fs, path.rstrip("/")
    return pyarrow.fs.LocalFileSystem(), os.path.abspath(os.path.expanduser(location))
