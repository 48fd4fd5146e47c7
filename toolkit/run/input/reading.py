"""Open a spec's input as a Ray Dataset, and check it before any model loads.

What can be read here without Ray is: a local file's existence, a single CSV or
Parquet file's schema and first rows, and a JSON file's rows (read as Ray's JSON
reader reads them, with a line-by-line diagnosis where that fails), so that
:func:`toolkit.run.input.checks.check_input` refuses bad input before Ray starts.
"""

from __future__ import annotations

import codecs
import contextlib
import difflib
import io
import os
import warnings
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urlparse

from toolkit.errors import InputDataError, SpecError
from toolkit.spec.models import SAMPLE_PREFIX, CsvDialect, DataConfig

if TYPE_CHECKING:
    import pyarrow as pa
    from ray.data import Dataset

HF_PREFIX = "hf://"
_HEAD_BYTES = 1 << 16
IMAGE_EXTENSIONS = (".jpg", ".jpeg", ".png", ".webp", ".bmp", ".gif")
#: Bytes the CSV reader takes at a time, so the longest row (line) it can read.
#: Arrow's default, 1 MiB, fails on one long cell with nothing but a retry hint.
CSV_BLOCK_BYTES = 16 << 20
#: How compressed files begin, for a file whose name doesn't say it is compressed.
_COMPRESSED = {b"\x1f\x8b": "gzip", b"\x28\xb5\x2f\xfd": "zstd", b"BZh": "bzip2",
               b"\xfd7zXZ\x00": "xz", b"PK\x03\x04": "zip"}
_UNPACK = {"zstd": "zstd -d", "bzip2": "bunzip2", "xz": "unxz"}
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
                _describe_read_error(data.input, exc),
                hint="Datasets stream from the Hugging Face Hub: check the name and network, "
                "or point --input at a local image folder or parquet file.",
            ) from None
    kwargs: dict[str, Any] = {}
    if data.partitions or blocks:
        # More blocks than files: Ray splits the file's blocks as it streams them.
        kwargs["override_num_blocks"] = max(data.partitions or 0, blocks or 0)
    if fmt == "csv":
        kwargs["convert_options"] = _csv_as_text(source, data.csv)
        kwargs["read_options"] = csv_read_options(data.csv)
        kwargs["parse_options"] = csv_parse_options(data.csv)
    try:
        return readers[fmt](source, **kwargs)
    except Exception as exc:  # noqa: BLE001 - any reader failure is an input problem
        raise InputDataError(_describe_read_error(data.input, exc, data.csv),
                             hint=_read_hint(data.input))


def csv_read_options(dialect: CsvDialect) -> Any:
    """Arrow's CSV read options for a file written in ``dialect``: those Ray's reader
    and every check here read with, so they see the same rows."""
    import pyarrow.csv as pacsv

    # Arrow skips a UTF-8 byte-order mark itself, and decodes any other encoding
    # (Python's codec) as it reads; UTF-8 costs nothing.
    return pacsv.ReadOptions(use_threads=False, block_size=CSV_BLOCK_BYTES,
                             encoding=dialect.encoding)


def csv_dataset_format(dialect: CsvDialect, text_columns: Sequence[str]) -> Any:
    """A ``pyarrow.dataset`` CSV format reading files written in ``dialect``, with
    ``text_columns`` as text (as Ray reads every column: "007" stays "007"), for the
    checks that read a column or two of a file or folder here."""
    import pyarrow as pa
    import pyarrow.csv as pacsv
    import pyarrow.dataset as pads

    return pads.CsvFileFormat(
        convert_options=pacsv.ConvertOptions(column_types={c: pa.string() for c in text_columns}),
        # Arrow's default blocks (1 MiB) read a column ~1.5x faster than the run's 16 MiB;
        # a longer row fails here, and Ray's reader reads it.
        read_options=pacsv.ReadOptions(encoding=dialect.encoding),
        parse_options=csv_parse_options(dialect))


def csv_parse_options(dialect: CsvDialect) -> Any:
    """Arrow's CSV parse options for a file written in ``dialect``."""
    import pyarrow.csv as pacsv

    # A spreadsheet's cell may hold line breaks (quoted). Without newlines_in_values
    # Arrow cuts its blocks at any newline, so such a file fails ("out of sync with
    # chunker") once it is longer than one block; with it, 1M rows read no slower.
    return pacsv.ParseOptions(delimiter=dialect.delimiter, newlines_in_values=True)


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
    source = str(path)
    if fmt == "csv":
        convert = _csv_as_text(source, data.csv)
        if columns is not None:
            convert.include_columns = list(columns)
        opened = lambda: _csv_reader(source, data.csv, convert)  # noqa: E731 - opened in the guard
    else:
        import pyarrow.parquet as pq

        opened = lambda: pq.ParquetFile(source).iter_batches(  # noqa: E731
            columns=list(columns) if columns is not None else None)
    return _at_most(opened, rows, data.input, data.csv)


def _csv_reader(source: "str | pa.NativeFile", dialect: CsvDialect,
                convert: Any = None) -> Iterable["pa.RecordBatch"]:
    """Arrow's streaming CSV reader with the options :func:`open_input` gives Ray's."""
    import pyarrow.csv as pacsv

    return pacsv.open_csv(
        source, read_options=csv_read_options(dialect), parse_options=csv_parse_options(dialect),
        convert_options=convert if convert is not None else _csv_as_text(source, dialect))


def _first_block(source: str) -> bytes:
    """A local CSV file's first block (:data:`CSV_BLOCK_BYTES`, up to its last whole
    row; empty where that holds no whole row). The streaming reader opened on the file
    reads up to 32 blocks ahead in the background (half a GiB at 16 MiB a block, kept
    by Arrow's allocator for the rest of the run) for the one block a schema needs."""
    with _open_binary(source) as stream:
        head = stream.read(CSV_BLOCK_BYTES + 1)
    if len(head) > CSV_BLOCK_BYTES:
        head = head[: _end_of_last_row(head, CSV_BLOCK_BYTES)]
    return head


def _end_of_last_row(text: bytes, within: int) -> int:
    """Where the last whole CSV row of ``text[:within]`` ends: after a newline outside
    quotes (0: none). A quote inside a quoted cell is doubled, so a newline has an
    even number of quotes before it exactly when it is outside them."""
    end = text.rfind(b"\n", 0, within)
    inside = text.count(b'"', 0, end) % 2
    while end >= 0 and inside:
        before = text.rfind(b"\n", 0, end)
        inside ^= text.count(b'"', before + 1, end) % 2
        end = before
    return end + 1


def _at_most(opened: Callable[[], Iterable["pa.RecordBatch"]], rows: int,
             source: str, dialect: CsvDialect | None = None) -> Iterator["pa.RecordBatch"]:
    try:
        left = rows
        for batch in opened():
            if left <= 0:
                return
            batch = batch.slice(0, left) if batch.num_rows > left else batch
            left -= batch.num_rows
            yield batch
    except InputDataError:  # said already, with its own hint (a compressed file, ...)
        raise
    except Exception as exc:  # noqa: BLE001 - any reader failure is an input problem
        raise _read_failure(source, exc, dialect) from None


def _csv_as_text(source: str, dialect: CsvDialect, head: bytes | None = None) -> Any:
    """Read every CSV column as text (its names from ``head``, the file's first bytes,
    read here where not given, in ``dialect``).

    Arrow infers CSV types from the first block of a file and then fails mid-file
    when a later block disagrees (a phone column that is all digits for a while);
    it also turns ISO dates into date32. CSV has no types, so we keep its text.
    """
    import csv
    import io

    import pyarrow as pa
    import pyarrow.csv as pacsv

    try:
        if head is None:
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
    head = head[:_HEAD_BYTES]
    _refuse_compressed(source, head)
    _refuse_other_encoding(source, head, dialect)
    try:
        # Not final where the read stopped at _HEAD_BYTES: a character cut there is fine.
        text = codecs.getincrementaldecoder(dialect.encoding)().decode(
            head, final=len(head) < _HEAD_BYTES)
    except UnicodeDecodeError as exc:
        raise _not_text(source, dialect, _where(head, exc.start)) from None
    # Arrow skips a byte-order mark; a column named "\ufeffIndex" would not be text.
    # newline="": a line may end in \r\n, \n or a lone \r (old Mac exports), as Arrow's.
    header = next(csv.reader(io.StringIO(text.removeprefix("\ufeff"), newline=""),
                             delimiter=dialect.delimiter), [])
    if not header:
        raise InputDataError(f"data.input: {source} has no header row.")
    return pacsv.ConvertOptions(column_types={name: pa.string() for name in header})


def _refuse_compressed(source: str, head: bytes) -> None:
    """A compressed file whose name doesn't end in .gz: say so, not 'not UTF-8'."""
    kind = next((name for magic, name in _COMPRESSED.items() if head.startswith(magic)), None)
    if kind is None or (kind == "bzip2" and head[4:10] != b"1AY&SY"):
        return
    name = Path(urlparse(source).path if "://" in source else source).name
    if kind == "zip":
        raise InputDataError(
            f"data.input: {source} is a zip archive (an Excel .xlsx file is one), not CSV text.",
            hint="Unzip it, or save the sheet as CSV (UTF-8).")
    raise InputDataError(
        f"data.input: {source} looks {kind}-compressed (it starts with bytes "
        f"{head[:4].hex(' ')}), not CSV text.",
        hint=(f"Decompress it (gunzip -c {name} > {Path(name).stem}-plain.csv), or name it "
              f"{name}.gz: a .gz file is read decompressed." if kind == "gzip" else
              f"Decompress it first ({_UNPACK[kind]} {name})."),
    )


def _is_utf8(encoding: str) -> bool:
    return codecs.lookup(encoding).name == "utf-8"


def _refuse_other_encoding(source: str, head: bytes, dialect: CsvDialect) -> None:
    """A byte-order mark (or a start of NUL bytes) says how a file is encoded: refuse
    one that contradicts ``data.csv.encoding`` (Excel's "Unicode text" is UTF-16),
    naming the setting."""
    name = codecs.lookup(dialect.encoding).name
    if head.startswith((codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE)) and not name.startswith(
            "utf-16"):
        raise InputDataError(
            f"data.input: {source} is UTF-16 text (it starts with a UTF-16 byte-order mark), "
            f"not {dialect.encoding}. Nothing was run.",
            hint="Read it as UTF-16 with --set data.csv.encoding=utf-16, or save it as "
                 "CSV UTF-8.")
    sample = head[:4096]
    if sample and sample.count(b"\x00") * 4 >= len(sample) and not name.startswith(
            ("utf-16", "utf-32")):
        # NUL is text in UTF-8 (a cell may hold one), so such a file would read as columns
        # named "I\x00n\x00d..."; in UTF-16 every other byte of Latin text is one.
        order = "le" if head[1:2] == b"\x00" else "be"
        raise InputDataError(
            f"data.input: {source} is a quarter or more NUL bytes (0x00) at its start: it "
            f"looks like UTF-16 text without a byte-order mark, not {dialect.encoding}. "
            "Nothing was run.",
            hint=f"Read it as UTF-16 with --set data.csv.encoding=utf-16-{order}, or save it "
                 "as CSV UTF-8.")
    if head.startswith(codecs.BOM_UTF8) and not name.startswith("utf-8"):
        raise InputDataError(
            f"data.input: {source} is UTF-8 text (it starts with a UTF-8 byte-order mark), "
            f"not {dialect.encoding}. Nothing was run.",
            hint="Leave out data.csv.encoding: UTF-8 is the default.")


#: Where a file stops being text: the byte's offset and value, its line number and bytes.
_Where = tuple[int, int, int, bytes]


def _where(buffer: bytes, at: int, offset: int = 0, lines_before: int = 0) -> _Where:
    """Byte ``at`` of ``buffer`` (which begins ``offset`` bytes into its file, after
    ``lines_before`` newlines) as a :data:`_Where`."""
    start = buffer.rfind(b"\n", 0, at) + 1
    end = buffer.find(b"\n", at)
    line = buffer[start:end if end >= 0 else len(buffer)].rstrip(b"\r")
    return offset + at, buffer[at], lines_before + buffer.count(b"\n", 0, at) + 1, line


def _undecodable(source: str, encoding: str) -> _Where | None:
    """The first byte of ``source`` that is not text in ``encoding``; None where every
    byte is. One pass in :data:`CSV_BLOCK_BYTES` pieces (UTF-8: ~1 GB/s)."""
    decoder = codecs.getincrementaldecoder(encoding)()
    offset = lines = 0
    with _open_binary(source) as stream:
        while True:
            piece = stream.read(CSV_BLOCK_BYTES)
            held = decoder.getstate()[0]  # a character's first bytes from the last piece
            try:
                decoder.decode(piece, final=not piece)
            except UnicodeDecodeError as exc:
                buffer = held + piece
                return _where(buffer, exc.start, offset - len(held),
                              lines - held.count(b"\n"))
            if not piece:
                return None
            offset += len(piece)
            lines += piece.count(b"\n")


def _not_text(source: str, dialect: CsvDialect, where: _Where) -> InputDataError:
    """Why ``source`` can't be read as ``data.csv.encoding``, and the setting that
    reads it: from UTF-8, the Windows code page Excel saves "CSV" in, where that
    decodes the line (else Latin-1, which decodes any byte)."""
    offset, byte, line, text = where
    if not _is_utf8(dialect.encoding):
        return InputDataError(
            f"data.input: {source} is not {dialect.encoding} text (byte {offset} is "
            f"0x{byte:02x}), on line {line}. Nothing was run.",
            hint="Set data.csv.encoding to the encoding the file was saved in (utf-8, "
                 "cp1252, latin-1, utf-16, ...), e.g. --set data.csv.encoding=utf-8.")
    guess = "cp1252"
    try:
        shown = text.decode(guess)
    except UnicodeDecodeError:
        guess = "latin-1"
        shown = text.decode(guess)
    name = Path(urlparse(source).path if "://" in source else source).name
    return InputDataError(
        f"data.input: {source} is not UTF-8 text (byte {offset} is "
        f"0x{byte:02x}), on line {line}, which reads as "
        f"{shown[:80]!r} in {guess}. Nothing was run.",
        hint=f"Read it as {guess} with --set data.csv.encoding={guess} (Excel on Windows "
             f"saves \"CSV\" so), or re-save it as UTF-8 (iconv -f {guess} -t utf-8 {name} "
             f"> {Path(name).stem}-utf8.csv).")


def _is_gzip_name(source: str) -> bool:
    return (urlparse(source).path if "://" in source else source).lower().endswith(".gz")


def _open_binary(source: str) -> Any:
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


def _last_line(exc: BaseException) -> str:
    text = [line for line in str(exc).strip().splitlines()
            if line.strip() and not line.startswith(_RETRY_NOTES)]
    return text[-1] if text else type(exc).__name__


def _describe_read_error(source: str, exc: BaseException,
                         dialect: CsvDialect | None = None) -> str:
    reason = _last_line(exc)
    if "Failed to read CSV file" in reason and "://" not in source:
        reason = _csv_problem(source, dialect or CsvDialect()) or reason
    return f"data.input: can't read {source}: {reason}"


def _read_failure(source: str, exc: BaseException,
                  dialect: CsvDialect | None) -> InputDataError:
    """A local CSV file's read failure as the user should read it: where its text
    isn't ``data.csv.encoding`` (Arrow says only "invalid UTF8 data"), that byte
    and line; otherwise Arrow's reason."""
    if dialect is not None and "://" not in source:
        local = str(Path(source).expanduser())
        with contextlib.suppress(InputDataError, OSError):
            if isinstance(exc, UnicodeDecodeError) or "UTF8" in str(exc):
                where = _undecodable(local, dialect.encoding)
                if where is not None:
                    return _not_text(source, dialect, where)
            elif "columns, got" in str(exc):  # rows wider than the header: its separator?
                header = list(_csv_as_text(local, dialect).column_types)
                wrong = _wrong_separator(header, [], source, dialect.delimiter)
                if wrong is not None:
                    return wrong
    return InputDataError(_describe_read_error(source, exc, dialect), hint=_read_hint(source))


def check_csv_text(data: DataConfig) -> None:
    """Refuse a single local CSV file that is not text in ``data.csv.encoding``,
    naming the byte, its line and the setting that reads it: Arrow would otherwise
    fail mid-run, on the block that holds it, with "invalid UTF8 data".

    A run of every row decodes the whole file here (one pass, ~1 GB/s for UTF-8);
    with ``--rows`` the rows the run reads are read as the staging reads them.

    Raises:
        InputDataError: naming the file, byte and line, and the setting to use.
    """
    path = Path(data.input).expanduser()
    if "://" in data.input or input_format(data) != "csv" or not path.is_file():
        return
    if data.rows is not None:
        for _ in first_rows(data, data.rows) or ():
            pass
        return
    where = _undecodable(str(path), data.csv.encoding)
    if where is not None:
        raise _not_text(data.input, data.csv, where)


def _csv_problem(source: str, dialect: CsvDialect, budget: int = 256 << 20) -> str | None:
    """Arrow's own reason a local CSV file fails (Ray's message hides it), reading
    at most ``budget`` bytes of it."""
    import pyarrow as pa
    import pyarrow.csv as pacsv

    try:
        with _open_binary(str(Path(source).expanduser())) as stream:
            reader = pacsv.open_csv(stream, read_options=csv_read_options(dialect),
                                    parse_options=csv_parse_options(dialect))
            read = 0
            while read < budget:
                read += reader.read_next_batch().nbytes
    except StopIteration:
        return None
    except pa.ArrowInvalid as exc:
        message = str(exc).strip().splitlines()[0]
        if "straddl" in message:
            return (f"a row is longer than {CSV_BLOCK_BYTES >> 20} MiB, the most the CSV "
                    "reader takes in one piece (no prompt needs a cell that long: shorten "
                    "or drop it)")
        return message
    except Exception:  # noqa: BLE001 - only a better message was wanted
        return None
    return None


def _read_hint(source: str) -> str:
    if source.startswith(("http://", "https://", "s3://", "gs://")):
        return "Check that the URL is reachable from this machine (and credentials for s3/gs)."
    return "Check that the file is a valid CSV/parquet/JSON file in UTF-8."


def local_csv_schema(data: DataConfig) -> "pa.Schema | None":
    """A single local CSV file's schema, from its first block read here with the reader
    and options Ray uses (so the same problems surface), rather than by a Ray job of
    its own (seconds of a small run); None for any other input."""
    path = Path(data.input).expanduser()
    if "://" in data.input or input_format(data) != "csv" or not path.is_file():
        return None
    import pyarrow as pa

    source = str(path)
    # A quoted newline where the block was cut, a first row longer than a block or any
    # other problem fails here: the whole file then says what it says.
    with contextlib.suppress(Exception):
        head = _first_block(source)
        if head:
            convert = _csv_as_text(source, data.csv, head)
            batch = next(iter(_at_most(lambda: _csv_reader(pa.BufferReader(head), data.csv,
                                                           convert), 1,
                                       data.input)), None)
            if batch is not None:
                return batch.schema
    batch = next(iter(_at_most(lambda: _csv_reader(source, data.csv), 1, data.input,
                               data.csv)), None)
    if batch is None:
        raise InputDataError(f"data.input: {data.input} has no rows.",
                             hint="Point --input at a file with data rows.")
    return batch.schema


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
        raise InputDataError(_describe_read_error(data.input, exc),
                             hint=_read_hint(data.input)) from None


#: Arrow's JSON block size, where Ray's JSON reader starts; it doubles it while one
#: line is longer than a block, up to Ray Data's largest block (128 MiB by default).
JSON_BLOCK_BYTES = 1 << 20
_JSON_MAX_BLOCK_BYTES = 128 << 20


def read_local_json(data: DataConfig) -> "pa.Table | None":
    """A single local JSON Lines (or JSON array) file's rows, read here as Ray's JSON
    reader reads them: Arrow's reader, else the whole file as one JSON document. None
    for any other input.

    Arrow reads the whole file at once (as a Ray read task does), so this costs one
    read of it; where it fails, Ray's own message is Python's about the fallback
    ("Extra data: line 2 column 1"), so the file is gone through line by line to say
    which line is wrong and how.

    Raises:
        InputDataError: neither reader takes the file, naming the line and its problem.
    """
    import pyarrow as pa
    import pyarrow.json as pajson

    path = Path(data.input).expanduser()
    if "://" in data.input or input_format(data) != "json" or not path.is_file():
        return None
    try:
        with _open_binary(str(path)) as stream:
            content = stream.read()
    except Exception as exc:  # noqa: BLE001 - permissions, a bad .gz, ...
        raise InputDataError(_describe_read_error(data.input, exc),
                             hint=_read_hint(data.input)) from None
    block = JSON_BLOCK_BYTES
    while True:
        try:
            table = pajson.read_json(io.BytesIO(content), read_options=pajson.ReadOptions(
                use_threads=False, block_size=block))
            break
        except pa.ArrowInvalid as exc:
            if "straddl" in str(exc) and block < _JSON_MAX_BLOCK_BYTES:
                block *= 2
                continue
            table = _json_document(content)  # Ray's fallback: json.load of the whole file
            if table is None:
                raise _json_error(data.input, content, _last_line(exc)) from None
            break
    if not table.num_rows:
        raise InputDataError(f"data.input: {data.input} has no rows.",
                             hint="Point --input at a file with one JSON object per line.")
    return table


def _json_document(content: bytes) -> "pa.Table | None":
    """The file as Ray's fallback reads it (``json.load``, then a row per list item);
    None where that fails too."""
    import json

    import pyarrow as pa

    try:
        return pa.Table.from_pylist(json.loads(content))
    except Exception:  # noqa: BLE001 - not one JSON document of rows either
        return None


def _json_error(source: str, content: bytes, arrow_reason: str) -> InputDataError:
    """Why a JSON file can't be read, named by line, with what to do about it."""
    import json

    if content.lstrip()[:1] == b"[":  # one JSON document: a list of rows
        try:
            json.loads(content)
        except ValueError as exc:
            where = (f"line {exc.lineno}, column {exc.colno}"
                     if isinstance(exc, json.JSONDecodeError) else "")
            return InputDataError(
                f"data.input: {source} is not valid JSON"
                + (f" at {where}" if where else "") + f": {getattr(exc, 'msg', exc)}. "
                "Nothing was run.",
                hint=f"Fix the file {f'at {where} ' if where else ''}(a list of "
                '{"column": value, ...} objects), or write one object per line (JSON Lines).')
        return InputDataError(
            f"data.input: {source} is a JSON list, but not of rows "
            '({"column": value, ...} objects). Nothing was run.',
            hint="Write the rows as JSON Lines: one object per line.")
    found = _json_lines_problem(content)
    if found is None:
        return InputDataError(f"data.input: can't read {source}: {arrow_reason}",
                              hint=_read_hint(source))
    line, problem, hint = found
    return InputDataError(f"data.input: {source}: line {line}{problem}. Nothing was run.",
                          hint=hint)


#: How a JSON value's type is named to users, by the column type Arrow makes of it.
_JSON_KINDS: tuple[tuple[type | tuple[type, ...], str], ...] = (
    (bool, "true/false"), ((int, float), "a number"), (str, "text"),
    (dict, "an object"), (list, "a list"))


def _json_kind(value: Any) -> str:
    return next(name for kind, name in _JSON_KINDS if isinstance(value, kind))


def _json_fields(row: dict[str, Any], prefix: str = "") -> Iterator[tuple[str, Any]]:
    """Every field of ``row`` that holds a value (null fits any column), an object's
    own fields too: ``("address.city", "Paris")``."""
    for key, value in row.items():
        if value is None:
            continue
        yield f"{prefix}{key}", value
        if isinstance(value, dict):
            yield from _json_fields(value, f"{prefix}{key}.")


def _json_lines_problem(content: bytes) -> tuple[int, str, str] | None:
    """The first line of a JSON Lines file that Arrow can't make rows of: (its number,
    what is wrong as the rest of a sentence that begins "line N", what to do); None
    where no line is wrong that way."""
    import json

    first_seen: dict[str, tuple[str, int, Any]] = {}
    lines = content.split(b"\n")
    last = max((n for n, raw in enumerate(lines, 1) if raw.strip()), default=0)
    for number, raw in enumerate(lines, 1):
        if not raw.strip():
            continue
        try:
            row = json.loads(raw.decode("utf-8"))
        except UnicodeDecodeError as exc:
            return (number, f" is not UTF-8 text (its byte {exc.start + 1} is "
                    f"0x{raw[exc.start]:02x})",
                    "Re-save the file as UTF-8 (e.g. iconv -f latin1 -t utf-8).")
        except json.JSONDecodeError as exc:
            cut = number == last and not content.rstrip(b" \t\r").endswith(b"\n")
            reason = exc.msg.removesuffix(" at")  # "Unterminated string starting at"
            return (number, f" is not complete JSON ({reason} at column {exc.colno})",
                    f"Each line must be one whole JSON object; line {number} "
                    + ("is the last and the file ends inside it: it looks cut short (an "
                       "export or copy that stopped early?). Export the file again, or "
                       f"remove line {number}." if cut else
                       'is not. Fix it ({"column": value, ...}), or remove it.'))
        if not isinstance(row, dict):
            return (number, f" is {_json_kind(row)}, not an object",
                    'Each line must be one JSON object: {"column": value, ...}.')
        for field, value in _json_fields(row):
            kind = _json_kind(value)
            seen = first_seen.setdefault(field, (kind, number, value))
            if seen[0] != kind:
                return (number, f"'s {field} is {kind} ({json.dumps(value)[:40]}) where line "
                        f"{seen[1]}'s is {seen[0]} ({json.dumps(seen[2])[:40]}); a column "
                        "holds one type, so the file can't be read as rows",
                        f"Write {field} the same way on every line (e.g. all numbers, or all "
                        "quoted text), then run again.")
    return None


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


def csv_delimiter(data: DataConfig) -> str | None:
    """The separator ``data``'s CSV input is read with; None for any other input."""
    if data.input.startswith(SAMPLE_PREFIX):
        return None
    try:
        return data.csv.delimiter if input_format(data) == "csv" else None
    except SpecError:  # no format known: refused as such elsewhere
        return None


#: Separators a spreadsheet may have written, as ``--set`` takes them.
_SEPARATORS = {",": "data.csv.delimiter=,", ";": "data.csv.delimiter=';'",
               "\t": "'data.csv.delimiter=\\t'", "|": "data.csv.delimiter=pipe"}
_SEPARATOR_NAMES = {",": "comma", ";": "semicolon", "\t": "tab", "|": "pipe"}


def _wrong_separator(available: list[str], required: list[str], source: str,
                     delimiter: str) -> InputDataError | None:
    """A CSV header read as one column that holds another separator: the file was
    written with that one (Excel writes ';' where a comma is the decimal mark)."""
    if len(available) != 1:
        return None
    name = available[0]
    found = [(sum(c in name.split(sep) for c in required), name.count(sep), sep)
             for sep in _SEPARATORS if sep != delimiter and sep in name]
    if not found:
        return None
    sep = max(found)[2]
    return InputDataError(
        f"data.input: {source} has one column, {name[:80]!r}: it looks "
        f"{_SEPARATOR_NAMES[sep]}-separated ({', '.join(name.split(sep)[:8])}), and it is "
        f"read as {_SEPARATOR_NAMES[delimiter]}-separated. Nothing was run.",
        hint=f"Read it as {_SEPARATOR_NAMES[sep]}-separated with --set {_SEPARATORS[sep]}"
             + (" (Excel writes CSV so where a comma is the decimal mark)." if sep == ";"
                else "."))


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
    wrong = _wrong_separator(available, required, source, delimiter) if delimiter else None
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
