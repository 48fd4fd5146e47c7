"""The Ray Data pipeline every job shares.

read (a file, a staged --rows slice, or generated samples) -> preprocess -> engine
-> postprocess -> write, with Ray Data checkpointing so a rerun resumes.

Everything streams: Ray Data reads, infers and writes blocks concurrently and the
results go to files as they are produced, so memory stays flat as rows grow. Every
row read is written exactly once, with its result or with an ``error``; the run
ends with a summary computed from what was actually written.

Here the dataset is built (:func:`build_dataset`: the input, then the plan's stage
chain, :mod:`toolkit.run.stage_steps`) and run (:func:`run_planned`); the functions its
tasks call on the workers are :mod:`toolkit.run.row_steps`', and the driver that joins
Ray and calls :func:`run_planned` is :mod:`toolkit.run.driver`.
"""

from __future__ import annotations

import contextlib
import os
import time
from typing import TYPE_CHECKING, Any, Callable

from toolkit.redaction import redact
from toolkit.run.input.checks import check_id_type, check_written_columns
from toolkit.run.input.csv_files import csv_delimiter
from toolkit.run.input.formats import run_format
from toolkit.run.input.identity import file_changes, input_identity
from toolkit.run.input.reading import check_required_columns
from toolkit.run.input.source import RunSource, checkpoint_config, checkpointing, open_run_source
from toolkit.run.output.report import write_report
from toolkit.run.output.run_directory import RunDirectory, RunState
from toolkit.run.output.summary import (
    MetricsPlace,
    RunSummary,
    attempt_summaries,
    read_summary,
    summarize_output,
)
from toolkit.run.progress.sources import WrittenRows
from toolkit.run.ray.cluster_fit import watching_resources
from toolkit.run.row_steps import ship_job_code_by_value
from toolkit.run.run_plan import RunPlan
from toolkit.run.run_stop import StopOutcome, stopping_when
from toolkit.run.stage_steps import apply_steps, plan_steps, write_resources
from toolkit.run.stop_loss import STOP_LOSS_INTERVAL_S, StopLossWatch
from toolkit.spec.row_contract import ERROR_COLUMN

if TYPE_CHECKING:
    import pyarrow as pa
    from ray.data import Dataset


def build_dataset(plan: RunPlan) -> tuple["Dataset", RunSource]:
    """The lazy pipeline of ``plan``: checked against the input, not yet executed.

    Raises:
        InputDataError: the input is unreadable or lacks a required column (this
            happens before any model loads).
    """
    data = plan.data
    seen: dict[str, "pa.Schema"] = {}

    def check(schema: "pa.Schema") -> None:
        check_required_columns(schema, plan.required_columns, data.input,
                               id_column=data.id_column, delimiter=csv_delimiter(data))
        check_id_type(schema.field(data.id_column).type, data.id_column, data.input,
                      schema.names)
        check_written_columns(plan.job, plan.spec, schema.names)
        seen["schema"] = schema

    source = open_run_source(plan, check_schema=check)
    return apply_steps(source.dataset, plan_steps(plan, seen["schema"])), source


def completed_summary(plan: RunPlan, log_file: str | None) -> RunSummary | None:
    """A finished run's summary, as a rerun of it answers (nothing is run: its time
    and rate stay the run's own); None where the folder has none."""
    done = read_summary(plan.data.output)
    if done is None:
        return None
    return done.model_copy(update={
        "rows_this_run": 0, "log_file": log_file,
        "notes": ["Already complete: the same spec finished here earlier, so "
                  "nothing was run. Use --overwrite to run it again."],
    })


def run_planned(
    plan: RunPlan,
    *,
    log_file: str | None = None,
    on_notice: Callable[[str], None] | None = None,
    on_phase: Callable[[str], None] | None = None,
    started: float | None = None,
    check_tokens: bool = False,
    dashboard_url: str | None = None,
) -> RunSummary:
    """Run a checked plan (:func:`~toolkit.run.preflight.preflight`) on the connected
    Ray cluster; the written-output summary. The caller releases the plan.

    Args:
        log_file: Where the caller sent Ray's output, recorded in the summary.
        on_notice: Told (from a background thread) when Ray can't place a stage's
            workers: waiting for a node, or for resources no node has.
        on_phase: Told what the run does before its first row: ``reading the
            input``, then ``loading the model`` (shown on the progress line).
        started: When the run began (``time.monotonic()``), for its duration.
        check_tokens: First count every row's prompt tokens
            (:mod:`toolkit.run.prompt_tokens`) and refuse the run if any row is
            longer than the model takes.
        dashboard_url: The Ray Dashboard of a cluster that outlives the run: the
            summary says where the run's metrics are (none for a Ray started here).

    Raises:
        InputDataError: bad input, found before any model loads; with
            ``check_tokens``, rows over ``max_model_len``.
        ResourcesUnavailableError: a stage's workers waited
            ``compute.resource_wait_s`` for resources no node has (exit 3); the
            rows written so far stay, and a rerun resumes.
        StopLossError: more than ``stop_loss.failure_rate`` of the rows written
            failed (exit 8), seen while the run went (it stops early) or when it
            ended; the rows written stay, and no summary is written.
    """
    started = time.monotonic() if started is None else started
    job, spec, run_dir, state = plan.job, plan.spec, plan.run_dir, plan.state
    data = plan.data
    if state is RunState.COMPLETE:
        done = completed_summary(plan, log_file)
        if done is not None:
            return done
    rows_before = run_dir.checkpointed_rows() if state is RunState.PARTIAL else 0
    phase = on_phase or (lambda _: None)
    if check_tokens:  # before any model stage is built: no engine starts for a refused run
        from toolkit.run.prompt_tokens import CountedRun, check_prompt_tokens, count_prompt_tokens

        phase("counting prompt tokens")
        check_prompt_tokens(count_prompt_tokens(CountedRun.of_plan(plan)))
    ship_job_code_by_value(job)
    # Datasets copy Ray Data's context when they are created, so checkpointing is
    # switched on before the pipeline is built, not just before it runs.
    config = checkpoint_config(run_dir, data.id_column) if plan.resumable else None
    with checkpointing(config):
        phase("reading the input")
        ds, source = build_dataset(plan)
        write_id = run_dir.begin_write()
        # The Ray Dashboard's Data view lists the run by the job's name, and the write id
        # ties it to its files (part-<write id>_...) and manifest.
        ds.set_name(f"{spec.job}-{write_id}")
        # Rows stream from here; the engine's workers load the model as the first come.
        phase("loading the model")
        stopped = StopOutcome()
        stop_loss = StopLossWatch(plan, data.output,
                                  WrittenRows(run_dir, data.output_format, write_id),
                                  first_error=lambda: first_error(run_dir, data.output_format))
        try:
            with watching_resources(plan, plan.compute.resource_wait_s, on_notice,
                                    outcome=stopped), \
                    stopping_when(stop_loss, stopped, interval_s=STOP_LOSS_INTERVAL_S):
                write_results(ds, run_dir, data.output_format, write_id,
                              write_resources(plan))
        except KeyboardInterrupt:
            if stopped.stopped_with is None:  # the user's Ctrl-C
                raise
        except Exception:
            # A run paused until another took its folder over fails on whatever it
            # touched first (its workers' fence, a pending checkpoint the new owner
            # cleaned up): say that, not the symptom.
            with contextlib.suppress(OSError):
                run_dir.check_still_ours()
            raise
        # A watcher stopped the run, or its last rows landed after the stop-loss's last look.
        ended_with = stopped.stopped_with or stop_loss(finished=True)
        if ended_with is not None:
            run_dir.end_write(write_id)
            raise ended_with from None
    # Rows this run wrote, counted from the files' own metadata.
    rows_this_run = run_dir.count_rows(run_dir.end_write(write_id), data.output_format)
    notes = [source.note] if source.note else []
    # Before the summary: a summary means the run's files are all there.
    finished_note = run_format(data).finish(plan)
    if finished_note:
        notes.append(finished_note)
    manifest = run_dir.read_manifest()
    retrying = manifest is not None and bool(manifest.attempts) \
        and manifest.attempts[-1].get("state") == "running"
    if retrying:
        # What the attempt ran, counted now: before it ran, a stopped run's rows never
        # reached (and those of a file cut off mid-write) were not known.
        manifest.attempts[-1]["rows"] = rows_this_run
        manifest.attempts[0]["rows"] = rows_before + rows_this_run
        run_dir.write_manifest(manifest)
        notes.append(f"Retry attempt {manifest.attempts[-1]['attempt']}: {rows_this_run:,} rows "
                     f"run again, {rows_before:,} kept from earlier attempts.")
    elif state is RunState.PARTIAL:
        notes.append(f"Resumed: {rows_before:,} rows were already written by an earlier run.")
    # Edited while Ray read it (a --rows run reads the copy it staged first): the
    # manifest keeps what the run started from, so a rerun is refused until told.
    changed = (file_changes(manifest.input, input_identity(data))
               if manifest is not None and data.rows is None else [])
    if changed:
        notes.append(
            f"WARNING: the input changed while this run read it ({'; '.join(changed)}), so "
            "its rows may answer either version. Run the same command with --input-changed "
            "redo to redo the rows that differ from the input as it is now.")
    summary = summarize_output(
        job, plan, run_dir, seconds=time.monotonic() - started,
        rows_in=rows_before + rows_this_run, rows_this_run=rows_this_run, notes=notes,
        log_file=log_file, attempts=attempt_summaries(manifest), options=plan.options,
        metrics=None if dashboard_url is None else MetricsPlace(
            job=job.name, write_id=write_id, dashboard=f"{dashboard_url}/#/metrics",
            grafana=os.environ.get("RAY_GRAFANA_HOST") or None),
    )
    run_dir.finish()
    return with_report(summary, data.output)


def with_report(summary: RunSummary, output: str) -> RunSummary:
    """Write the run's ``_report.html``; the summary with its path, or with a one-line
    note saying why there is none. The results are written by now, and a report is
    only a view of them: no failure here fails the run."""
    try:
        return summary.model_copy(update={"report": redact(write_report(output))})
    except Exception as exc:  # noqa: BLE001 - see above: never fail a finished run
        reason = (str(exc).strip().splitlines() or [""])[0][:200]
        note = f"Warning: the run report was not written ({type(exc).__name__}: {reason})."
        return summary.model_copy(update={"notes": [*summary.notes, note]})


def first_error(run_dir: RunDirectory, output_format: str) -> str | None:
    """One error row's message from the results written so far, in ``output_format``
    (None: none, or unreadable)."""
    import pyarrow.compute as pc

    try:
        table = run_dir.open_results(output_format).head(
            1, columns=[ERROR_COLUMN], filter=pc.field(ERROR_COLUMN).is_valid())
    except Exception:  # noqa: BLE001 - a file mid-write: the message goes without an example
        return None
    return table.column(0)[0].as_py() if table.num_rows else None


def write_results(ds: "Dataset", run_dir: RunDirectory, file_format: str, write_id: str,
                  resources: dict[str, Any] | None = None) -> None:
    """Execute the pipeline, streaming results into the run directory as they come.

    Args:
        resources: The write's ``ray_remote_args`` and ``concurrency``
            (:func:`~toolkit.run.stage_steps.write_resources`).
    """
    writer = {"parquet": ds.write_parquet, "csv": ds.write_csv, "json": ds.write_json}[file_format]
    writer(run_dir.ray_location, filename_provider=run_dir.filenames(write_id, file_format),
           **(resources or {}))
