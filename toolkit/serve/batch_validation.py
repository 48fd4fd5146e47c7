"""A batch's input file checked as OpenAI's ``validating`` step checks one, before it runs.

Three things fail a whole batch (a request's own faults fail only that request, in the
error file): more requests than :data:`~toolkit.serve.limits.MAX_REQUESTS`, a line that
is not a JSON object with a ``custom_id`` (its answer couldn't be matched to it), and a
``custom_id`` used twice (results are matched to requests by it, and a run resumes by
it). Each is an error of its own naming its line, as OpenAI lists them. The checks are
the run's own (:func:`~toolkit.run.input.openai_batch.scan_requests`), so a batch that
passes here is never refused by its run; the scan also counts the requests that can
run, and a batch with none never starts one: its error file is all it has.

The file is read once, a line at a time, on the API's thread that creates the batch
(its request count is the batch's ``total``); the batch is created ``validating`` and
the supervisor fails it with these errors before any run starts.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from pydantic import BaseModel

from toolkit.run.input.openai_batch import (
    CHAT_COMPLETIONS_URL,
    FileScan,
    request_lines,
    scan_requests,
    shown_custom_id,
)
from toolkit.serve.limits import MAX_REQUESTS
from toolkit.serve.openai_objects import BatchError

#: Errors of one kind listed one by one at most: a file of 50,000 copies of one line
#: must not make a batch object of 50,000 errors (the last error counts the rest).
MAX_LISTED_REPEATS = 100


class InputCheck(BaseModel):
    requests: int
    #: Requests that can run as given (the others are error lines from the start).
    runnable: int
    errors: list[BatchError]


def check_input_file(path: Path, served: Sequence[str] | None = None,
                     endpoint: str = CHAT_COMPLETIONS_URL) -> InputCheck:
    """The requests in the file at ``path`` and why it can't be run (no errors: it can).

    Args:
        served: The model names a line may ask for (see
            :func:`~toolkit.run.input.openai_batch.parse_request_line`).

    Raises:
        InputDataError: the file can't be read (it was deleted meanwhile).
    """
    scan = FileScan()
    for _ in scan_requests(str(path), served, scan, limit=MAX_REQUESTS, endpoint=endpoint):
        pass
    requests = scan.requests
    if requests >= MAX_REQUESTS:  # past the limit the batch fails anyway: only count
        requests = sum(1 for _ in request_lines(str(path)))
    errors: list[BatchError] = []
    if requests > MAX_REQUESTS:
        errors.append(BatchError(
            code="request_limit_exceeded", param="input_file_id",
            message=f"The input file has {requests:,} requests; a batch takes at most "
                    f"{MAX_REQUESTS:,} (the Batch API's limit). Split the requests into files "
                    f"of at most {MAX_REQUESTS:,} lines, one batch each."))
    for unusable in scan.unusable[:MAX_LISTED_REPEATS]:
        errors.append(BatchError(
            code=unusable.code, param=unusable.param, line=unusable.line,
            message=f"Line {unusable.line}: {unusable.reason}. Each line must be a JSON "
                    "object with a unique custom_id string, so its answer can be matched "
                    "to it."))
    if len(scan.unusable) > MAX_LISTED_REPEATS:
        errors.append(BatchError(
            code="invalid_json_line",
            message=f"And {len(scan.unusable) - MAX_LISTED_REPEATS:,} more lines are not a "
                    f"request with a custom_id (the first {MAX_LISTED_REPEATS} are listed)."))
    repeats = scan.ids.repeats()
    for custom_id, first, line in repeats[:MAX_LISTED_REPEATS]:
        errors.append(BatchError(
            code="duplicate_custom_id", param="custom_id", line=line,
            message=f"Duplicate custom_id {shown_custom_id(custom_id)}: line {line} repeats "
                    f"line {first}. Results are matched to requests by custom_id, so each "
                    "must be unique. Hint: Give every request its own custom_id, then create "
                    "the batch again."))
    if len(repeats) > MAX_LISTED_REPEATS:
        errors.append(BatchError(
            code="duplicate_custom_id", param="custom_id",
            message=f"And {len(repeats) - MAX_LISTED_REPEATS:,} more lines repeat a custom_id "
                    f"(the first {MAX_LISTED_REPEATS} are listed)."))
    return InputCheck(requests=requests, runnable=scan.runnable, errors=errors)

