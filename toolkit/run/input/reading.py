"""Open a spec's input as a Ray Dataset, and check it before any model loads.

What can be read here without Ray is: a local file's existence, a single CSV or
Parquet file's schema and first rows, and a JSON file's rows (read as Ray's JSON
reader reads them, with a line-by-line diagnosis where that fails), so that
:func:`toolkit.run.input.checks.check_input` refuses bad input before Ray starts.
What is particular to a format is in its own module: CSV in
:mod:`~toolkit.run.input.csv_files`, JSON in :mod:`~toolkit.run.input.json_files`;
naming the format and opening the bytes in :mod:`~toolkit.run.input.file_access`.
"""

from __future__ import annotations

import difflib
import warnings
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from toolkit.errors import InputDataError
from toolkit.run.input.csv_files import (
    csv_as_text,
    csv_parse_options,
    csv_read_options,
    describe_read_error,
    first_csv_rows,
    read_at_most,
    wrong_separator,
)
from toolkit.run.input.file_access import (
    HF_PREFIX,
    IMAGE_EXTENSIONS,
    check_local_input,
    input_format,
    local_source,
    read_hint,
)
from toolkit.spec.models import DataConfig

if TYPE_CHECKING:
    import pyarrow as pa
    from ray.data import Dataset


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


def open_input(data: DataConfig, blocks: int | None = None) -> "Dataset":
    """A lazy Dataset over a file, folder, URL or ``hf://`` input (nothing is read yet).

    Generated ``sample:`` inputs come from a sample provider (``run_source``).

    Args:
        blocks: Read a table file in at least this many blocks (more with
            ``data.partitions``): Ray's reader cuts its blocks as it streams them,
            which costs nothing, where a repartition after the read is a pass of its own.

    Raises:
        InputDataError: a local input that is missing or empty.
        SpecError: an unknown format.
    """
    import ray.data

    check_local_input(data)
    fmt = input_format(data)
    source = local_source(data.input)
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
                describe_read_error(data.input, exc),
                hint="Datasets stream from the Hugging Face Hub: check the name and network, "
                "or point --input at a local image folder or parquet file.",
            ) from None
    kwargs: dict[str, Any] = {}
    if data.partitions or blocks:
        # More blocks than files: Ray splits the file's blocks as it streams them.
        kwargs["override_num_blocks"] = max(data.partitions or 0, blocks or 0)
    if fmt == "csv":
        kwargs["convert_options"] = csv_as_text(source, data.csv)
        kwargs["read_options"] = csv_read_options(data.csv)
        kwargs["parse_options"] = csv_parse_options(data.csv)
    try:
        return readers[fmt](source, **kwargs)
    except Exception as exc:  # noqa: BLE001 - any reader failure is an input problem
        raise InputDataError(describe_read_error(data.input, exc, data.csv),
                             hint=read_hint(data.input))


def first_rows(data: DataConfig, rows: int,
               columns: Sequence[str] | None = None) -> Iterator["pa.RecordBatch"] | None:
    """The first ``rows`` rows of a single local CSV or Parquet file, in file order,
    read here with Arrow as Ray's readers read them (CSV as text); None for any
    other input, which Ray reads. Staging ``--rows`` this way runs no Ray job.

    Args:
        columns: Read only these columns (e.g. the id column, to check the ids);
            default: every column.
    """
    fmt = input_format(data)
    path = Path(data.input).expanduser()
    if "://" in data.input or fmt not in ("csv", "parquet") or not path.is_file():
        return None
    if fmt == "csv":
        return first_csv_rows(data, rows, columns)
    import pyarrow.parquet as pq

    source = str(path)
    opened = lambda: pq.ParquetFile(source).iter_batches(  # noqa: E731 - opened in the guard
        columns=list(columns) if columns is not None else None)
    return read_at_most(opened, rows, data.input, data.csv)


def local_parquet_schema(data: DataConfig) -> "pa.Schema | None":
    """A single local Parquet file's schema, from its footer; None for any other input.

    Raises:
        InputDataError: the file is not Parquet (or is cut short).
    """
    import pyarrow.parquet as pq

    path = Path(data.input).expanduser()
    if "://" in data.input or input_format(data) != "parquet" or not path.is_file():
        return None
    try:
        return pq.read_schema(str(path))
    except Exception as exc:  # noqa: BLE001 - any reader failure is an input problem
        raise InputDataError(describe_read_error(data.input, exc),
                             hint=read_hint(data.input)) from None


def input_schema(ds: "Dataset", source: str) -> "pa.Schema":
    """The input's Arrow schema, reading as little as Ray needs (the first block)."""
    import pyarrow as pa

    try:
        with warnings.catch_warnings():
            # This peek is not a write, so Ray says checkpointing doesn't apply to it.
            warnings.filterwarnings("ignore", message=".*doesn't support checkpointing.*")
            schema = ds.schema()
    except Exception as exc:  # noqa: BLE001 - surfaced as one readable input error
        raise InputDataError(describe_read_error(source, exc), hint=read_hint(source)) from None
    if schema is None:
        raise InputDataError(
            f"data.input: {source} has no rows.", hint="Point --input at a file with data rows."
        )
    return schema.base_schema if not isinstance(schema, pa.Schema) else schema


def check_required_columns(schema: "pa.Schema", required: list[str], source: str,
                           id_column: str | None = None, delimiter: str | None = None) -> None:
    """Fail before any model loads when the job's columns are missing, naming near misses.

    A missing ``id_column`` (``data.id_column``) gets its own fix in the hint; a CSV
    file (``delimiter``: the separator it is read with) whose header is one column
    holding another separator is named as written with that one.
    """
    available = list(schema.names)
    missing = [c for c in required if c not in available]
    if not missing:
        return
    wrong = wrong_separator(available, required, source, delimiter) if delimiter else None
    if wrong is not None:
        raise wrong
    guesses = []
    for column in missing:
        close = difflib.get_close_matches(column, available, n=1, cutoff=0.6)
        if close:
            guesses.append(f"{column!r} -> did you mean {close[0]!r}?")
    hints = []
    if id_column in missing:
        hints.append(f"Key the rows on a column that is unique per row with --set "
                     f"data.id_column=<column> (one of: {', '.join(available)}), or add a "
                     f"{id_column} column to the input.")
    if [c for c in missing if c != id_column]:
        hints.append("Rename the column in the file, or point the job at yours with "
                     "--set options.<name>_column=... ('toolkit show JOB' lists the options).")
    raise InputDataError(
        f"data.input: {source} has no column {', '.join(repr(c) for c in missing)}. "
        f"Available columns: {', '.join(available)}."
        + (f" ({'; '.join(guesses)})" if guesses else ""),
        hint=" ".join(hints),
    )
