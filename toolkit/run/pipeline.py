"""The Ray Data pipeline every job shares.

read (a file, a staged --rows slice, or generated samples) -> preprocess -> engine
-> postprocess -> write, with Ray Data checkpointing so a rerun resumes.

Everything streams: Ray Data reads, infers and writes blocks concurrently and the
results go to files as they are produced, so memory stays flat as rows grow. Every
row read is written exactly once, with its result or with an ``error``; the run
ends with a summary computed from what was actually written.
"""

from __future__ import annotations

import contextlib
import random
import time
from collections.abc import Sequence
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
    route_first_answers,
    settle_cascade,
    transit_fields,
)
from toolkit.run.input.checks import check_id_type, check_written_columns
from toolkit.run.input.csv_files import csv_delimiter
from toolkit.run.input.formats import run_format
from toolkit.run.input.identity import InputChanged
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
    TOKEN_COLUMNS,
    RunSummary,
    attempt_summaries,
    read_summary,
    summarize_output,
)
from toolkit.run.output.write_failure import failed_writes_explained
from toolkit.run.preflight import preflight
from toolkit.run.progress.sources import WrittenRows
from toolkit.run.ray.cluster_fit import watching_resources
from toolkit.run.row_checks import RowChecks, row_checks
from toolkit.run.run_plan import RunPlan
from toolkit.run.run_stop import StopOutcome, stopping_when
from toolkit.run.stop_loss import STOP_LOSS_INTERVAL_S, StopLossWatch
from toolkit.run.task_rows import prepare_task_row
from toolkit.spec.job_definition import JobDefinition
from toolkit.spec.jobs.catalog import USER_MODULE_PREFIX
from toolkit.spec.models import JobSpec, SamplingConfig
from toolkit.spec.row_contract import (
    ERROR_COLUMN,
    FAILED_CHECKS_COLUMN,
    FINISH_REASON_COLUMN,
    GENERATED_TEXT_COLUMN,
    MAX_TOKENS_COLUMN,
    MESSAGES_COLUMN,
    PROMPT_COLUMN,
    RAY_LLM_ERROR_COLUMN,
    SAMPLING_PARAMS_COLUMN,
    arrow_type,
    plain,
    row_error,
)
from toolkit.spec.sample_sources import SampleProvider

if TYPE_CHECKING:
    import pyarrow as pa
    from ray.data import Dataset


def engine_sampling_params(
    sampling: SamplingConfig, structured_output: dict[str, Any] | None
) -> dict[str, Any]:
    """vLLM-style sampling params for every row (both engines read the same keys)."""
    params: dict[str, Any] = {
        "temperature": sampling.temperature,
        "max_tokens": sampling.max_tokens,
        "top_p": sampling.top_p,
    }
    if sampling.seed is not None:
        params["seed"] = sampling.seed
    if structured_output:
        params["structured_outputs"] = structured_output
    return params


def prepare_row(
    row: dict[str, Any],
    preprocess: Callable[[dict[str, Any], Any], dict[str, Any]],
    options: Any,
    sampling_params: dict[str, Any],
    input_column: str = MESSAGES_COLUMN,
) -> dict[str, Any]:
    """Run the job's preprocess; a row it rejects becomes an error row, not a crash.

    An error row is marked both ways: our ``error`` and Ray Data LLM's
    ``__inference_error__``, which every Ray Data LLM stage skips (``StatefulStageUDF``
    in ``ray/llm/_internal/batch/stages/base.py``), so it never reaches vLLM. A good
    row's ``__inference_error__`` is ``""``, Ray's "no error" (not null, which a
    stage would take for an error). The transformers engine skips rows by ``error``.

    A preprocess may return its own ``sampling_params`` for the row (an OpenAI
    batch request's ``max_tokens``...): see :func:`row_sampling_params`.

    ``input_column``: what the engine reads, ``messages`` (or, for an engine with
    ``apply_chat_template: false``, ``prompt``: a preprocess that gives messages has
    them joined, :func:`messages_as_written`); null on an error row, so every block
    has it.
    """
    out = dict(row)
    own_params = None
    try:
        produced = dict(preprocess(row, options))
        own_params = produced.pop(SAMPLING_PARAMS_COLUMN, None)
        if input_column == PROMPT_COLUMN and PROMPT_COLUMN not in produced:
            produced[PROMPT_COLUMN] = messages_as_written(produced.pop(MESSAGES_COLUMN, None))
        out.update(produced)
        out[ERROR_COLUMN] = None
    except Exception as exc:  # noqa: BLE001 - recorded on the row
        out[input_column] = None
        out[ERROR_COLUMN] = f"preprocess: {exc}"
    out[RAY_LLM_ERROR_COLUMN] = out[ERROR_COLUMN] or ""
    out[SAMPLING_PARAMS_COLUMN] = row_sampling_params(sampling_params, own_params)
    out[MAX_TOKENS_COLUMN] = out[SAMPLING_PARAMS_COLUMN].get("max_tokens")
    return out


def messages_as_written(messages: Any) -> str:
    """Chat messages as one prompt for a model without a chat template: their texts in
    order, a blank line between (a job's system and user prompts, as written).

    Raises:
        ValueError: no messages, or a part that is not text (an image needs the chat
            template of a vision model).
    """
    texts = []
    for message in plain(messages) or ():
        content = message.get("content") if isinstance(message, dict) else None
        parts = content if isinstance(content, list) else [{"type": "text", "text": content}]
        for part in parts:
            if not isinstance(part, dict) or part.get("type") != "text" or not isinstance(
                    part.get("text"), str):
                raise ValueError("a message part that is not text needs the chat template: "
                                 "leave engine.apply_chat_template out")
            texts.append(part["text"])
    if not texts:
        raise ValueError("the job gave no prompt text")
    return "\n\n".join(texts)


def row_sampling_params(
    spec_params: dict[str, Any], own: dict[str, Any] | None
) -> dict[str, Any]:
    """The spec's sampling params with a row's own on top.

    A row's ``None`` keeps the spec's value, and a key the spec lacks is left out
    while ``None``: a block whose rows all have ``structured_outputs: None`` gets
    Arrow's null type there, and Ray Data can't concatenate that with a block whose
    rows carry a constraint (``'DataType' object is not iterable`` in Ray Data LLM's
    stages); a key missing from a block it fills in.
    """
    if not own:
        return spec_params
    merged = dict(spec_params)
    for key, value in own.items():
        if value is not None:
            merged[key] = value
    if "seed" in own and merged.get("seed") is None:
        # Rows that bring their own seed sit in batches with rows that don't: a null
        # among ints turns the column to floats on its way to vLLM, whose request
        # validation then kills the engine ("Expected int | null, got float"). A
        # fresh random seed samples as no seed does.
        merged["seed"] = random.getrandbits(31)
    return merged


def finish_row(
    row: dict[str, Any],
    postprocess: Callable[[dict[str, Any], Any], dict[str, Any]],
    options: Any,
    result_columns: list[str],
    engine_output: str = GENERATED_TEXT_COLUMN,
    checks: RowChecks | None = None,
) -> dict[str, Any]:
    """Apply the job's postprocess and fold every error shape into ``error``.

    ``engine_output`` is the column the task's engine adds (``generated_text``,
    ``label``, ``embedding``...); a good row without it is an error row. With
    ``checks`` (the last stage of a generate job) the row also gets its
    ``finish_reason`` and ``failed_checks`` (see :mod:`toolkit.run.row_checks`)."""
    error = row_error(row.get(ERROR_COLUMN)) or row_error(row.get(RAY_LLM_ERROR_COLUMN))
    results: dict[str, Any] = dict.fromkeys(result_columns)
    answered = error is None and row.get(engine_output) is not None
    rejected = False
    finish = checks.finish_reason(row) if checks is not None and answered else "error"
    if error is None:
        if not answered:
            error = ("engine returned no text for this row" if engine_output == GENERATED_TEXT_COLUMN
                     else f"engine returned no {engine_output} for this row")
        else:
            try:
                produced = postprocess(row, options)
                results.update({c: produced.get(c) for c in result_columns})
            except Exception as exc:  # noqa: BLE001 - recorded on the row
                rejected = True
                error = f"postprocess: {exc}"
                if checks is not None and finish == "length":
                    error = checks.truncated_error(row, str(row.get(engine_output)))
    failed: list[str] = []
    if checks is not None and answered:
        failed = checks.failed(row, str(row.get(engine_output)), finish, results, rejected)
    if error is not None:
        results = dict.fromkeys(result_columns)
    out = {**results, ERROR_COLUMN: str(error) if error is not None else None}
    if checks is not None:
        out[FINISH_REASON_COLUMN] = finish
        out[FAILED_CHECKS_COLUMN] = ",".join(failed) or None
    return out


def output_schema(
    input_schema: "pa.Schema", result_columns: dict[str, str], dropped: Sequence[str] = (),
    checked: bool = False,
) -> "pa.Schema":
    """Input columns, then result columns, then (``checked``: a generate job's)
    ``finish_reason`` and ``failed_checks``, then the engine's token counts
    (``num_input_tokens``, ``num_generated_tokens``; null where the engine did not
    run the row), then ``error``: the same in every file."""
    import pyarrow as pa

    answer_columns = [FINISH_REASON_COLUMN, FAILED_CHECKS_COLUMN] if checked else []
    skip = {*result_columns, *dropped, *TOKEN_COLUMNS, *answer_columns, ERROR_COLUMN}
    fields = [f.with_nullable(True) for f in input_schema if f.name not in skip]
    fields += [pa.field(name, arrow_type(alias)) for name, alias in result_columns.items()]
    fields += [pa.field(name, pa.string()) for name in answer_columns]
    fields += [pa.field(name, pa.int64()) for name in TOKEN_COLUMNS]
    fields.append(pa.field(ERROR_COLUMN, pa.string()))
    return pa.schema(fields)


class StrictModeError(RuntimeError):
    """A row failed and the spec asked to stop at the first failure."""


def finish_batch(
    batch: "pa.Table",
    postprocess: Callable[[dict[str, Any], Any], dict[str, Any]],
    options: Any,
    schema: "pa.Schema",
    result_columns: list[str],
    strict_id_column: str | None = None,
    engine_output: str = GENERATED_TEXT_COLUMN,
    checks: RowChecks | None = None,
    postprocess_batch: Callable[[Any, Any], "pa.Table"] | None = None,
) -> "pa.Table":
    """Postprocess a batch and cast it to the fixed output schema.

    Only the columns this step decides (results, ``error``, a generate job's checks)
    are built; the others pass through as Arrow. With ``postprocess_batch`` (a job's
    hook for a whole block) no row goes through Python, unless the hook raises: then
    the block is postprocessed row by row.

    With ``strict_id_column`` set (``--strict``), the first error row fails the run,
    named by its id, instead of being written.
    """
    import pyarrow as pa

    made: dict[str, Any] | None = None
    if postprocess_batch is not None and checks is None:
        try:
            made, rejected_early = _finished_by_batch(batch, postprocess_batch, options,
                                                      result_columns, engine_output)
        except Exception:  # noqa: BLE001 - the row hook says which row and why
            made = None
    if made is None:
        made, rejected_early = _finished_by_row(batch, postprocess, options, result_columns,
                                                engine_output, checks)
    if strict_id_column is not None:
        errors = made[ERROR_COLUMN]
        listed = errors if isinstance(errors, list) else errors.to_pylist()
        first = next((i for i, error in enumerate(listed) if error is not None), None)
        if first is not None:
            row_id = batch.column(strict_id_column)[first].as_py()
            raise StrictModeError(
                f"--strict: row {strict_id_column}={row_id!r} failed: {listed[first]}")
    return pa.Table.from_arrays(
        [_output_column(batch, field, made, rejected_early) for field in schema], schema=schema)


def _finished_by_row(
    batch: "pa.Table", postprocess: Callable[[dict[str, Any], Any], dict[str, Any]],
    options: Any, result_columns: list[str], engine_output: str, checks: RowChecks | None,
) -> tuple[dict[str, list[Any]], list[bool]]:
    """:func:`finish_row` on each row: the columns it decides, and which rows were
    rejected before the engine."""
    import pyarrow as pa

    rows = batch.to_pylist()
    # Python values already, but for Ray's extension columns (tensors, objects).
    extension = [f.name for f in batch.schema if isinstance(f.type, pa.ExtensionType)]
    produced = [*result_columns, ERROR_COLUMN,
                *((FINISH_REASON_COLUMN, FAILED_CHECKS_COLUMN) if checks is not None else ())]
    made: dict[str, list[Any]] = {name: [] for name in produced}
    rejected_early: list[bool] = []
    for row in rows:
        for name in extension:
            row[name] = plain(row[name])
        out = finish_row(row, postprocess, options, result_columns, engine_output, checks)
        for name in produced:
            made[name].append(out[name])
        rejected_early.append(row_error(row.get(ERROR_COLUMN)) is not None)
    return made, rejected_early


def _finished_by_batch(
    batch: "pa.Table", postprocess_batch: Callable[[Any, Any], "pa.Table"], options: Any,
    result_columns: list[str], engine_output: str,
) -> tuple[dict[str, "pa.Array"], list[bool]]:
    """What :func:`_finished_by_row` decides, for a whole block in Arrow: an earlier
    error stays, a row the engine gave nothing is an error row, then the hook's own
    errors (``postprocess: <why>``); an error row's results are null."""
    import pyarrow as pa
    import pyarrow.compute as pc

    def given(name: str) -> "pa.Array":
        """A text column's non-empty values (row_error: '' is no error)."""
        if name not in batch.column_names:
            return pa.nulls(batch.num_rows, pa.string())
        column = batch.column(name).cast(pa.string())
        return pc.if_else(pc.equal(column, ""), pa.scalar(None, pa.string()), column)

    before = given(ERROR_COLUMN)
    error = pc.coalesce(before, given(RAY_LLM_ERROR_COLUMN))
    nothing = ("engine returned no text for this row" if engine_output == GENERATED_TEXT_COLUMN
               else f"engine returned no {engine_output} for this row")
    if engine_output in batch.column_names:
        unanswered = pc.is_null(batch.column(engine_output))
    else:
        unanswered = pa.array([True] * batch.num_rows)
    error = pc.if_else(pc.and_(pc.is_null(error), unanswered), nothing, error)
    results = postprocess_batch(batch, options)
    if results.num_rows != batch.num_rows:
        raise RuntimeError(f"postprocess_batch returned {results.num_rows} rows for "
                           f"{batch.num_rows}")
    rejected = results.column(ERROR_COLUMN).cast(pa.string())
    error = pc.coalesce(error, pc.binary_join_element_wise("postprocess: ", rejected, ""))
    failed = pc.is_valid(error)
    made: dict[str, Any] = {
        name: pc.if_else(failed, pa.scalar(None, results.column(name).type),
                         results.column(name))
        for name in result_columns}
    made[ERROR_COLUMN] = error
    return made, pc.is_valid(before).to_pylist()


def _output_column(batch: "pa.Table", field: "pa.Field", made: dict[str, Any],
                   rejected_early: list[bool]) -> "pa.Array | pa.ChunkedArray":
    """One column of a finished batch: built from Python where this step decided it
    (results, error, checks), else the batch's own column passing through as Arrow
    (token counts nulled on rows rejected before the engine)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    if field.name in made:
        column = made[field.name]
        if isinstance(column, (pa.Array, pa.ChunkedArray)):
            return column.cast(field.type)
        return pa.array(column, type=field.type)
    if field.name not in batch.column_names:
        return pa.nulls(batch.num_rows, type=field.type)
    column = batch.column(field.name)
    try:
        if isinstance(column.type, pa.ExtensionType):
            raise pa.ArrowInvalid("an extension column goes by its Python values")
        column = column.cast(field.type)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError):
        # What Arrow won't cast goes as Python values into the column's type, as
        # every column did before they passed through (a NaN count is no count).
        return pa.array([plain(v) for v in column.to_pylist()], type=field.type,
                        from_pandas=True)
    if field.name in TOKEN_COLUMNS and any(rejected_early):
        column = pc.if_else(pa.array(rejected_early), pa.scalar(None, type=field.type), column)
    return column


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

    source = open_run_source(plan.spec, plan.run_dir, check_schema=check, samples=plan.samples,
                             counted_rows=plan.input_rows)
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
            "checks": row_checks(spec, plan.job) if checked else None,
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


def preprocess_model_postprocess(batch: "pa.Table", steps: Sequence[BatchStep]) -> "pa.Table":
    """Each step on the batch in turn: a stage run as one function
    (:func:`stage_in_one_step`); Ray's Dashboard shows it by this name."""
    for step, fn_kwargs in steps:
        batch = step(batch, **fn_kwargs)
    return batch


def write_resources(plan: RunPlan) -> dict[str, Any]:
    """The write's ``ray_remote_args`` and ``concurrency``: the last stage's, where it
    runs as one function (:func:`stage_in_one_step`), so that Ray Data fuses the write
    into that stage's tasks; else Ray's own (a write task of 1 CPU per piece)."""
    if not stage_in_one_step(plan):
        return {}
    resources = batch_step_resources(plan.stages[-1].engine)
    return {"ray_remote_args": {"num_cpus": resources["num_cpus"]},
            "concurrency": resources["concurrency"]}


def pa_schema_with(schema: "pa.Schema", fields: Sequence["pa.Field"]) -> "pa.Schema":
    """``schema`` with ``fields`` appended."""
    import pyarrow as pa

    return pa.schema([*schema, *fields])


def finish_first_answers(batch: "pa.Table", routing: dict[str, Any],
                         **finish: Any) -> "pa.Table":
    """A cascade's small model's rows: finished and checked as the main stage's would
    be, then routed (:func:`~toolkit.run.cascade_rows.route_first_answers`)."""
    return route_first_answers(finish_batch(batch, **finish), **routing)


def finish_escalated_rows(batch: "pa.Table", settling: dict[str, Any],
                          strict_after: str | None, **finish: Any) -> "pa.Table":
    """The main stage's rows after a cascade: finished, then settled as the output has
    them (:func:`~toolkit.run.cascade_rows.settle_cascade`); ``--strict`` judges the
    settled rows, since a kept row passes the main stage marked as skipped."""
    settled = settle_cascade(finish_batch(batch, **finish), **settling)
    if strict_after is not None:
        errors = settled.column(ERROR_COLUMN).to_pylist()
        first = next((i for i, error in enumerate(errors) if error is not None), None)
        if first is not None:
            row_id = settled.column(strict_after)[first].as_py()
            raise StrictModeError(
                f"--strict: row {strict_after}={row_id!r} failed: {errors[first]}")
    return settled


def ship_job_code_by_value(job: JobDefinition[Any]) -> None:
    """Send a job's own code to Ray workers inside the pickled hooks.

    Jobs loaded from a file (a user's, or a built-in's ``python:`` file) live in
    modules no worker can import, so their functions are pickled by value, as
    Ray's cloudpickle allows for exactly this case.
    """
    import sys

    from ray import cloudpickle

    hooks = [hook for stage in job.stages for hook in (stage.preprocess, stage.postprocess)]
    for hook in hooks:
        module = sys.modules.get(getattr(hook, "__module__", "") or "")
        if module is not None and module.__name__.startswith(USER_MODULE_PREFIX):
            cloudpickle.register_pickle_by_value(module)


def run_pipeline(
    job: JobDefinition[Any],
    spec: JobSpec,
    overwrite: bool = False,
    samples: SampleProvider | None = None,
    log_file: str | None = None,
    on_notice: Callable[[str], None] | None = None,
    on_phase: Callable[[str], None] | None = None,
    check_tokens: bool = False,
    input_changed: InputChanged | None = None,
) -> RunSummary:
    """Check and run ``spec`` on the connected Ray cluster (a submitted run's
    entrypoint, or a test); the written-output summary.

    A rerun with the same spec and output resumes an interrupted run (only rows
    not yet written are processed) and does nothing after a finished one.

    Args:
        job: The job definition (its preprocess/postprocess and columns).
        spec: The validated spec.
        overwrite: Replace results the toolkit wrote earlier in ``spec.data.output``.
        samples: Serves ``sample:`` inputs and models (smoke runs; see
            :mod:`toolkit.spec.sample_sources`).
        log_file, on_notice, on_phase, check_tokens: as :func:`run_planned`'s.
        input_changed: What to do where the input changed since the run in the
            output folder wrote its rows; None refuses (see
            :func:`~toolkit.run.retry.settle_input`).

    Raises:
        InputDataError, SpecError, OutputInUseError, BackendUnavailableError: as
            :func:`~toolkit.run.preflight.preflight`'s; the rest as
            :func:`run_planned`'s.
    """
    started = time.monotonic()
    plan = preflight(job, spec, overwrite=overwrite, samples=samples, command="a submitted run",
                     input_changed=input_changed)
    kept = WrittenRows(plan.run_dir, plan.data.output_format)
    try:
        with failed_writes_explained(
                plan.data.output, lambda: f"{kept().rows:,} rows kept in {plan.data.output}"):
            return run_planned(plan, log_file=log_file, on_notice=on_notice, on_phase=on_phase,
                               started=started, check_tokens=check_tokens)
    finally:
        plan.release()


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
    config = checkpoint_config(run_dir, spec.data.id_column) if plan.resumable else None
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
        stop_loss = StopLossWatch(spec, WrittenRows(run_dir, spec.data.output_format, write_id),
                                  first_error=lambda: first_error(run_dir, spec))
        try:
            with watching_resources(spec, on_notice, outcome=stopped), \
                    stopping_when(stop_loss, stopped, interval_s=STOP_LOSS_INTERVAL_S):
                write_results(ds, run_dir, spec.data.output_format, write_id,
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
    rows_this_run = run_dir.count_rows(run_dir.end_write(write_id), spec.data.output_format)
    notes = [source.note] if source.note else []
    # Before the summary: a summary means the run's files are all there.
    finished_note = run_format(spec.data).finish(spec, run_dir)
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
    summary = summarize_output(
        job, spec, run_dir, seconds=time.monotonic() - started,
        rows_in=rows_before + rows_this_run, rows_this_run=rows_this_run, notes=notes,
        log_file=log_file, attempts=attempt_summaries(manifest),
    )
    run_dir.finish()
    return with_report(summary, spec.data.output)


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


def first_error(run_dir: RunDirectory, spec: JobSpec) -> str | None:
    """One error row's message from the results written so far (None: none, or unreadable)."""
    import pyarrow.compute as pc

    try:
        table = run_dir.open_results(spec.data.output_format).head(
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
