"""The stage chain as data: a run's model stages as the steps that add them to the
dataset, built once from the plan (:func:`plan_steps`) and applied by one loop
(:func:`apply_steps`).

A step is a config plus what builds it into the dataset, as Ray Data LLM's
processors are: a :class:`RowStep` is one ``map_batches`` of a function that runs on
the workers (:mod:`toolkit.run.row_steps`), with its arguments, batch size and
resources; an :class:`EngineStep` is a stage's model, which its engine kind adds
(an actor pool, or Ray Data LLM's processor of several operators). Each planned
stage (:class:`~toolkit.run.run_plan.PlannedStage`) becomes, in order:

1. **prepare**: the job's preprocess turns the row into the engine's inputs (chat
   messages and sampling params, or the task's input columns); after an earlier
   stage, a row that stage failed passes through as it is;
2. **mark reached** (a cascade's small model only): which rows it will answer;
3. **model**: the engine's stage;
4. **finish**: the job's postprocess turns answers into result columns, and the
   rows take their shape: between stages the input's columns and the results so far
   (:func:`between_stages_schema`), after the last the output's; a cascade's small
   model routes its answers, and the main stage after it settles them.

A last stage whose engine is a function of a batch (:func:`stage_in_one_step`) runs
1, 3 and 4 as one step, into whose tasks Ray Data fuses the write
(:func:`write_resources`).
"""

from __future__ import annotations

import os

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Union

from toolkit.engines import BatchStep, StageInputs, batch_step_resources
from toolkit.engines.kind_dispatch import (
    engine_batch_step,
    row_step_resources,
    runs_as_batch_step,
)
from toolkit.engines.registry import EngineKind
from toolkit.run.answer_cache.answer_keys import stage_context
from toolkit.run.answer_cache.cache_steps import look_up_answers, settle_answers
from toolkit.run.cascade_rows import (
    cascade_columns,
    first_answers_fields,
    mark_reached,
    transit_fields,
)
from toolkit.run.output.engine_records import RunFolderRecords
from toolkit.run.row_checks import row_checks
from toolkit.run.row_steps import (
    Prepare,
    engine_sampling_params,
    finish_batch,
    finish_escalated_rows,
    finish_first_answers,
    output_schema,
    pa_schema_with,
    prepare_after_earlier_stage,
    prepare_batch,
    prepare_row,
    prepare_table,
    preprocess_model_postprocess,
)
from toolkit.run.run_plan import PlannedStage, RunPlan
from toolkit.run.task_rows import prepare_task_row
from toolkit.spec.engine_settings import EngineSettings
from toolkit.spec.cascade import ANSWERED_BY_COLUMN
from toolkit.spec.row_contract import ERROR_COLUMN, MESSAGES_COLUMN, PROMPT_COLUMN, arrow_type

if TYPE_CHECKING:
    import pyarrow as pa
    from ray.data import Dataset


@dataclass(frozen=True)
class RowStep:
    """One ``map_batches`` over Arrow batches of a function the workers run.

    Attributes:
        fn: The function of a batch (:mod:`toolkit.run.row_steps`).
        fn_kwargs: What it is called with besides the batch.
        resources: Its tasks' ``num_cpus`` and ``concurrency`` (empty: Ray's own).
        whole_blocks: A block at a time as it comes, read without copying (a step
            that fuses with its neighbours); else ``batch_size`` rows.
        batch_size: Rows per batch (an engine's batch); None: Ray Data's default.
    """

    fn: Callable[..., Any]
    fn_kwargs: dict[str, Any] | None = None
    resources: Mapping[str, Any] = field(default_factory=dict)
    whole_blocks: bool = False
    batch_size: int | None = None

    def apply(self, ds: "Dataset") -> "Dataset":
        batching: dict[str, Any] = {}
        if self.whole_blocks:
            batching = {"batch_size": None, "zero_copy_batch": True}
        elif self.batch_size is not None:
            batching = {"batch_size": self.batch_size}
        return ds.map_batches(self.fn, fn_kwargs=self.fn_kwargs, batch_format="pyarrow",
                              **batching, **self.resources)


@dataclass(frozen=True)
class EngineStep:
    """A stage's model, as its engine kind adds it: its resources are its engine
    section's (workers, batch size, CPUs, accelerator)."""

    engine: EngineSettings
    kind: EngineKind
    inputs: StageInputs

    def apply(self, ds: "Dataset") -> "Dataset":
        return self.kind.apply(ds, self.engine, self.inputs)


Step = Union[RowStep, EngineStep]


def apply_steps(ds: "Dataset", steps: Sequence[Step]) -> "Dataset":
    """``ds`` through every step, in order."""
    for step in steps:
        ds = step.apply(ds)
    return ds


def plan_steps(plan: RunPlan, input_schema: "pa.Schema") -> list[Step]:
    """Every model stage of the plan as its steps, in order (a multi-stage job's
    earlier stages, then its main one; see the module)."""
    steps: list[Step] = []
    results: dict[str, str] = {}
    small = next((s for s in plan.stages if s.cascade is not None), None)
    last_in_one_step = stage_in_one_step(plan)
    for index, planned in enumerate(plan.stages):
        last = index == len(plan.stages) - 1
        one_step = last and last_in_one_step
        inputs = StageInputs(multimodal=planned.definition.multimodal, model=planned.model,
                             options=plan.options, id_column=plan.data.id_column,
                             records=RunFolderRecords.of(plan.run_dir, planned.field))
        prepared = _prepare(plan, index, planned)
        if not one_step:
            fused = row_step_resources(planned.engine)
            steps.append(RowStep(prepared[0], prepared[1], fused, whole_blocks=True))
            if planned is small:
                steps.append(RowStep(mark_reached, None, fused, whole_blocks=True))
            answers = _answer_steps(plan, planned, fused) if small is None else None
            if answers is not None:
                steps.append(answers[0])
            steps.append(EngineStep(planned.engine, planned.kind, inputs))
            if answers is not None:
                steps.append(answers[1])
        results.update(planned.results)
        checked = (last or planned is small) and planned.contract.chat
        finish = _finish(plan, planned, input_schema, results, last, checked)
        if planned is small:
            schema = output_schema(input_schema, results, checked=checked)
            steps.append(RowStep(finish_first_answers, {
                **finish, "strict_id_column": None,
                "schema": pa_schema_with(schema, first_answers_fields()),
                "routing": {"results": dict(planned.results),
                            "escalate_below": planned.cascade.escalate_below},
            }))
        elif last and small is not None:
            written = output_schema(input_schema, {**results, **cascade_columns(planned.results)},
                                    plan.dropped_columns, checked)
            steps.append(RowStep(finish_escalated_rows, {
                **finish, "strict_id_column": None,
                "schema": pa_schema_with(written, transit_fields()),
                "settling": {"results": dict(planned.results), "schema": written,
                             "small_model": small.engine.model,
                             "big_model": planned.engine.model},
                "strict_after": finish["strict_id_column"],
            }))
        elif one_step:
            engine = planned.engine
            steps.append(RowStep(preprocess_model_postprocess, {"steps": [
                prepared, engine_batch_step(engine, inputs), (finish_batch, finish),
            ]}, batch_step_resources(engine), batch_size=engine.batch_size))
        else:
            if last and plan.spec.cache is not None and planned.contract.chat:
                finish["schema"] = pa_schema_with(finish["schema"], answered_by_fields())
            steps.append(RowStep(finish_batch, finish))
    return steps


def _answer_steps(plan: RunPlan, planned: PlannedStage,
                  fused: Mapping[str, Any]) -> tuple[RowStep, RowStep] | None:
    """A chat stage's steps around its model (:mod:`toolkit.run.answer_cache`): the
    answer cache's look-up, and each repeated prompt sent once, before it; the
    answers settled and stored after it. Only with ``cache:``: a run without one has
    the same steps, and the same Ray Data plan, as before the cache existed."""
    cache = plan.spec.cache
    if not planned.contract.chat or cache is None:
        return None
    location = None if cache is None else (
        cache.dir if "://" in cache.dir else os.path.abspath(os.path.expanduser(cache.dir)))
    before = {"context": stage_context(planned.model, planned.engine),
              "input_column": _input_column(planned.engine), "cache": location,
              "sampled": cache is not None and cache.sampled}
    return (RowStep(look_up_answers, before, fused, whole_blocks=True),
            RowStep(settle_answers, {"cache": location}))


def answered_by_fields() -> list["pa.Field"]:
    """The column a run with an answer cache writes after the output's own: who
    answered the row, where not its model (``cache``, ``repeat``)."""
    import pyarrow as pa

    return [pa.field(ANSWERED_BY_COLUMN, pa.string())]


def _input_column(engine: EngineSettings) -> str:
    """The column a chat stage's engine reads its prompt from."""
    return MESSAGES_COLUMN if getattr(engine, "apply_chat_template", True) else PROMPT_COLUMN


def _prepare(plan: RunPlan, index: int, planned: PlannedStage) -> BatchStep:
    """The stage's prepare step: its preprocess, for its task."""
    stage, contract, options = planned.definition, planned.contract, plan.options
    if contract.chat:
        kwargs: dict[str, Any] = {"sampling_params": engine_sampling_params(
            plan.spec.sampling, planned.structured_output),
            "input_column": _input_column(planned.engine)}
        prepare: Prepare = prepare_row
    else:  # the task's own input columns instead
        kwargs, prepare = {"input_columns": contract.inputs}, prepare_task_row
    if stage.preprocess_batch is not None and not contract.chat and index == 0:
        return prepare_table, {"preprocess_batch": stage.preprocess_batch, "options": options,
                               "input_columns": contract.inputs}
    return stage_rows_step(prepare, {"preprocess": stage.preprocess, "options": options,
                                     **kwargs}, after_earlier_stage=index > 0)


def _finish(plan: RunPlan, planned: PlannedStage, input_schema: "pa.Schema",
            results: Mapping[str, str], last: bool, checked: bool) -> dict[str, Any]:
    """The keyword arguments of the stage's finish step (:func:`finish_batch`): its
    postprocess, and the shape its rows leave in."""
    stage, spec = planned.definition, plan.spec
    return {
        "postprocess": stage.postprocess,
        "options": plan.options,
        "schema": output_schema(input_schema, results, plan.dropped_columns, checked) if last
        else between_stages_schema(input_schema, results),
        "result_columns": list(planned.results),
        "engine_output": planned.contract.main_output,
        "strict_id_column": plan.data.id_column if spec.strict else None,
        "checks": row_checks(plan.checks, plan.sampling.max_tokens, plan.job) if checked else None,
        "postprocess_batch": stage.postprocess_batch,
    }


def stage_rows_step(prepare: Prepare, fn_kwargs: dict[str, Any],
                    after_earlier_stage: bool) -> BatchStep:
    """``prepare`` on every row of a batch (:func:`~toolkit.run.row_steps.prepare_batch`);
    after an earlier stage, keeping the rows it failed as they are."""
    if after_earlier_stage:
        fn_kwargs = {"prepare": prepare_after_earlier_stage, "inner": prepare, **fn_kwargs}
    else:
        fn_kwargs = {"prepare": prepare, **fn_kwargs}
    return prepare_batch, fn_kwargs


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


def between_stages_schema(
    input_schema: "pa.Schema", result_columns: Mapping[str, str]
) -> "pa.Schema":
    """The rows after an earlier stage: input columns, the stages' results so far, ``error``.

    Whatever the stage's engine added besides (its inputs, ``messages``, token counts,
    Ray Data LLM's own columns) is dropped there, so the next stage starts from the same
    columns whichever engine ran.
    """
    import pyarrow as pa

    skip = {*result_columns, ERROR_COLUMN}
    fields = [f.with_nullable(True) for f in input_schema if f.name not in skip]
    fields += [pa.field(name, arrow_type(alias)) for name, alias in result_columns.items()]
    fields.append(pa.field(ERROR_COLUMN, pa.string()))
    return pa.schema(fields)


def clashing_result_columns(named_columns: list[tuple[str, Mapping[str, str]]]) -> list[str]:
    """``column (stage a, stage b)`` for each result column two stages both write."""
    owner: dict[str, str] = {}
    clashes = []
    for stage, columns in named_columns:
        for column in columns:
            if column in owner:
                clashes.append(f"{column} ({owner[column]}, {stage})")
            owner.setdefault(column, stage)
    return clashes
