"""CSV input as spreadsheets write it: the reader's options, and why a file can't be read.

Every CSV read here and by Ray uses the same options (:func:`csv_read_options`,
:func:`csv_parse_options`, every column as text: :func:`csv_as_text`), so the checks
before Ray starts see the rows the run will read. A file that is not what
``data.csv`` says (compressed, UTF-16, another code page, another separator, a row
longer than a block) is refused here, naming the byte, line or setting that fixes it,
where Arrow would fail mid-run with "invalid UTF8 data".
"""

from __future__ import annotations

import codecs
import contextlib
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urlparse

from toolkit.errors import InputDataError, SpecError
from toolkit.run.input.file_access import (
    input_format,
    last_line,
    open_binary,
    read_error,
    read_hint,
)
from toolkit.spec.models import SAMPLE_PREFIX, CsvDialect, DataConfig

if TYPE_CHECKING:
    import pyarrow as pa

_HEAD_BYTES = 1 << 16
#: Bytes the CSV reader takes at a time, so the longest row (line) it can read.
#: Arrow's default, 1 MiB, fails on one long cell with nothing but a retry hint.
CSV_BLOCK_BYTES = 16 << 20
#: How compressed files begin, for a file whose name doesn't say it is compressed.
_COMPRESSED = {b"\x1f\x8b": "gzip", b"\x28\xb5\x2f\xfd": "zstd", b"BZh": "bzip2",
               b"\xfd7zXZ\x00": "xz", b"PK\x03\x04": "zip"}
_UNPACK = {"zstd": "zstd -d", "bzip2": "bunzip2", "xz": "unxz"}


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


def first_csv_rows(data: DataConfig, rows: int,
                   columns: Sequence[str] | None = None) -> Iterator["pa.RecordBatch"]:
    """The first ``rows`` rows of ``data``'s input, a single local CSV file, read with
    Arrow as Ray's reader reads it (every column as text).

    Args:
        columns: Read only these columns; default: every column.
    """
    source = str(Path(data.input).expanduser())
    convert = csv_as_text(source, data.csv)
    if columns is not None:
        convert.include_columns = list(columns)
    return read_at_most(lambda: csv_reader(source, data.csv, convert), rows, data.input,
                        data.csv)


def csv_reader(source: "str | pa.NativeFile", dialect: CsvDialect,
                convert: Any = None) -> Iterable["pa.RecordBatch"]:
    """Arrow's streaming CSV reader with the options :func:`open_input` gives Ray's."""
    import pyarrow.csv as pacsv

    return pacsv.open_csv(
        source, read_options=csv_read_options(dialect), parse_options=csv_parse_options(dialect),
        convert_options=convert if convert is not None else csv_as_text(source, dialect))


def _first_block(source: str) -> bytes:
    """A local CSV file's first block (:data:`CSV_BLOCK_BYTES`, up to its last whole
    row; empty where that holds no whole row). The streaming reader opened on the file
    reads up to 32 blocks ahead in the background (half a GiB at 16 MiB a block, kept
    by Arrow's allocator for the rest of the run) for the one block a schema needs."""
    with open_binary(source) as stream:
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


def read_at_most(opened: Callable[[], Iterable["pa.RecordBatch"]], rows: int,
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


def csv_as_text(source: str, dialect: CsvDialect, head: bytes | None = None) -> Any:
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
            with open_binary(source) as stream:
                head = stream.read(_HEAD_BYTES)
    except FileNotFoundError as exc:
        cause = exc.__cause__ or exc.__context__
        if cause is not None:  # fsspec reports a refused connection as "not found"
            raise InputDataError(
                f"data.input: can't read {source}: {type(cause).__name__}: "
                f"{last_line(cause)}", hint=read_hint(source),
            ) from None
        raise InputDataError(f"data.input: {source} does not exist.",
                             hint=read_hint(source)) from None
    except Exception as exc:  # noqa: BLE001 - unreachable URL, permissions, ...
        raise InputDataError(describe_read_error(source, exc), hint=read_hint(source)) from None
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
    with open_binary(source) as stream:
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


def describe_read_error(source: str, exc: BaseException,
                        dialect: CsvDialect | None = None) -> str:
    """Why ``source`` can't be read (:func:`~toolkit.run.input.file_access.read_error`);
    where that is Ray's "Failed to read CSV file", which hides Arrow's reason, a local
    file's own reason, read here."""
    if "Failed to read CSV file" in last_line(exc) and "://" not in source:
        reason = _csv_problem(source, dialect or CsvDialect())
        if reason:
            return f"data.input: can't read {source}: {reason}"
    return read_error(source, exc)


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
                header = list(csv_as_text(local, dialect).column_types)
                wrong = wrong_separator(header, [], source, dialect.delimiter)
                if wrong is not None:
                    return wrong
    return InputDataError(describe_read_error(source, exc, dialect), hint=read_hint(source))


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
        for _ in first_csv_rows(data, data.rows):
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
        with open_binary(str(Path(source).expanduser())) as stream:
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
            convert = csv_as_text(source, data.csv, head)
            batch = next(iter(read_at_most(lambda: csv_reader(pa.BufferReader(head), data.csv,
                                                           convert), 1,
                                       data.input)), None)
            if batch is not None:
                return batch.schema
    batch = next(iter(read_at_most(lambda: csv_reader(source, data.csv), 1, data.input,
                               data.csv)), None)
    if batch is None:
        raise InputDataError(f"data.input: {data.input} has no rows.",
                             hint="Point --input at a file with data rows.")
    return batch.schema


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


def wrong_separator(available: list[str], required: list[str], source: str,
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
