"""The batch-api engine's stage: each batch of rows Ray Data hands a task goes to the
provider as request files, and comes back when the provider's batches end.

One ``map_batches`` over the rows, on Ray tasks (``engine.concurrency`` at once, each
holding ``engine.num_cpus``, mostly waiting): a task's ``engine.batch_size`` rows are
cut into files of ``engine.requests_per_file`` lines and ``engine.bytes_per_file``
bytes, each uploaded and made a batch, all of them polled together with backoff, and
their output and error lines returned as the rows' columns. So the rows of a task are
written only once every batch of theirs has ended: progress moves a task's rows at a
time, not a row at a time.

Resumable: each provider batch is a record in the run folder
(:class:`toolkit.engines.EngineRecords`: its file id, batch id and the ``custom_id``
of every line, written as each is made and before the batch is created), so a rerun
of a killed driver finds its rows' batches and polls them instead of creating new
ones, whichever way Ray Data batches the rows this time. A batch that expired or was
cancelled keeps its finished lines; the rest are sent again (up to
:data:`MAX_SENDS` times a row); a batch the provider failed (its file refused) makes
its rows error rows with the provider's reason.
"""

from __future__ import annotations

import time
import uuid
from typing import TYPE_CHECKING, Any

from toolkit.engines.batch_api.answers import (
    ANSWER_COLUMNS,
    error_answer,
    line_answer,
    read_lines,
)
from toolkit.engines.batch_api.batch_client import CUT_SHORT, WINDOW_GRACE_S, BatchProvider
from toolkit.engines.batch_api.request_files import (
    endpoint,
    request_line,
    split_files,
    too_large,
)
from toolkit.spec.row_contract import (
    ERROR_COLUMN,
    FINISH_REASON_COLUMN,
    GENERATED_LOGPROB_COLUMN,
    GENERATED_TEXT_COLUMN,
    RAY_LLM_ERROR_COLUMN,
    row_error,
)

if TYPE_CHECKING:
    import pyarrow as pa
    from ray.data import Dataset

    from toolkit.engines import EngineRecords, StageInputs
    from toolkit.engines.batch_api.settings import BatchApiSettings

#: Times a row goes to the provider in a batch that then expired or was cancelled
#: before it is an error row saying so.
MAX_SENDS = 3
#: The batch's metadata key naming its record in the run folder.
RECORD_METADATA_KEY = "toolkit_record"
_TYPES = {GENERATED_TEXT_COLUMN: "string", "num_input_tokens": "int64",
          "num_generated_tokens": "int64", FINISH_REASON_COLUMN: "string",
          GENERATED_LOGPROB_COLUMN: "double", ERROR_COLUMN: "string",
          RAY_LLM_ERROR_COLUMN: "string"}


def apply_batch_api_engine(ds: "Dataset", engine: "BatchApiSettings",
                           stage: "StageInputs") -> "Dataset":
    """``ds`` through the provider's Batch API (on the driver: the run folder's
    manifest claims the records first)."""
    if stage.records is None or stage.id_column is None:
        raise ValueError("the batch-api engine keeps its batches' ids in the run folder "
                         "by row id; it runs inside a run only")
    stage.records.claim()
    return ds.map_batches(answer_rows, fn_kwargs={
        "engine": engine, "id_column": stage.id_column, "records": stage.records,
    }, batch_size=engine.batch_size, batch_format="pyarrow", num_cpus=engine.num_cpus,
        concurrency=engine.concurrency)


def answer_rows(table: "pa.Table", engine: "BatchApiSettings", id_column: str,
                records: "EngineRecords") -> "pa.Table":
    """A batch of prepared rows with the provider's answers (a row that failed
    before passes through untouched and sends nothing)."""
    import pyarrow as pa

    answers: list[dict[str, Any] | None] = [None] * table.num_rows
    lines: dict[str, bytes] = {}
    where: dict[str, int] = {}
    for i, row in enumerate(table.to_pylist()):
        failed = row_error(row.get(ERROR_COLUMN)) or row_error(row.get(RAY_LLM_ERROR_COLUMN))
        if failed:
            answers[i] = error_answer(failed)
            continue
        custom_id = str(row[id_column])
        try:
            line = request_line(custom_id, row, engine.model, engine.structured_outputs_via,
                                engine.apply_chat_template)
        except ValueError as exc:
            answers[i] = error_answer(f"engine: {exc}")
            continue
        refused = too_large(line, engine.bytes_per_file)
        if refused:
            answers[i] = error_answer(refused)
            continue
        lines[custom_id], where[custom_id] = line, i
    if lines:
        for custom_id, answer in ProviderBatches(engine, records).answer(lines).items():
            answers[where[custom_id]] = answer
    done = [answer or error_answer("engine: the provider gave no answer") for answer in answers]
    for column in ANSWER_COLUMNS:
        values = pa.array([answer[column] for answer in done],
                          type=pa.type_for_alias(_TYPES[column]))
        if column in table.column_names:
            table = table.set_column(table.column_names.index(column), column, values)
        else:
            table = table.append_column(column, values)
    return table


class ProviderBatches:
    """The provider's batches of one task's rows: found in the records, or made."""

    def __init__(self, engine: "BatchApiSettings", records: "EngineRecords",
                 provider: BatchProvider | None = None) -> None:
        assert engine.base_url is not None
        self.engine, self.records = engine, records
        self.provider = provider or BatchProvider(engine.base_url, engine.api_key_env)
        self.endpoint = endpoint(engine.apply_chat_template)

    def answer(self, lines: dict[str, bytes]) -> dict[str, dict[str, Any]]:
        """Every line's answer (or error) by ``custom_id``, waiting for the batches:
        those recorded for these rows first (a rerun's), then new ones for the rows
        no batch answered."""
        answers: dict[str, dict[str, Any]] = {}
        while True:
            mine = self._recorded(set(lines) - set(answers))
            live = [(name, self._created(name, record)) for name, record in mine]
            ended = self.provider.wait(
                [record["batch_id"] for _, record in live], self.engine.poll_interval_s,
                self.engine.max_poll_interval_s, self.engine.window_s + WINDOW_GRACE_S)
            for name, record in live:
                self._read(name, record, ended[record["batch_id"]], set(lines), answers)
            unanswered = [custom_id for custom_id in lines if custom_id not in answers]
            if not unanswered:
                return answers
            # What a cut-short batch left: its rows are covered by no batch now.
            sent = self._recorded(set(unanswered))
            resend = []
            for custom_id in unanswered:
                spent = [record for _, record in sent if custom_id in record["ids"]]
                if len(spent) >= MAX_SENDS:
                    answers[custom_id] = error_answer(
                        f"engine: the provider's batches {spent[-1]['batch_id']} and "
                        f"{len(spent) - 1} before it {spent[-1]['spent']} before answering "
                        "this row")
                else:
                    resend.append((custom_id, lines[custom_id]))
            for file_lines in split_files(resend, self.engine.requests_per_file,
                                          self.engine.bytes_per_file):
                self._upload(file_lines)

    def _recorded(self, wanted: set[str]) -> list[tuple[str, dict[str, Any]]]:
        """The records of batches holding any of ``wanted``, oldest first."""
        return sorted(((name, record) for name, record in self.records.read_all().items()
                       if wanted.intersection(record.get("ids", ()))),
                      key=lambda item: item[1].get("created", 0))

    def _upload(self, file_lines: list[tuple[str, bytes]]) -> None:
        """A request file uploaded and recorded (the batch is made next)."""
        name = uuid.uuid4().hex[:16]
        file_id = self.provider.upload(f"toolkit-{name}.jsonl",
                                       b"".join(line for _, line in file_lines))
        record = {"file_id": file_id, "batch_id": None, "endpoint": self.endpoint,
                  "ids": [custom_id for custom_id, _ in file_lines], "created": time.time()}
        self.records.write(name, record)

    def _created(self, name: str, record: dict[str, Any]) -> dict[str, Any]:
        """The record with its batch: made now, unless a driver killed after making it
        and before recording it made one of the same file."""
        if record.get("batch_id"):
            return record
        batch = self.provider.batch_of(record["file_id"]) or self.provider.create(
            record["file_id"], record.get("endpoint", self.endpoint),
            self.engine.completion_window, {RECORD_METADATA_KEY: name})
        record = {**record, "batch_id": batch["id"]}
        self.records.write(name, record)
        return record

    def _read(self, name: str, record: dict[str, Any], batch: dict[str, Any],
              wanted: set[str], answers: dict[str, dict[str, Any]]) -> None:
        """The answers an ended batch gives the rows still ``wanted`` (a cut-short
        batch's others are sent again; a failed one's are error rows)."""
        got = {**read_lines(self.provider.content(batch.get("error_file_id"))),
               **read_lines(self.provider.content(batch.get("output_file_id")))}
        # Once seen cut short, a batch stays so (its record says so on a rerun).
        status = record.get("spent") or batch["status"]
        for custom_id in record["ids"]:
            if custom_id not in wanted or custom_id in answers:
                continue
            if custom_id in got:
                answers[custom_id] = line_answer(got[custom_id])
            elif status == "failed":
                reasons = "; ".join(error.get("message", "") for error in
                                    ((batch.get("errors") or {}).get("data") or []))
                answers[custom_id] = error_answer(
                    f"provider error: batch {batch['id']} failed: {reasons or 'no reason given'}")
            elif status == "completed":
                answers[custom_id] = error_answer(
                    f"provider error: batch {batch['id']} completed without a line for "
                    "this row")
        if status in CUT_SHORT and not record.get("spent"):
            self.records.write(name, {**record, "spent": status})
