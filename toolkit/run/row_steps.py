"""The functions that run on Ray's workers, a block of rows at a time.

A stage's rows are prepared for its engine (:func:`prepare_row`: the job's
preprocess, the chat messages and sampling parameters), the engine answers, and
:func:`finish_batch` turns the answers into the output's columns (:func:`output_schema`)
through the job's postprocess and the row checks; a row that fails anywhere becomes
an error row. Which of these run, in what order and with what resources, is the run's
stage chain (:mod:`toolkit.run.stage_steps`); nothing here builds a dataset.

A row that failed in an earlier stage of a multi-stage job keeps its error through
the later ones: their preprocess doesn't run on it (:func:`prepare_after_earlier_stage`)
and their engines skip it (``error`` for ours, ``__inference_error__`` for Ray Data
LLM's), so no model time goes to it and the output says which stage rejected it and why.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Callable

from toolkit.engines import BatchStep
from toolkit.run.cascade_rows import route_first_answers, settle_cascade
from toolkit.run.output.summary import TOKEN_COLUMNS
from toolkit.run.row_checks import RowChecks
from toolkit.spec.job_definition import JobDefinition
from toolkit.spec.jobs.catalog import USER_MODULE_PREFIX
from toolkit.spec.models import SamplingConfig
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

if TYPE_CHECKING:
    import pyarrow as pa

#: Prepares one row for a stage's engine (:func:`prepare_row`,
#: :func:`~toolkit.run.task_rows.prepare_task_row`).
Prepare = Callable[..., dict[str, Any]]


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


def _failed_earlier(row: dict[str, Any], options: Any) -> dict[str, Any]:
    raise ValueError("failed in an earlier stage")


def prepare_after_earlier_stage(
    row: dict[str, Any], prepare: Prepare, preprocess: Callable[..., dict[str, Any]],
    **kwargs: Any,
) -> dict[str, Any]:
    """``prepare`` (``prepare_row`` or ``prepare_task_row``) for a later stage: a row
    an earlier stage failed gets the stage's input columns as null, without its
    preprocess running, and keeps the earlier error."""
    earlier = row_error(row.get(ERROR_COLUMN))
    if earlier is None:
        return prepare(row, preprocess=preprocess, **kwargs)
    out = prepare(row, preprocess=_failed_earlier, **kwargs)
    out[ERROR_COLUMN] = earlier
    out[RAY_LLM_ERROR_COLUMN] = earlier
    return out


def prepare_batch(batch: "pa.Table", prepare: Prepare, inner: Prepare | None = None,
                  **fn_kwargs: Any) -> "pa.Table":
    """``prepare`` (a row -> the row with the stage's inputs) on each row of ``batch``,
    with only what it changed or added built back from Python: the columns it left
    alone pass through as Arrow, untouched.

    The new columns are built as Ray Data builds a row-wise ``map``'s
    (``BlockAccessor.batch_to_arrow_block``), so a stage's engine sees the same types.
    """
    from ray.data.block import BlockAccessor

    rows = batch.to_pylist()
    if inner is not None:
        fn_kwargs = {"prepare": inner, **fn_kwargs}
    outs = [prepare(row, **fn_kwargs) for row in rows]
    changed: dict[str, None] = {}
    for row, out in zip(rows, outs):
        for key, value in out.items():
            # ``prepare`` copies the row: a value it left alone is the very same object.
            if key not in changed and (key not in row or value is not row[key]):
                changed[key] = None
    if not changed:
        return batch
    built = BlockAccessor.batch_to_arrow_block(
        {key: [out.get(key) for out in outs] for key in changed})
    names = batch.column_names
    for key in changed:
        if key in names:
            batch = batch.set_column(names.index(key), key, built.column(key))
        else:
            batch = batch.append_column(key, built.column(key))
    return batch


def prepare_table(batch: "pa.Table", preprocess_batch: Callable[..., "pa.Table"],
                  options: Any, input_columns: Sequence[str]) -> "pa.Table":
    """A job's ``preprocess_batch`` on a whole block: the task's input columns (null on
    the rows it rejects) and ``error`` (``preprocess: <why>``), all in Arrow, as
    :func:`toolkit.run.task_rows.prepare_task_row` makes them row by row."""
    import pyarrow as pa
    import pyarrow.compute as pc

    made = preprocess_batch(batch, options)
    if made.num_rows != batch.num_rows:
        raise RuntimeError(f"preprocess_batch returned {made.num_rows} rows for "
                           f"{batch.num_rows}")
    why = made.column(ERROR_COLUMN).cast(pa.string())
    rejected = pc.is_valid(why)
    columns = {name: pc.if_else(rejected, pa.scalar(None, made.column(name).type),
                                made.column(name)) for name in input_columns}
    errors = pc.binary_join_element_wise("preprocess: ", why, "")
    columns[ERROR_COLUMN] = errors
    # Ray Data LLM's stages skip rows where this is non-empty.
    columns[RAY_LLM_ERROR_COLUMN] = pc.fill_null(errors, "")
    names = batch.column_names
    for name, column in columns.items():
        batch = (batch.set_column(names.index(name), name, column) if name in names
                 else batch.append_column(name, column))
        names = batch.column_names
    return batch


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


def preprocess_model_postprocess(batch: "pa.Table", steps: Sequence[BatchStep]) -> "pa.Table":
    """Each step on the batch in turn: a stage run as one function
    (:func:`toolkit.run.stage_steps.stage_in_one_step`); Ray's Dashboard shows it by
    this name."""
    for step, fn_kwargs in steps:
        batch = step(batch, **fn_kwargs)
    return batch


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

