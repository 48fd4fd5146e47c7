"""The OpenAI Batch API file format, the one place the toolkit knows it: its lines, and
its files as a run reads and writes them (``data.format: openai-batch``).

**Lines.** A Batch API request file (also what ``vllm run-batch`` reads) is JSONL, one request a
line::

    {"custom_id": "req-1", "method": "POST", "url": "/v1/chat/completions",
     "body": {"model": "...", "messages": [...], "max_tokens": 100, ...}}

and its output file one line per request::

    {"id": "batch_req_...", "custom_id": "req-1",
     "response": {"status_code": 200, "request_id": "...", "body": {"id": "chatcmpl-...",
        "object": "chat.completion", "model": "...", "choices": [{"index": 0,
        "message": {"role": "assistant", "content": "..."}, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 9, "completion_tokens": 12, "total_tokens": 21}}},
     "error": null}

or, for a request that failed, ``"response": null, "error": {"code", "message"}``.

Here a line becomes a row (:func:`parse_request_line`, which never raises: a line that
is not JSON or lacks a ``custom_id`` is a row with ``request_error`` set, named by its
line number), a row's body becomes chat messages and per-row sampling params in the
vLLM names both engines read (:func:`chat_request`), and a written row becomes an
output line (:func:`batch_output_line`).

A line without a usable ``custom_id`` still needs a row id (results are checkpointed
and resumed by it), and that id must not be one a request of the same file uses: a
file whose line 1 is not JSON may well have a request ``"custom_id": "line-1"``. So
such rows are keyed :func:`unnamed_row_id` (``"\\x00line-1"``), a form no request can
take: a ``custom_id`` starting with a NUL is refused as unusable. Output lines show
them as ``line-N`` (``toolkit run``'s file, read by people) or ``null`` (the
server's error files, as OpenAI's error files have it).

**In.** A request file is scanned once on the driver, line by line (Batch API files
are at most 50,000 requests / 200 MB), and staged as Parquet into the run
directory's ``_input/`` (as a ``--rows``-limited input is), so a resumed run reads
the very same rows and Ray Data's checkpoint skips those already written by
``custom_id``. The scan refuses duplicate ``custom_id``s up front, naming them and
their lines (:class:`CustomIds`, which ``toolkit serve`` checks a batch's file with
too); a line that isn't JSON or lacks a ``custom_id`` is staged as a row with
``request_error`` set (keyed :func:`unnamed_row_id`), which the job writes as an
error row.

**Out.** When the run is complete, :func:`write_batch_output` writes
``<output>/_batch_output.jsonl`` from the result files: one line per request, in
request order, in the Batch API's output format (the line shapes above). The run
directory owns that file (``--overwrite`` replaces it; it is never "someone else's
file").

Both are this format's steps of a run (:class:`OpenAIBatchFormat`, registered for
``data.format: openai-batch``); the run layer calls them through
:mod:`toolkit.run.input.formats` as it does for every format.
"""

from __future__ import annotations

import hashlib
import json
import math
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from toolkit.errors import InputDataError
from toolkit.run.input.formats import RunFormat, register_format
from toolkit.run.output.run_directory import BATCH_OUTPUT_FILE, STAGED_INPUT_DIR, RunDirectory
from toolkit.spec.models import JobSpec
from toolkit.spec.row_contract import ERROR_COLUMN

if TYPE_CHECKING:
    import pyarrow as pa


CHAT_COMPLETIONS_URL = "/v1/chat/completions"

#: Columns of a staged request file, in order. ``custom_id`` is the row id;
#: ``line`` the 1-based line number; ``body`` the request body as compact JSON text
#: (text, so rows with different bodies share one Arrow type).
ID_COLUMN = "custom_id"
LINE_COLUMN = "line"
URL_COLUMN = "url"
BODY_COLUMN = "body"
REQUEST_ERROR_COLUMN = "request_error"
REQUEST_COLUMNS: dict[str, str] = {
    ID_COLUMN: "string", LINE_COLUMN: "int64", URL_COLUMN: "string", BODY_COLUMN: "string",
    REQUEST_ERROR_COLUMN: "string",
}

#: Body fields that become sampling params (vLLM's names on the right).
_SAMPLING_FIELDS = ("max_tokens", "max_completion_tokens", "temperature", "top_p", "seed",
                    "response_format")
#: Body fields that don't change an answer, accepted and not used.
_IGNORED_FIELDS = ("model", "user", "metadata", "store", "service_tier", "stream", "n",
                   "logprobs", "parallel_tool_calls")
_ROLES = {"system": "system", "developer": "system", "user": "user", "assistant": "assistant"}


#: Row ids of lines without a usable custom_id start with this (see the module's doc).
UNNAMED_ID_PREFIX = "\x00line-"


def synthetic_id(line: int) -> str:
    """How a line without a usable ``custom_id`` is named for people: ``line-17``."""
    return f"line-{line}"


def unnamed_row_id(line: int) -> str:
    """The row id of a line without a usable ``custom_id``: ``"\\x00line-17"``, which no
    request's own ``custom_id`` can clash with."""
    return f"{UNNAMED_ID_PREFIX}{line}"


def unnamed_line(row_id: str) -> int | None:
    """The line number in an :func:`unnamed_row_id`, or None for a request's own id."""
    number = row_id[len(UNNAMED_ID_PREFIX):]
    return int(number) if row_id.startswith(UNNAMED_ID_PREFIX) and number.isdigit() else None


def _bad_line(line: int, message: str, custom_id: str | None = None,
              unnamed_id: Callable[[int], str] = synthetic_id) -> dict[str, Any]:
    return {ID_COLUMN: custom_id or unnamed_id(line), LINE_COLUMN: line, URL_COLUMN: None,
            BODY_COLUMN: None, REQUEST_ERROR_COLUMN: f"line {line}: {message}"}


def parse_request_line(text: str, line: int,
                       unnamed_id: Callable[[int], str] = synthetic_id) -> dict[str, Any]:
    """One request line as a row of :data:`REQUEST_COLUMNS`; never raises.

    A line that is not a JSON object, lacks a string ``custom_id``, or is not a POST
    to ``/v1/chat/completions`` with an object ``body`` is a row whose
    ``request_error`` names the line, so it becomes an error row of the output. A
    UTF-8 byte order mark before line 1 is ignored.

    Args:
        unnamed_id: The row id of a line without a usable custom_id of its own:
            ``line-N`` to show one line; where rows are keyed on the id (a staged
            file), :func:`unnamed_row_id`, which can't clash with a request's id.
    """
    if line == 1:
        text = text.removeprefix("\ufeff")
    try:
        request = json.loads(text)
    except ValueError as exc:
        where = f" at column {exc.colno}" if isinstance(exc, json.JSONDecodeError) else ""
        reason = exc.msg if isinstance(exc, json.JSONDecodeError) else str(exc)
        return _bad_line(line, f"not valid JSON ({reason}{where})", unnamed_id=unnamed_id)
    if not isinstance(request, dict):
        return _bad_line(line, f"expected a JSON object, got {type(request).__name__}",
                         unnamed_id=unnamed_id)
    custom_id = request.get("custom_id")
    if not isinstance(custom_id, str) or not custom_id.strip():
        got = "no custom_id" if custom_id is None else f"custom_id {custom_id!r} is not a string"
        return _bad_line(line, f"{got}; every request needs a unique custom_id string",
                         unnamed_id=unnamed_id)
    if custom_id.startswith("\x00"):  # the unnamed rows' own form: refused, so no clash
        return _bad_line(line, "a custom_id starting with a NUL character is not supported; "
                               "every request needs a unique custom_id string",
                         unnamed_id=unnamed_id)
    method = request.get("method", "POST")
    url = request.get("url")
    if str(method).upper() != "POST":
        return _bad_line(line, f"method {method!r} is not supported; only POST", custom_id)
    if url != CHAT_COMPLETIONS_URL:
        return {**_bad_line(line, f"url {url!r} is not supported; only "
                                  f"{CHAT_COMPLETIONS_URL} (chat completions)", custom_id),
                URL_COLUMN: url if isinstance(url, str) else None}
    body = request.get("body")
    if not isinstance(body, dict):
        return _bad_line(line, "body must be a JSON object with model and messages", custom_id)
    return {ID_COLUMN: custom_id, LINE_COLUMN: line, URL_COLUMN: url,
            BODY_COLUMN: json.dumps(body, separators=(",", ":"), ensure_ascii=False),
            REQUEST_ERROR_COLUMN: None}


def _messages(value: Any) -> list[dict[str, str]]:
    if not isinstance(value, list) or not value:
        raise ValueError("body.messages must be a non-empty list of {role, content}")
    messages = []
    for i, message in enumerate(value):
        if not isinstance(message, dict):
            raise ValueError(f"body.messages[{i}] is not an object")
        role = _ROLES.get(str(message.get("role")))
        if role is None:
            raise ValueError(f"body.messages[{i}].role {message.get('role')!r} is not "
                             "supported; use system, developer, user or assistant")
        content = message.get("content")
        if isinstance(content, list):  # content parts: text only
            texts = []
            for part in content:
                if not isinstance(part, dict) or part.get("type") != "text":
                    kind = part.get("type") if isinstance(part, dict) else type(part).__name__
                    raise ValueError(f"body.messages[{i}].content: {kind!r} parts are not "
                                     "supported; only text")
                texts.append(str(part.get("text", "")))
            content = "".join(texts)
        if not isinstance(content, str):
            raise ValueError(f"body.messages[{i}].content must be text")
        messages.append({"role": role, "content": content})
    return messages


def _number(body: dict[str, Any], name: str, low: float, high: float,
            integer: bool = False) -> Any:
    value = body.get(name)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or (
            integer and not float(value).is_integer()) or not math.isfinite(value):
        raise ValueError(f"body.{name} must be {'a whole number' if integer else 'a number'}, "
                         f"not {value!r}")
    if not low <= value <= high:
        raise ValueError(f"body.{name} must be between {low:g} and {high:g}, not {value!r}")
    return int(value) if integer else float(value)


def _structured_outputs(response_format: Any) -> dict[str, str] | None:
    """``response_format`` as vLLM's ``structured_outputs`` (the schema as JSON text)."""
    if response_format is None:
        return None
    if not isinstance(response_format, dict):
        raise ValueError("body.response_format must be an object")
    kind = response_format.get("type")
    if kind == "text":
        return None
    if kind == "json_object":
        return {"json": json.dumps({"type": "object"})}
    if kind == "json_schema":
        schema = (response_format.get("json_schema") or {}).get("schema")
        if not isinstance(schema, dict):
            raise ValueError("body.response_format.json_schema.schema must be a JSON schema "
                             "object")
        return {"json": json.dumps(schema, separators=(",", ":"), ensure_ascii=False)}
    raise ValueError(f"body.response_format.type {kind!r} is not supported; use text, "
                     "json_object or json_schema")


def chat_request(body_text: str) -> tuple[list[dict[str, str]], dict[str, Any]]:
    """A request body as (chat messages, this row's sampling params).

    The params use vLLM's names, as both engines read them, and hold every key
    (``None`` where the body doesn't say, leaving the spec's value):
    ``max_tokens`` (``max_completion_tokens`` wins), ``temperature``, ``top_p``,
    ``seed`` and ``structured_outputs`` (``{"json": schema text}`` from
    ``response_format``). A field that would change answers but that this toolkit
    can't honour (tools, stop, n > 1, ...) is refused by name.

    Raises:
        ValueError: naming the body field that is wrong or unsupported.
    """
    body = json.loads(body_text)
    unknown = sorted(set(body) - {"messages", *_SAMPLING_FIELDS, *_IGNORED_FIELDS})
    if unknown:
        raise ValueError(f"body.{unknown[0]} is not supported by this toolkit"
                         + (f" (nor {', '.join(unknown[1:])})" if unknown[1:] else "")
                         + "; remove it from the request")
    if body.get("stream"):
        raise ValueError("body.stream: true is not supported in a batch; remove it")
    if body.get("n", 1) != 1:
        raise ValueError(f"body.n {body['n']!r}: one answer per request only (n: 1)")
    if body.get("logprobs"):
        raise ValueError("body.logprobs is not supported; remove it")
    messages = _messages(body.get("messages"))
    max_tokens = _number(body, "max_completion_tokens", 1, 1e9, integer=True)
    if max_tokens is None:
        max_tokens = _number(body, "max_tokens", 1, 1e9, integer=True)
    params = {
        "max_tokens": max_tokens,
        "temperature": _number(body, "temperature", 0, 2),
        "top_p": _number(body, "top_p", 1e-9, 1),
        "seed": _number(body, "seed", -(2 ** 63), 2 ** 63 - 1, integer=True),
        "structured_outputs": _structured_outputs(body.get("response_format")),
    }
    return messages, params


def _short_hash(*parts: Any) -> str:
    return hashlib.sha256("\x1f".join(str(p) for p in parts).encode()).hexdigest()[:24]


def batch_output_line(
    custom_id: str,
    content: str | None,
    finish_reason: str | None,
    prompt_tokens: int | None,
    completion_tokens: int | None,
    error: str | None,
    model: str,
    created: int,
    name_unnamed: bool = True,
) -> dict[str, Any]:
    """One line of a Batch API output file for a written row.

    Ids are derived from the row id (and the run's start), so rewriting the
    file gives the same lines. A row with an error has ``response: null`` and
    ``error: {code, message}``; ``code`` is ``invalid_request`` for a request this
    toolkit could not run as given and ``inference_error`` for a failure after it.

    Args:
        custom_id: The row's id: the request's custom_id, or an :func:`unnamed_row_id`.
        name_unnamed: Show a line without a usable custom_id as ``line-N``; else as
            ``null`` (as OpenAI's error files: a made-up name could be a request's).
    """
    line_id = f"batch_req_{_short_hash(custom_id, created)}"
    line = unnamed_line(custom_id)
    shown: str | None = custom_id
    if line is not None:
        shown = synthetic_id(line) if name_unnamed else None
    if error is not None:
        code = "invalid_request" if error.startswith("preprocess:") else "inference_error"
        return {"id": line_id, "custom_id": shown, "response": None,
                "error": {"code": code, "message": error}}
    prompt_tokens = int(prompt_tokens or 0)
    completion_tokens = int(completion_tokens or 0)
    body = {
        "id": f"chatcmpl-{_short_hash('completion', custom_id, created)}",
        "object": "chat.completion",
        "created": created,
        "model": model,
        "choices": [{
            "index": 0,
            "message": {"role": "assistant", "content": content or ""},
            "finish_reason": finish_reason or "stop",
        }],
        "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
                  "total_tokens": prompt_tokens + completion_tokens},
    }
    return {"id": line_id, "custom_id": shown,
            "response": {"status_code": 200, "request_id": _short_hash("request", custom_id,
                                                                      created),
                         "body": body},
            "error": None}


# -- the files of a run ----------------------------------------------------------

OPENAI_BATCH_FORMAT = "openai-batch"
#: Rows per staged file (one Ray Data block each) unless data.partitions says.
ROWS_PER_BLOCK = 256
_SHOWN = 5


def request_lines(source: str) -> Iterator[tuple[int, str]]:
    """(line number, text) of the file's non-blank lines, local or a URI.

    Raises:
        InputDataError: the file is missing or can't be read.
    """
    from toolkit.run.input.reading import _open_binary

    try:
        stream = _open_binary(source if "://" in source else str(Path(source).expanduser()))
    except FileNotFoundError:
        raise InputDataError(f"data.input: {source} does not exist.",
                             hint="Point --input at an OpenAI Batch API request file "
                             "(JSONL).") from None
    except Exception as exc:  # noqa: BLE001 - unreachable URL, permissions, ...
        raise InputDataError(f"data.input: can't read {source}: {exc}",
                             hint="Check the path or URL (and credentials for s3/gs).") from None
    with stream:
        for number, raw in enumerate(stream, start=1):
            text = raw.decode("utf-8", errors="replace") if isinstance(raw, bytes) else raw
            if number == 1:  # a UTF-8 byte order mark (Windows editors) is no part of line 1
                text = text.removeprefix("\ufeff")
            if text.strip():
                yield number, text.rstrip("\r\n")


class CustomIds:
    """The custom_ids of a request file as it is read: the lines each one is on, kept
    for those on more than one. Rows of lines without a usable custom_id (keyed
    :func:`~toolkit.spec.openai_batch.unnamed_row_id`) repeat no one."""

    def __init__(self) -> None:
        self._first_line: dict[str, int] = {}
        #: custom_id -> every line it is on, the first included (ids on 2+ lines only).
        self.repeated: dict[str, list[int]] = {}

    def add(self, row_id: str, line: int) -> None:
        """Note the row id of ``line`` (1-based)."""
        if unnamed_line(row_id) is not None:
            return
        if row_id in self._first_line:
            self.repeated.setdefault(row_id, [self._first_line[row_id]]).append(line)
        else:
            self._first_line[row_id] = line

    def repeats(self) -> list[tuple[str, int, int]]:
        """(custom_id, the line it is first on, a later line with it), in file order."""
        return sorted(((custom_id, lines[0], later) for custom_id, lines in self.repeated.items()
                       for later in lines[1:]), key=lambda repeat: repeat[2])

    def describe(self) -> str:
        """``2 duplicate custom_id(s): 'a' on lines 1, 3, 6; 'b' on lines 2, 5``."""
        shown = "; ".join(f"{shown_custom_id(cid)} on lines {', '.join(map(str, lines))}"
                          for cid, lines in list(self.repeated.items())[:_SHOWN])
        more = f" and {len(self.repeated) - _SHOWN} more" if len(self.repeated) > _SHOWN else ""
        return f"{len(self.repeated)} duplicate custom_id(s): {shown}{more}"


def shown_custom_id(custom_id: str, limit: int = 64) -> str:
    """A custom_id quoted for a message, cut to ``limit`` characters (ids are the
    user's: a 100 kB one must not make a 100 kB message)."""
    if len(custom_id) <= limit:
        return repr(custom_id)
    return repr(custom_id[:limit]) + "..."


def _count_lines(source: str) -> int:
    return sum(1 for _ in request_lines(source))


def stage_requests(spec: JobSpec, run_dir: RunDirectory) -> str:
    """Scan ``data.input`` once into ``<output>/_input`` (Parquet); return its path.

    The first ``data.rows`` requests (non-blank lines) are staged, in blocks of
    ``ceil(requests / data.partitions)`` rows (default 256), so progress and
    retries move a block at a time. A staged copy that is complete is reused.

    Raises:
        InputDataError: the file is missing, unreadable or empty, or two lines share
            a ``custom_id`` (named, with their line numbers; nothing is run).
    """
    import pyarrow as pa
    import pyarrow.parquet as pq

    data = spec.data
    staged = run_dir.staged_input_path
    if run_dir.staged_input_complete():
        return staged
    run_dir.begin_staged_input()  # recorded in the manifest; a copy cut short is cleared
    block = ROWS_PER_BLOCK
    if data.partitions:
        total = min(_count_lines(data.input), data.rows or math.inf)
        block = max(1, math.ceil(total / data.partitions))
    schema = pa.schema([pa.field(name, pa.type_for_alias(alias))
                        for name, alias in REQUEST_COLUMNS.items()])
    ids = CustomIds()
    rows: list[dict[str, object]] = []
    files = 0

    def flush() -> None:
        nonlocal files, rows
        if rows:
            path = f"{run_dir.root}/{STAGED_INPUT_DIR}/part-{files:05d}.parquet"
            with run_dir.fs.open_output_stream(path) as stream:
                pq.write_table(pa.Table.from_pylist(rows, schema=schema), stream)
            files += 1
            rows = []

    run_dir.fs.create_dir(f"{run_dir.root}/{STAGED_INPUT_DIR}", recursive=True)
    count = 0
    for number, text in request_lines(data.input):
        if data.rows is not None and count >= data.rows:
            break
        # Rows are checkpointed by id: a bad line's must not be a request's (line-1).
        row = parse_request_line(text, number, unnamed_id=unnamed_row_id)
        ids.add(str(row[ID_COLUMN]), number)
        rows.append(row)
        count += 1
        if len(rows) >= block:
            flush()
    flush()
    if ids.repeated:
        run_dir.clear_staged_input()
        raise InputDataError(
            f"data.input: {data.input} has {ids.describe()}. Results are keyed on "
            "custom_id, so each must be unique.",
            hint="Give every request its own custom_id, then run again.",
        )
    if count == 0:
        run_dir.clear_staged_input()
        raise InputDataError(f"data.input: {data.input} holds no requests (no non-blank line).",
                             hint="Point --input at an OpenAI Batch API request file (JSONL).")
    run_dir.mark_staged_input_complete()
    return staged



def staged_request_count(run_dir: RunDirectory) -> int | None:
    """Requests staged for the run (from the Parquet footers), or None before staging."""
    import pyarrow.dataset as pads

    if not run_dir.staged_input_complete():
        return None
    try:
        return int(pads.dataset(f"{run_dir.root}/{STAGED_INPUT_DIR}", filesystem=run_dir.fs,
                                format="parquet").count_rows())
    except Exception:  # noqa: BLE001 - unknown is fine: progress shows "?"
        return None


def read_staged_requests(run_dir: RunDirectory) -> "Any":
    """The staged requests as a Ray Dataset with one block per staged file.

    ``read_parquet`` would merge small files into one block, so nothing would be
    written (or checkpointed) until every request was answered; a datasource whose
    read tasks yield a block per file keeps results streaming out block by block.
    """
    import ray.data
    from ray.data.block import BlockMetadata
    from ray.data.datasource import Datasource, ReadTask

    import pyarrow.fs

    selector = pyarrow.fs.FileSelector(f"{run_dir.root}/{STAGED_INPUT_DIR}")
    files = sorted(info.path for info in run_dir.fs.get_file_info(selector)
                   if info.base_name.endswith(".parquet"))
    filesystem = run_dir.fs

    def read(group: list[str]) -> list["pa.Table"]:
        import pyarrow.parquet as pq

        return [pq.read_table(file, filesystem=filesystem) for file in group]

    class StagedRequests(Datasource):
        def get_name(self) -> str:
            return "OpenAIBatchRequests"

        def estimate_inmemory_data_size(self) -> int | None:
            return None

        def get_read_tasks(self, parallelism: int, per_task_row_limit: int | None = None,
                           data_context: Any = None) -> list[ReadTask]:
            tasks = max(1, min(parallelism, len(files)))
            groups = [files[i::tasks] for i in range(tasks)]
            return [ReadTask(lambda group=group: read(group),
                             BlockMetadata(num_rows=None, size_bytes=None, exec_stats=None,
                                           input_files=group),
                             per_task_row_limit=per_task_row_limit)
                    for group in groups if group]

    return ray.data.read_datasource(StagedRequests())


def _rows_in_order(run_dir: RunDirectory, file_format: str,
                   complete_files_only: bool = False) -> "pa.Table":
    import pyarrow as pa
    import pyarrow.dataset as pads

    wanted = [ID_COLUMN, LINE_COLUMN, "content", "finish_reason", "num_input_tokens",
              "num_generated_tokens", ERROR_COLUMN]
    if complete_files_only:
        # A run stopped part-way (Ctrl-C, a kill) can leave a file without its footer.
        tables = []
        for path in run_dir.result_files():
            try:
                dataset = pads.dataset(path, filesystem=run_dir.fs, format=file_format)
                tables.append(dataset.to_table(
                    columns=[c for c in wanted if c in dataset.schema.names]))
            except (OSError, pa.ArrowInvalid):
                continue
        if not tables:
            return pa.table({ID_COLUMN: pa.array([], pa.string())})
        table = pa.concat_tables(tables, promote_options="default")
    else:
        dataset = run_dir.open_results(file_format)
        table = dataset.to_table(columns=[c for c in wanted if c in dataset.schema.names])
    return table.sort_by(LINE_COLUMN) if LINE_COLUMN in table.column_names else table


def batch_output_lines(run_dir: RunDirectory, file_format: str, model: str, created: int,
                       complete_files_only: bool = False,
                       name_unnamed: bool = True) -> Iterator[dict[str, Any]]:
    """The Batch API output lines of the rows written so far, in request order.

    Args:
        complete_files_only: Pass over result files that can't be read (a run that
            was stopped part-way, whose last file has no footer) instead of failing.
        name_unnamed: Show a line without a usable custom_id as ``line-N`` (else
            ``null``): see :func:`~toolkit.spec.openai_batch.batch_output_line`.
    """
    table = _rows_in_order(run_dir, file_format, complete_files_only)
    for batch in table.to_batches(max_chunksize=1024):
        for row in batch.to_pylist():
            yield batch_output_line(
                custom_id=row[ID_COLUMN], content=row.get("content"),
                finish_reason=row.get("finish_reason"),
                prompt_tokens=row.get("num_input_tokens"),
                completion_tokens=row.get("num_generated_tokens"),
                error=row.get(ERROR_COLUMN), model=model, created=created,
                name_unnamed=name_unnamed,
            )


def write_batch_output(run_dir: RunDirectory, spec: JobSpec, clock=time.time) -> str:
    """Write ``_batch_output.jsonl`` from the run's result files; return a note naming it.

    One line per written row (every request: answered or with its error), ordered
    by the request file's line numbers.
    """
    lines = 0
    path = f"{run_dir.root}/{BATCH_OUTPUT_FILE}"
    run_dir.claim(BATCH_OUTPUT_FILE)
    with run_dir.fs.open_output_stream(path) as stream:
        chunk: list[str] = []
        for line in batch_output_lines(run_dir, spec.data.output_format, spec.engine.model,
                                       int(clock())):
            chunk.append(json.dumps(line, ensure_ascii=False))
            if len(chunk) >= 1024:
                stream.write(("\n".join(chunk) + "\n").encode("utf-8"))
                lines += len(chunk)
                chunk = []
        if chunk:
            stream.write(("\n".join(chunk) + "\n").encode("utf-8"))
            lines += len(chunk)
    shown = f"{spec.data.output.rstrip('/')}/{BATCH_OUTPUT_FILE}"
    return (f"Batch API output: {shown} ({lines:,} lines, one per "
            "request, matched by custom_id).")


class OpenAIBatchFormat(RunFormat):
    """An OpenAI Batch API request file in, the Batch API output file out."""

    stages_rows = True

    def stage(self, spec: JobSpec, run_dir: RunDirectory) -> None:
        stage_requests(spec, run_dir)

    def open(self, spec: JobSpec, run_dir: RunDirectory) -> "Any":
        # Scanned and staged once: ids checked, bad lines kept as error rows.
        stage_requests(spec, run_dir)
        return read_staged_requests(run_dir)

    def staged_rows(self, run_dir: RunDirectory) -> int | None:
        return staged_request_count(run_dir)

    def finish(self, spec: JobSpec, run_dir: RunDirectory) -> str | None:
        return write_batch_output(run_dir, spec)


register_format(OPENAI_BATCH_FORMAT, OpenAIBatchFormat())
