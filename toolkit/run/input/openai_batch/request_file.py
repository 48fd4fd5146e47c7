"""A request file as a run reads it: scanned once on the driver, line by line (Batch API
files are at most 50,000 requests / 200 MB), and staged as Parquet into the run
directory's ``_input/`` (as a ``--rows``-limited input is), so a resumed run reads the
very same rows and Ray Data's checkpoint skips those already written by ``custom_id``.

The scan (:func:`scan_requests`, which ``toolkit serve`` validates a batch's file with
too) refuses the file before anything runs, naming the lines, where a line is not a
JSON object with a ``custom_id`` (its answer couldn't be matched to it) or two lines
share one; a file none of whose requests can run is answered with their error lines
alone, without starting Ray.
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from toolkit.errors import InputDataError
from toolkit.run.input.openai_batch.line_shapes import CHAT_COMPLETIONS_URL
from toolkit.run.input.openai_batch.output_file import write_refused_output
from toolkit.run.input.openai_batch.request_rows import (
    ID_COLUMN,
    REQUEST_COLUMNS,
    REQUEST_ERROR_COLUMN,
    UnusableLine,
    parse_request_line,
    text_rows,
)
from toolkit.run.output.run_directory import STAGED_INPUT_DIR, RunDirectory
from toolkit.spec.models import DataConfig

if TYPE_CHECKING:
    import pyarrow as pa

#: Rows per staged file (one Ray Data block each) unless data.partitions says.
ROWS_PER_BLOCK = 256
_SHOWN = 5


def request_lines(source: str) -> Iterator[tuple[int, str]]:
    """(line number, text) of the file's non-blank lines, local or a URI.

    Raises:
        InputDataError: the file is missing or can't be read.
    """
    from toolkit.run.input.file_access import open_binary

    try:
        stream = open_binary(source if "://" in source else str(Path(source).expanduser()))
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



def first_endpoint(source: str | None) -> str | None:
    """The url of the first request in a local request file (the endpoint a file is
    for, as OpenAI's batch names one); None where it can't be told cheaply (no file, a
    URI, no url on the first line)."""
    from toolkit.run.input.openai_batch.request_file import request_lines

    if not source or "://" in source or not Path(source).expanduser().is_file():
        return None
    try:
        for number, text in request_lines(source):
            request = json.loads(text)
            url = request.get("url") if isinstance(request, dict) else None
            return url if isinstance(url, str) else None
    except (ValueError, InputDataError):
        return None
    return None



class CustomIds:
    """The custom_ids of a request file as it is read: the lines each one is on, kept
    for those on more than one."""

    def __init__(self) -> None:
        self._first_line: dict[str, int] = {}
        #: custom_id -> every line it is on, the first included (ids on 2+ lines only).
        self.repeated: dict[str, list[int]] = {}

    def add(self, custom_id: str, line: int) -> None:
        """Note the custom_id of ``line`` (1-based)."""
        if custom_id in self._first_line:
            self.repeated.setdefault(custom_id, [self._first_line[custom_id]]).append(line)
        else:
            self._first_line[custom_id] = line

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


class FileScan:
    """What reading a request file found, as :func:`scan_requests` goes: requests (its
    non-blank lines), the lines that can't be requests, repeated ids, and how many
    requests can run (the rest are error lines)."""

    def __init__(self) -> None:
        self.requests = 0
        self.runnable = 0
        self.unusable: list[UnusableLine] = []
        self.ids = CustomIds()

    def describe_unusable(self) -> str:
        """``line 3: not valid JSON (...); line 7: no custom_id; ...``, five at most."""
        shown = "; ".join(str(line) for line in self.unusable[:_SHOWN])
        more = (f"; and {len(self.unusable) - _SHOWN} more lines"
                if len(self.unusable) > _SHOWN else "")
        return shown + more


def scan_requests(source: str, served: Sequence[str] | None, scan: FileScan,
                  limit: int | None = None,
                  endpoint: str = CHAT_COMPLETIONS_URL) -> Iterator[dict[str, Any]]:
    """The request rows of the file at ``source`` (:func:`parse_request_line`), the first
    ``limit`` requests; what a row can't say (lines that are no request, repeated ids)
    is noted in ``scan``.

    Raises:
        InputDataError: the file is missing or can't be read.
    """
    for number, text in request_lines(source):
        if limit is not None and scan.requests >= limit:
            return
        scan.requests += 1
        try:
            row = parse_request_line(text, number, served, endpoint)
        except UnusableLine as unusable:
            scan.unusable.append(unusable)
            continue
        scan.ids.add(str(row[ID_COLUMN]), number)
        scan.runnable += row[REQUEST_ERROR_COLUMN] is None
        yield from text_rows(row)


def stage_requests(data: DataConfig, run_dir: RunDirectory, *, served: Sequence[str],
                   endpoint: str, clock=time.time) -> str:
    """Scan ``data.input`` once into ``<output>/_input`` (Parquet); return its path.

    Each line is checked against the run's ``endpoint`` (:func:`~.request_rows.run_endpoint`) and
    the model names it ``served`` (:func:`~.request_rows.served_model_names`).

    The first ``data.rows`` requests (non-blank lines) are staged, in blocks of
    ``ceil(requests / data.partitions)`` rows (default 256), so progress and
    retries move a block at a time. A staged copy that is complete is reused.

    Raises:
        InputDataError: the file is missing, unreadable or empty; a line is not a JSON
            object with a custom_id, or two lines share one (named, with their line
            numbers); or no request can run: ``_batch_output.jsonl`` then holds each
            one's error line. In each case nothing is run (Ray never starts).
    """
    import pyarrow as pa
    import pyarrow.parquet as pq

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
    scan = FileScan()
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
    for row in scan_requests(data.input, served, scan, limit=data.rows, endpoint=endpoint):
        rows.append(row)
        if len(rows) >= block and not scan.unusable:  # a file refused needs no more blocks
            flush()
    flush()
    refused = None
    if scan.unusable:
        refused = InputDataError(
            f"data.input: {data.input} has {len(scan.unusable)} line(s) that are not a "
            f"request with a custom_id: {scan.describe_unusable()}. Each line must be a "
            "JSON object with a unique custom_id string, so its answer can be matched to it.",
            hint="Fix those lines (or remove them), then run again.")
    elif scan.ids.repeated:
        refused = InputDataError(
            f"data.input: {data.input} has {scan.ids.describe()}. Results are keyed on "
            "custom_id, so each must be unique.",
            hint="Give every request its own custom_id, then run again.")
    elif scan.requests == 0:
        refused = InputDataError(
            f"data.input: {data.input} holds no requests (no non-blank line).",
            hint="Point --input at an OpenAI Batch API request file (JSONL), one request "
                 "a line.")
    if refused is not None:
        run_dir.clear_staged_input()
        raise refused
    if scan.runnable == 0:
        shown, first = write_refused_output(run_dir, data.output, clock)
        run_dir.clear_staged_input()
        raise InputDataError(
            f"data.input: none of the {scan.requests:,} requests in {data.input} can run "
            f"as given, so no model was loaded; {shown} has each one's error line "
            f"(the first: {first}).",
            hint="Fix the requests their error lines name, then run again.")
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
