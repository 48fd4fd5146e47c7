"""The Ray Data pipeline every job shares.

read (a file, a staged --rows slice, or generated samples) -> preprocess -> engine
-> postprocess -> write, with Ray Data checkpointing so a rerun resumes.

Everything streams: Ray Data reads, infers and writes blocks concurrently and the
results go to files as they are produced, so memory stays flat as rows grow. Every
row read is written exactly once, with its result or with an ``error``; the run
ends with a summary computed from what was actually written.

Here the dataset is built (:func:`build_dataset`) and run (:func:`run_planned`); the
functions its tasks call on the workers are :mod:`toolkit.run.row_steps`', and the
driver that joins Ray and calls :func:`run_planned` is :mod:`toolkit.run.driver`.
"""

from __future__ import annotations

import contextlib
import time
from typing import TYPE_CHECKING, Any, Callable

from toolkit.engines import (
    BatchStep,
    StageInputs,
    apply_engine,
    batch_step_resources,
    engine_batch_step,
    row_step_resources,
    runs_as_batch_step,
)
from toolkit.redaction import redact
from toolkit.run.cascade_rows import (
    cascade_columns,
    first_answers_fields,
    mark_reached,
    transit_fields,
)
from toolkit.run.input.checks import check_id_type, check_written_columns
from toolkit.run.input.csv_files import csv_delimiter
from toolkit.run.input.formats import run_format
from toolkit.run.input.identity import file_changes, input_identity
from toolkit.run.input.reading import check_required_columns
from toolkit.run.input.source import RunSource, checkpoint_config, checkpointing, open_run_source
from toolkit.run.model_stages import (
    between_stages_schema,
    prepare_table,
    stage_rows_step,
)
from toolkit.run.output.report import write_report
from toolkit.run.output.run_directory import RunDirectory, RunState
from toolkit.run.output.summary import (
    RunSummary,
    attempt_summaries,
    read_summary,
    summarize_output,
)
from toolkit.run.progress.sources import WrittenRows
from toolkit.run.ray.cluster_fit import watching_resources
from toolkit.run.row_checks import row_checks
from toolkit.run.row_steps import (
    engine_sampling_params,
    finish_batch,
    finish_escalated_rows,
    finish_first_answers,
    output_schema,
    pa_schema_with,
    prepare_row,
    preprocess_model_postprocess,
    ship_job_code_by_value,
)
from toolkit.run.run_plan import RunPlan
from toolkit.run.run_stop import StopOutcome, stopping_when
from toolkit.run.stop_loss import STOP_LOSS_INTERVAL_S, StopLossWatch
from toolkit.run.task_rows import prepare_task_row
from toolkit.spec.row_contract import ERROR_COLUMN, MESSAGES_COLUMN, PROMPT_COLUMN

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
    return apply_model_stages(plan, source.dataset, seen["schema"]), source


def apply_model_stages(plan: RunPlan, ds: "Dataset", input_schema: "pa.Schema") -> "Dataset":
    """Every model stage of the plan, in order (a multi-stage job's earlier stages, then
    its main one): prepare the rows for the stage's task -> the stage's engine, on its
    own section of the spec (workers, batch size, CPUs, accelerator) -> its
    postprocess. After an earlier stage the rows keep the input's columns and the
    results so far (see :mod:`toolkit.run.model_stages`); after the last, the output's.
    """
    options, spec = plan.options, plan.spec
    dropped = plan.dropped_columns
    results: dict[str, str] = {}
    small = next((s for s in plan.stages if s.cascade is not None), None)
    last_in_one_step = stage_in_one_step(plan)
    for index, planned in enumerate(plan.stages):
        stage, contract = planned.definition, planned.contract
        last = index == len(plan.stages) - 1
        one_step = last and last_in_one_step
        inputs = StageInputs(multimodal=stage.multimodal, samples=plan.samples, options=options)
        if contract.chat:
            kwargs: dict[str, Any] = {"sampling_params": engine_sampling_params(
                spec.sampling, planned.structured_output),
                "input_column": MESSAGES_COLUMN if getattr(
                    planned.engine, "apply_chat_template", True) else PROMPT_COLUMN}
            prepare: Callable[..., dict[str, Any]] = prepare_row
        else:  # the task's own input columns instead
            kwargs, prepare = {"input_columns": contract.inputs}, prepare_task_row
        if stage.preprocess_batch is not None and not contract.chat and index == 0:
            prepared: BatchStep = (prepare_table, {
                "preprocess_batch": stage.preprocess_batch, "options": options,
                "input_columns": contract.inputs,
            })
        else:
            prepared = stage_rows_step(prepare, {
                "preprocess": stage.preprocess, "options": options, **kwargs,
            }, after_earlier_stage=index > 0)
        if not one_step:
            fused = row_step_resources(planned.engine)
            ds = ds.map_batches(prepared[0], fn_kwargs=prepared[1], batch_size=None,
                                batch_format="pyarrow", zero_copy_batch=True, **fused)
            if planned is small:
                ds = ds.map_batches(mark_reached, batch_size=None, batch_format="pyarrow",
                                    zero_copy_batch=True, **fused)
            ds = apply_engine(ds, planned.engine, inputs)
        results.update(planned.results)
        checked = (last or planned is small) and contract.chat
        finish = {
            "postprocess": stage.postprocess,
            "options": options,
            "schema": output_schema(input_schema, results, dropped, checked) if last
            else between_stages_schema(input_schema, results),
            "result_columns": list(planned.results),
            "engine_output": contract.main_output,
            "strict_id_column": plan.data.id_column if spec.strict else None,
            "checks": row_checks(plan.checks, plan.sampling.max_tokens, plan.job)
            if checked else None,
            "postprocess_batch": stage.postprocess_batch,
        }
        if planned is small:
            schema = output_schema(input_schema, results, checked=checked)
            ds = ds.map_batches(finish_first_answers, fn_kwargs={
                **finish, "strict_id_column": None,
                "schema": pa_schema_with(schema, first_answers_fields()),
                "routing": {"results": dict(planned.results),
                            "escalate_below": planned.cascade.escalate_below},
            }, batch_format="pyarrow")
        elif last and small is not None:
            written = output_schema(input_schema, {**results, **cascade_columns(planned.results)},
                                    dropped, checked)
            ds = ds.map_batches(finish_escalated_rows, fn_kwargs={
                **finish, "strict_id_column": None,
                "schema": pa_schema_with(written, transit_fields()),
                "settling": {"results": dict(planned.results), "schema": written,
                             "small_model": small.engine.model,
                             "big_model": planned.engine.model},
                "strict_after": finish["strict_id_column"],
            }, batch_format="pyarrow")
        elif one_step:
            engine = planned.engine
            ds = ds.map_batches(preprocess_model_postprocess, fn_kwargs={"steps": [
                prepared, engine_batch_step(engine, inputs), (finish_batch, finish),
            ]}, batch_size=engine.batch_size, batch_format="pyarrow",
                **batch_step_resources(engine))
        else:
            ds = ds.map_batches(finish_batch, fn_kwargs=finish, batch_format="pyarrow")
    return ds


def stage_in_one_step(plan: RunPlan) -> bool:
    """The last model stage runs as one function: its preprocess, its engine's
    (:func:`~toolkit.engines.engine_batch_step`) and its postprocess, on each batch;
    the results' write then joins it in the same tasks (:func:`write_resources`).
    Not in a cascade, whose big model sees only the rows the small one passed on."""
    return (runs_as_batch_step(plan.stages[-1].engine)
            and not any(s.cascade is not None for s in plan.stages))


def write_resources(plan: RunPlan) -> dict[str, Any]:
    """The write's ``ray_remote_args`` and ``concurrency``: the last stage's, where it
    runs as one function (:func:`stage_in_one_step`), so that Ray Data fuses the write
    into that stage's tasks; else Ray's own (a write task of 1 CPU per piece)."""
    if not stage_in_one_step(plan):
        return {}
    resources = batch_step_resources(plan.stages[-1].engine)
    return {"ray_remote_args": {"num_cpus": resources["num_cpus"]},
            "concurrency": resources["concurrency"]}


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
        from toolkit.run.prompt_tokens import check_prompt_tokens, count_prompt_tokens

        phase("counting prompt tokens")
        check_prompt_tokens(count_prompt_tokens(job, spec, plan.samples))
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
            (:func:`write_resources`).
    """
    writer = {"parquet": ds.write_parquet, "csv": ds.write_csv, "json": ds.write_json}[file_format]
    writer(run_dir.ray_location, filename_provider=run_dir.filenames(write_id, file_format),
           **(resources or {}))
