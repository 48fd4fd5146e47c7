"""JSON input (JSON Lines, or one JSON list of rows) read here as Ray's JSON reader
reads it, and where it can't be, the line that is wrong and how."""

from __future__ import annotations

import io
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from toolkit.errors import InputDataError
from toolkit.run.input.file_access import input_format, open_binary, unreadable
from toolkit.spec.models import DataConfig

if TYPE_CHECKING:
    import pyarrow as pa


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
        with open_binary(str(path)) as stream:
            content = stream.read()
    except Exception as exc:  # noqa: BLE001 - permissions, a bad .gz, ...
        raise unreadable(data.input, exc) from None
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
                raise _json_error(data.input, content, exc) from None
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


def _json_error(source: str, content: bytes, arrow_error: Exception) -> InputDataError:
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
        return unreadable(source, arrow_error)
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
