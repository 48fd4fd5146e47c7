"""A batch's input file checked as OpenAI's ``validating`` step checks one, before it runs.

Two things fail a whole batch (a request's own faults fail only that request, in the
error file): more requests than :data:`~toolkit.serve.limits.MAX_REQUESTS`, and a
``custom_id`` used twice (results are matched to requests by it, and a run resumes by
it). Each repeat is an error of its own naming its line, as OpenAI lists them. The
checks are the run's own (:class:`~toolkit.run.input.openai_batch.CustomIds`), so a batch
that passes here is never refused by its run.

The file is read once, a line at a time, on the API's thread that creates the batch
(its request count is the batch's ``total``); the batch is created ``validating`` and
the supervisor fails it with these errors before any run starts.
"""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel

from toolkit.run.input.openai_batch import (
    ID_COLUMN,
    CustomIds,
    parse_request_line,
    request_lines,
    shown_custom_id,
    unnamed_row_id,
)
from toolkit.serve.limits import MAX_REQUESTS
from toolkit.serve.openai_objects import BatchError

#: Duplicate custom_ids listed one by one at most: a file of 50,000 copies of one line
#: must not make a batch object of 50,000 errors (the last error counts the rest).
MAX_LISTED_REPEATS = 100


class InputCheck(BaseModel):
    requests: int
    errors: list[BatchError]


def check_input_file(path: Path) -> InputCheck:
    """The requests in the file at ``path`` and why it can't be run (no errors: it can).

    Raises:
        InputDataError: the file can't be read (it was deleted meanwhile).
    """
    ids = CustomIds()
    requests = 0
    for number, text in request_lines(str(path)):
        requests += 1
        if requests <= MAX_REQUESTS:  # past the limit the batch fails anyway: only count
            ids.add(str(parse_request_line(text, number, unnamed_id=unnamed_row_id)[ID_COLUMN]),
                    number)
    errors: list[BatchError] = []
    if requests > MAX_REQUESTS:
        errors.append(BatchError(
            code="request_limit_exceeded", param="input_file_id",
            message=f"The input file has {requests:,} requests; a batch takes at most "
                    f"{MAX_REQUESTS:,} (the Batch API's limit). Split the requests into files "
                    f"of at most {MAX_REQUESTS:,} lines, one batch each."))
    repeats = ids.repeats()
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
    return InputCheck(requests=requests, errors=errors)
