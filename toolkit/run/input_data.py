"""Open a spec's input as a Ray Dataset, and check it before any model loads."""

from __future__ import annotations

import difflib
import warnings
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urlparse

from toolkit.errors import InputDataError, SpecError
from toolkit.spec.models import DataConfig

if TYPE_CHECKING:
    import pyarrow as pa
    from ray.data import Dataset

HF_PREFIX = "hf://"
_HEAD_BYTES = 1 << 16
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


def _check_local_input(data: DataConfig) -> None:
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


def read_image_folder(path: str) -> "Dataset":
    """One row per image file: ``bytes`` and ``path`` (the stable id)."""
    import ray.data

    # local:// reads on the driver's node, where the folder is; other nodes lack it.
    source = path if "://" in path else f"local://{Path(path).resolve()}"
    return ray.data.read_binary_files(
        source, include_paths=True, file_extensions=[e.lstrip(".") for e in IMAGE_EXTENSIONS]
    )


def read_huggingface(name: str) -> "Dataset":
    """Stream a Hugging Face dataset's train split (no full download)."""
    import datasets
    import ray.data

    stream = datasets.load_dataset(name, split="train", streaming=True)
    return ray.data.from_huggingface(stream)


def open_input(data: DataConfig) -> "Dataset":
    """A lazy Dataset over a file, folder, URL or ``hf://`` input (nothing is read yet).

    Generated ``sample:`` inputs come from a sample provider (``run_source``).

    Raises:
        InputDataError: a local input that is missing or empty.
        SpecError: an unknown format.
    """
    import ray.data

    _check_local_input(data)
    fmt = input_format(data)
    source = str(Path(data.input).expanduser()) if "://" not in data.input else data.input
    readers: dict[str, Any] = {
        "csv": ray.data.read_csv,
        "parquet": ray.data.read_parquet,
        "json": ray.data.read_json,
    }
    if fmt == "images":
        return read_image_folder(source)
    if fmt == "huggingface":
        try:
            return read_huggingface(data.input[len(HF_PREFIX):])
        except Exception as exc:  # noqa: BLE001 - unreachable hub, unknown dataset
            raise InputDataError(
                _describe_read_error(data.input, exc),
                hint="Datasets stream from the Hugging Face Hub: check the name and network, "
                "or point --input at a local image folder or parquet file.",
            ) from None
    kwargs: dict[str, Any] = {}
    if data.partitions:
        # More blocks than files: Ray splits the file's blocks as it streams them.
        kwargs["override_num_blocks"] = data.partitions
    if fmt == "csv":
        kwargs["convert_options"] = _csv_as_text(source)
    try:
        return readers[fmt](source, **kwargs)
    except Exception as exc:  # noqa: BLE001 - any reader failure is an input problem
        raise InputDataError(_describe_read_error(data.input, exc), hint=_read_hint(data.input))


def _csv_as_text(source: str) -> Any:
    """Read every CSV column as text.

    Arrow infers CSV types from the first block of a file and then fails mid-file
    when a later block disagrees (a phone column that is all digits for a while);
    it also turns ISO dates into date32. CSV has no types, so we keep its text.
    """
    import csv
    import io

    import pyarrow as pa
    import pyarrow.csv as pacsv

    try:
        with _open_binary(source) as stream:
            head = stream.read(_HEAD_BYTES)
    except FileNotFoundError as exc:
        cause = exc.__cause__ or exc.__context__
        if cause is not None:  # fsspec reports a refused connection as "not found"
            raise InputDataError(
                f"data.input: can't read {source}: {type(cause).__name__}: "
                f"{_last_line(cause)}", hint=_read_hint(source),
            ) from None
        raise InputDataError(f"data.input: {source} does not exist.",
                             hint=_read_hint(source)) from None
    except Exception as exc:  # noqa: BLE001 - unreachable URL, permissions, ...
        raise InputDataError(_describe_read_error(source, exc), hint=_read_hint(source)) from None
    try:
        text = head.decode("utf-8")
    except UnicodeDecodeError as exc:
        cut_at_edge = len(head) == _HEAD_BYTES and exc.start >= len(head) - 4
        if not cut_at_edge:  # a bad byte, not a character cut by our 64 KiB read
            raise InputDataError(
                f"data.input: {source} is not UTF-8 text (byte {exc.start} is "
                f"0x{head[exc.start]:02x}).",
                hint="Re-save the file as UTF-8 (e.g. iconv -f latin1 -t utf-8).",
            ) from None
        text = head[: exc.start].decode("utf-8")
    header = next(csv.reader(io.StringIO(text)), [])
    if not header:
        raise InputDataError(f"data.input: {source} has no header row.")
    return pacsv.ConvertOptions(column_types={name: pa.string() for name in header})


def _open_binary(source: str) -> Any:
    if source.startswith(("http://", "https://")):
        import fsspec

        return fsspec.open(source, "rb").open()
    import pyarrow.fs

    if "://" in source:
        fs, path = pyarrow.fs.FileSystem.from_uri(source)
        return fs.open_input_stream(path)
    return open(source, "rb")


def _last_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return next((line for line in reversed(text) if line.strip()), type(exc).__name__)


def _describe_read_error(source: str, exc: BaseException) -> str:
    return f"data.input: can't read {source}: {_last_line(exc)}"


def _read_hint(source: str) -> str:
    if source.startswith(("http://", "https://", "s3://", "gs://")):
        return "Check that the URL is reachable from this machine (and credentials for s3/gs)."
    return "Check that the file is a valid CSV/parquet/JSON file in UTF-8."


def input_schema(ds: "Dataset", source: str) -> "pa.Schema":
    """The input's Arrow schema, reading as little as Ray needs (the first block)."""
    import pyarrow as pa

    try:
        with warnings.catch_warnings():
            # This peek is not a write, so Ray says checkpointing doesn't apply to it.
            warnings.filterwarnings("ignore", message=".*doesn't support checkpointing.*")
            schema = ds.schema()
    except Exception as exc:  # noqa: BLE001 - surfaced as one readable input error
        raise InputDataError(_describe_read_error(source, exc), hint=_read_hint(source)) from None
    if schema is None:
        raise InputDataError(
            f"data.input: {source} has no rows.", hint="Point --input at a file with data rows."
        )
    return schema.base_schema if not isinstance(schema, pa.Schema) else schema


def check_required_columns(schema: "pa.Schema", required: list[str], source: str) -> None:
    """Fail before any model loads when the job's columns are missing, naming near misses."""
    available = list(schema.names)
    missing = [c for c in required if c not in available]
    if not missing:
        return
    guesses = []
    for column in missing:
        close = difflib.get_close_matches(column, available, n=1, cutoff=0.6)
        if close:
            guesses.append(f"{column!r} -> did you mean {close[0]!r}?")
    raise InputDataError(
        f"data.input: {source} has no column {', '.join(repr(c) for c in missing)}. "
        f"Available columns: {', '.join(available)}."
        + (f" ({'; '.join(guesses)})" if guesses else ""),
        hint="Rename the column in the file, or point the job at yours with "
        "--set options.<name>_column=... ('toolkit show JOB' lists the options).",
    )
