"""Which batch runs when: a queue of batches, their child runs, their ends.

This is bookkeeping, not scheduling: Ray schedules the work inside each run; the
supervisor only starts the next queued batch when fewer than ``max_running`` runs
are going (each run is a ``toolkit run``, see :mod:`.batch_runs`), keeps each
batch's request counts current from its run directory, passes a cancel on as
Ctrl-C, and, when a run ends, turns what it wrote into the batch's files
(:mod:`.batch_files`). A batch whose input file fails validation
(:mod:`.batch_validation`) never runs: it fails with the errors naming its lines; nor
does one none of whose requests can run: it completes with its error file alone.
Everything it knows is in the store, so :meth:`recover` picks up after a server that
was killed: a run it left is ended and started again (it resumes by ``custom_id``), a
cancel or a finish it didn't complete is completed.
"""

from __future__ import annotations

import subprocess
import sys
import threading
import time
import traceback
from collections.abc import Callable
from typing import Literal

from toolkit.errors import InputDataError
from toolkit.run.progress.sources import OutputRows
from toolkit.serve import batch_runs
from toolkit.serve.api_errors import BadRequest, Conflict, NotFound, shown_id
from toolkit.serve.batch_files import live_counts, write_batch_files, write_refused_files
from toolkit.serve.batch_validation import check_input_file
from toolkit.serve.limits import check_metadata
from toolkit.serve.openai_objects import (
    TERMINAL_STATUSES,
    Batch,
    BatchError,
    BatchErrors,
    RequestCounts,
)
from toolkit.serve.server_paths import without_server_paths
from toolkit.serve.store import BATCH_PREFIX, FILE_PREFIX, RunRecord, Store, is_issued_id, new_id

COMPLETION_WINDOW = "24h"
#: How long a cancelled run has to stop after Ctrl-C before its group is killed.
INTERRUPT_GRACE_S = 60.0


class Supervisor:
    """Starts, watches, cancels and finishes batch runs; shares the store with the API."""

    def __init__(self, store: Store, flags: batch_runs.RunFlags,
                 served: dict[str, list[str] | str],
                 max_running: int = 1, clock: Callable[[], float] = time.time) -> None:
        """``served``: for each endpoint, the names a request's ``body.model`` may give,
        the batches' model first (see :func:`~toolkit.serve.server.served_names`), or
        why this server can't answer that endpoint."""
        self.store, self.flags, self.served = store, flags, served
        self.max_running = max_running
        self.clock = clock
        self._children: dict[str, subprocess.Popen[bytes]] = {}
        self._rows: dict[str, OutputRows] = {}
        # The API's threads (create, cancel) and the watching thread change batches.
        self._lock = threading.RLock()

    def _now(self) -> int:
        return int(self.clock())

    # -- called by the API -----------------------------------------------------------------

    def create(self, input_file_id: str, endpoint: str, completion_window: str,
               metadata: dict[str, str] | None) -> Batch:
        """Queue a batch of the requests in ``input_file_id``, ``validating``: the file is
        read here (its requests are the batch's total), and a file that can't be run
        (:func:`~toolkit.serve.batch_validation.check_input_file`) fails the batch on
        the watching thread's next round, with errors naming its lines, as OpenAI's.

        Raises:
            BadRequest: another endpoint or window, ``metadata`` over OpenAI's limits,
                an unknown or non-batch file (deleted meanwhile included), or one with
                no requests.
        """
        served = self.served.get(endpoint)
        if served is None:
            raise BadRequest(f"endpoint '{endpoint}' is not supported here; only "
                             f"{', '.join(self.served)}.", code="invalid_value",
                             param="endpoint")
        if isinstance(served, str):
            raise BadRequest(f"endpoint '{endpoint}' can't be answered with this server's "
                             f"model and engine: {served}", code="invalid_value",
                             param="endpoint")
        if completion_window != COMPLETION_WINDOW:
            raise BadRequest(f"completion_window must be '{COMPLETION_WINDOW}'.",
                             code="invalid_value", param="completion_window")
        check_metadata(metadata)
        no_file = BadRequest(f"No file with id '{shown_id(input_file_id)}' exists.",
                             code="invalid_value", param="input_file_id")
        file = self.store.get_file(input_file_id) \
            if is_issued_id(FILE_PREFIX, input_file_id) else None
        if file is None:
            raise no_file
        if file.purpose != "batch":
            raise BadRequest(f"File '{input_file_id}' has purpose '{file.purpose}'; a batch "
                             "needs a file uploaded with purpose 'batch'.",
                             code="invalid_value", param="input_file_id")
        try:
            check = check_input_file(self.store.file_path(input_file_id), served, endpoint)
        except InputDataError:  # deleted since get_file; its message names the store's path
            raise no_file from None
        if check.requests == 0:
            raise BadRequest(f"File '{input_file_id}' holds no requests (no non-blank line).",
                             code="empty_file", param="input_file_id")
        now = self._now()
        # expires_at stays null: a batch here runs until it finishes, it never expires.
        batch = Batch(id=new_id(BATCH_PREFIX), endpoint=endpoint, input_file_id=input_file_id,
                      completion_window=completion_window, status="validating",
                      created_at=now, model=served[0],
                      request_counts=RequestCounts(total=check.requests), metadata=metadata)
        run = RunRecord(rejected=check.errors,
                        nothing_to_run=not check.errors and check.runnable == 0)
        with self._lock:
            # False if the file was deleted while it was read: checked with the insert,
            # so the batch never starts without its input.
            if not self.store.add_batch(batch, run):
                raise no_file
        return batch

    def cancel(self, batch_id: str) -> Batch:
        """Ask a batch to stop: it is ``cancelling`` until the watching thread has ended
        it (``cancelled``, keeping what its run finished; ``completed`` if every request
        had been answered by then).

        Raises:
            NotFound: no such batch.
            Conflict: it has already completed, failed or expired.
        """
        with self._lock:
            found = self.store.get_batch_and_run(batch_id) \
                if is_issued_id(BATCH_PREFIX, batch_id) else None
            if found is None:
                raise NotFound("batch", batch_id)
            batch, run = found
            if batch.status in ("cancelling", "cancelled"):
                return batch
            if batch.status in TERMINAL_STATUSES:
                raise Conflict(f"Batch '{batch_id}' is {batch.status}; it can't be cancelled.",
                               code="batch_not_cancellable")
            batch.status, batch.cancelling_at = "cancelling", self._now()
            self.store.save_batch(batch)
            return batch

    # -- the watching thread ---------------------------------------------------------------

    def recover(self) -> None:
        """After a restart: end runs a killed server left, then requeue or finish them."""
        with self._lock:
            for batch, run in self.store.batches_to_watch():
                # Queued ones too: a server killed as it started a run hadn't recorded it.
                batch_runs.end_leftovers(self.store.run_dir(batch.id))
                if run.state != "running":
                    continue
                if batch.status == "cancelling":
                    self._finish(batch, run, "cancelled")
                elif run.ending is not None:  # killed while finalizing: finish as decided
                    self._finish(batch, run, run.ending, run.failure)
                else:  # it runs again and resumes by custom_id
                    self.store.save_batch(batch, RunRecord(state="queued"))

    def run_until(self, stop: threading.Event, interval_s: float = 0.5) -> None:
        """Watch until ``stop`` is set (the server's lifetime), then stop the runs."""
        while not stop.wait(interval_s):
            try:
                self.tick()
            except Exception:  # noqa: BLE001 - one bad round must not stop the watching
                traceback.print_exc(file=sys.stderr)
        self.stop_runs()

    def tick(self) -> None:
        """One round: finish runs that ended, update counts, pass cancels on, fail batches
        whose file failed validation, start runs."""
        with self._lock:
            running = 0
            for batch, run in self.store.batches_to_watch():
                if run.state == "running":
                    running += self._watch(batch, run)
                elif batch.status in ("cancelling", "cancelled"):
                    self._finish(batch, run, "cancelled")
                elif run.rejected:
                    self._finish(batch, run, "failed")
                elif run.nothing_to_run:
                    self._finish(batch, run, "completed")
            for batch, run in self.store.batches_to_watch():
                if run.state == "queued" and running < self.max_running:
                    self._start(batch)
                    running += 1

    def _watch(self, batch: Batch, run: RunRecord) -> int:
        """1 while the run goes on, 0 once it has ended (and the batch is finished)."""
        child = self._children.get(batch.id)
        exit_code = child.poll() if child is not None else -1  # gone: a leftover, ended
        if exit_code is not None:
            self._children.pop(batch.id, None)
            run.exit_code = exit_code
            if batch.status == "cancelling":
                self._finish(batch, run, "cancelled")
            elif exit_code == 0:
                self._finish(batch, run, "completed")
            else:
                message = batch_runs.failure_message(self.store.batch_dir(batch.id) / "run.log",
                                                     exit_code)
                self._finish(batch, run, "failed", without_server_paths(message, {
                    str(self.store.file_path(batch.input_file_id)): batch.input_file_id}))
            return 0
        rows = self._rows.setdefault(batch.id, OutputRows(str(self.store.run_dir(batch.id))))
        counts = live_counts(rows, batch.request_counts.total)
        if counts != batch.request_counts:
            batch.request_counts = counts
            self.store.save_batch(batch)
        # Every request answered: the run is only writing its files, so it completes.
        answered = counts.completed + counts.failed >= counts.total
        if batch.status == "cancelling" and not answered:
            now = self.clock()
            if run.interrupted_at is None:
                batch_runs.interrupt(child.pid)
                run.interrupted_at = now
                self.store.save_batch(batch, run)
            elif now - run.interrupted_at > INTERRUPT_GRACE_S:
                batch_runs.kill(child.pid)
        return 1

    def _served(self, endpoint: str) -> list[str] | None:
        served = self.served.get(endpoint)
        return served if isinstance(served, list) else None

    def _start(self, batch: Batch) -> None:
        batch_dir = self.store.batch_dir(batch.id)
        child = batch_runs.start_run(self.store.file_path(batch.input_file_id),
                                     self.store.run_dir(batch.id), batch_dir / "run.log",
                                     self.flags, batch.request_counts.total, batch.endpoint)
        self._children[batch.id] = child
        batch.status = "in_progress"
        batch.in_progress_at = batch.in_progress_at or self._now()
        self.store.save_batch(batch, RunRecord(state="running", pid=child.pid))

    def _finish(self, batch: Batch, run: RunRecord,
                status: Literal["completed", "failed", "cancelled"],
                failure: str | None = None) -> Batch:
        """The run is over (or never started): its rows become the batch's files, then
        the final status; a failed batch's errors are its validation's (``run.rejected``)
        or else ``failure``, why its run failed.

        While the files are written a cancelled batch stays ``cancelling`` (as OpenAI's
        do: ``finalizing`` means results of a batch that ran to its end). A cancelled
        batch whose every request was answered completes: its results are whole.
        """
        if status != "cancelled" and not run.rejected:  # a rejected batch has no results
            batch.status, batch.finalizing_at = "finalizing", self._now()
        run = run.model_copy(update={"ending": status, "failure": failure})
        self.store.save_batch(batch, run)
        total = batch.request_counts.total
        if run.nothing_to_run:
            results = write_refused_files(self.store, batch.id,
                                          self.store.file_path(batch.input_file_id),
                                          self._served(batch.endpoint), total,
                                          batch.endpoint)
        else:
            results = write_batch_files(self.store, batch.id, total)
        counts = results.request_counts
        if status == "cancelled" and total and counts.completed + counts.failed >= total:
            status = "completed"
            batch.finalizing_at = batch.finalizing_at or self._now()
        batch.output_file_id = results.output_file.id if results.output_file else None
        batch.error_file_id = results.error_file.id if results.error_file else None
        batch.request_counts, batch.usage = results.request_counts, results.usage
        batch.status = status  # type: ignore[assignment]
        setattr(batch, f"{status}_at", self._now())
        if status == "failed" and run.rejected:
            batch.errors = BatchErrors(data=run.rejected)
        elif failure:
            batch.errors = BatchErrors(data=[BatchError(code="run_failed", message=failure)])
        self._rows.pop(batch.id, None)
        self.store.save_batch(batch, run.model_copy(update={"state": "done"}))
        return batch

    def stop_runs(self, grace_s: float = 30.0) -> None:
        """The server stops: interrupt every run and wait for them (a restart resumes them)."""
        with self._lock:
            for child in self._children.values():
                batch_runs.interrupt(child.pid)
            deadline = time.monotonic() + grace_s
            for child in self._children.values():
                try:
                    child.wait(timeout=max(0.1, deadline - time.monotonic()))
                except subprocess.TimeoutExpired:
                    batch_runs.kill(child.pid)
                    child.wait(timeout=10)
            self._children.clear()

