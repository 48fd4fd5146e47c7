"""What an input is and how its bytes are reached, before any reader of a format.

The format an input is read as (``data.format``, else its name), the checks that a
local input is there at all, a local path as Ray's workers need it, a binary stream
of any input (``.gz`` decompressed, as Ray's readers do), and the words a read
failure is told in.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

from toolkit.errors import InputDataError, SpecError
from toolkit.spec.models import DataConfig

HF_PREFIX = "hf://"
IMAGE_EXTENSIONS = (".jpg", ".jpeg", ".png", ".webp", ".bmp", ".gif")
_EXTENSIONS = {".csv": "csv", ".parquet": "parquet", ".pq": "parquet", ".json": "json", ".jsonl": "json"}


def input_format(data: DataConfig) -> str:
    """The reader to use: ``data.format`` or the extension of ``data.input``."""
    if data.format != "auto":
        return data.format
    if data.input.startswith(HF_PREFIX):
        return "huggingface"
    path = urlparse(data.input).path if "://" in data.input else data.input
    suffixes = [s.lower() for s in Path(path).suffixes if s.lower() not in (".gz", ".bz2", ".zst")]
    if suffixes and suffixes[-1] in _EXTENSIONS:
        return _EXTENSIONS[suffixes[-1]]
    if Path(path).is_dir():
        suffixes = {p.suffix.lower() for p in Path(path).iterdir()}
        found = {_EXTENSIONS[s] for s in suffixes if s in _EXTENSIONS}
        if len(found) == 1:
            return found.pop()
        if suffixes & set(IMAGE_EXTENSIONS):
            return "images"
    raise SpecError(
        f"data.format: can't tell the format of {data.input!r} from its name.",
        hint="Set --set data.format=csv (or parquet, json).",
    )


def check_local_input(data: DataConfig) -> None:
    """Refuse a local input that is missing, an empty folder or an empty file (URIs
    and generated inputs pass: they are read where they are).

    Raises:
        InputDataError: naming the path as the user gave it.
    """
    if "://" in data.input:
        return
    path = Path(data.input).expanduser()
    if path.is_dir() and not any(path.iterdir()):
        raise InputDataError(f"data.input: directory {data.input} is empty.")
    if not path.exists():
        raise InputDataError(
            f"data.input: {data.input} does not exist.",
            hint="Check the path, or try the pipeline first with --smoke (generated rows).",
        )
    if path.is_file() and path.stat().st_size == 0:
        raise InputDataError(
            f"data.input: {data.input} is empty (0 bytes).",
            hint="Point --input at a file with a header row and data rows.",
        )


def local_source(source: str) -> str:
    """``source`` as Ray's workers must be given it: a local path made absolute against
    this process's working directory (a worker of a joined cluster has its own, where
    a relative ``c200.csv`` names nothing); a URI as it is."""
    return source if "://" in source else os.path.abspath(os.path.expanduser(source))


def _is_gzip_name(source: str) -> bool:
    return (urlparse(source).path if "://" in source else source).lower().endswith(".gz")


def open_binary(source: str) -> Any:
    """A binary stream of ``source``, decompressed when its name ends in ``.gz``
    (as Ray's readers read it)."""
    if source.startswith(("http://", "https://")):
        import fsspec

        return fsspec.open(source, "rb",
                           compression="gzip" if _is_gzip_name(source) else None).open()
    import pyarrow.fs

    if "://" in source:  # Arrow decompresses by the name's extension
        fs, path = pyarrow.fs.FileSystem.from_uri(source)
        return fs.open_input_stream(path)
    if _is_gzip_name(source):
        import gzip

        return gzip.open(source, "rb")
    return open(source, "rb")


#: Lines Ray Data appends to a failed read: how to retry, never why it failed.
_RETRY_NOTES = ("To change retry attempts", "Failed to read stream iteratively after",
                "Failed to apply UDF transform after", "This looks like an AWS S3 permissions")


def last_line(exc: BaseException) -> str:
    """The line of a failure's message that says why (Ray Data's retry notes left out)."""
    text = [line for line in str(exc).strip().splitlines()
            if line.strip() and not line.startswith(_RETRY_NOTES)]
    return text[-1] if text else type(exc).__name__


def read_error(source: str, exc: BaseException) -> str:
    """``data.input: can't read SOURCE: reason``, the reason as the failure gave it
    (without the retry advice Ray Data appends)."""
    return f"data.input: can't read {source}: {last_line(exc)}"


def unreadable(source: str, exc: BaseException) -> InputDataError:
    """The input error of a ``source`` that can't be read: why, and what to check."""
    return InputDataError(read_error(source, exc), hint=read_hint(source))


def read_hint(source: str) -> str:
    """What to check when ``source`` can't be read."""
    if source.startswith(("http://", "https://", "s3://", "gs://")):
        return "Check that the URL is reachable from this machine (and credentials for s3/gs)."
    return "Check that the file is a valid CSV/parquet/JSON file in UTF-8."
