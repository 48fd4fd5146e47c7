"""Multi-stage jobs: the model stages a job runs before its main one.

A job's main model stage is ``engine`` (its last). A job may declare earlier
stages, in order, each with its own engine section under ``stages.<name>`` in
the spec (model, batch size, concurrency, accelerator: what ``engine`` has), so
``--set stages.sentiment.batch_size=32`` tunes one stage without touching the
others. Each stage has its own row functions, like the main stage's: a
``preprocess`` that gives the stage's task its inputs (``prompt`` for classify,
``messages`` for generate, see :data:`toolkit.spec.row_contract.TASK_CONTRACTS`)
and a ``postprocess`` that turns the engine's outputs into columns the later
stages read and the output keeps. A row that fails in a stage is an error row
from then on: later stages skip it and it is written with its error.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Callable, Generic, TypeVar

OptionsT = TypeVar("OptionsT")

#: Stage names go into dotted paths (``stages.NAME.batch_size``): no dots.
_STAGE_NAME = re.compile(r"^[a-z][a-z0-9_-]*$")


def no_constraint(options: Any) -> None:
    """A stage whose generated text is free (the default ``structured_output``)."""
    return None


def no_columns(options: Any) -> list[str]:
    """A stage that reads no input column the job doesn't already require."""
    return []


@dataclass(frozen=True)
class StageDefinition(Generic[OptionsT]):
    """One model stage that runs before the job's main stage (``engine``).

    The hooks take the job's options, as the job's own do, and must be plain
    module-level functions (they travel to the Ray workers).

    Attributes:
        name: The stage's key under ``stages`` in the spec (``stages.sentiment``):
            lower-case letters, digits, ``-`` and ``_``.
        preprocess: ``(row, options) -> inputs`` for the stage's ``task``
            (``{"prompt": text}`` for classify and embed, ``{"messages": [...]}``
            for generate, ...). Raising ``ValueError`` makes the row an error row.
        postprocess: ``(row, options) -> {column: value}`` from the engine's
            outputs (``label``/``score``, ``generated_text``, ...); these columns
            are added to the row for the later stages and written to the output.
        result_columns: ``options -> {column: Arrow type alias}`` of what
            postprocess returns; null on error rows.
        structured_output: ``options -> constraint`` for a generate stage (as
            :attr:`toolkit.spec.job_definition.JobDefinition.structured_output`).
        required_columns: ``options -> input columns`` this stage reads, checked
            before any model loads.
        multimodal: a generate stage whose messages carry images.
        preprocess_batch: ``(table, options) -> table`` doing what ``preprocess``
            does for a whole block at once (Arrow in, Arrow out): a table of the
            same rows with the task's input columns and ``error`` (the reason a
            row is rejected, null for the others); used instead of ``preprocess``
            on a one-stage job's rows, so no row goes through Python.
        postprocess_batch: ``(table, options) -> table`` doing what
            ``postprocess`` does for a whole block: the result columns and
            ``error`` (null where the row's results are good). It sees every row;
            those that failed before it are rejected whatever it says. Raising
            makes that block go through ``postprocess`` row by row instead.
    """

    name: str
    preprocess: Callable[[dict[str, Any], OptionsT], dict[str, Any]]
    postprocess: Callable[[dict[str, Any], OptionsT], dict[str, Any]]
    result_columns: Callable[[OptionsT], dict[str, str]]
    structured_output: Callable[[OptionsT], dict[str, Any] | None] = no_constraint
    required_columns: Callable[[OptionsT], list[str]] = no_columns
    multimodal: bool = False
    preprocess_batch: Callable[[Any, OptionsT], Any] | None = None
    postprocess_batch: Callable[[Any, OptionsT], Any] | None = None

    def __post_init__(self) -> None:
        if not _STAGE_NAME.match(self.name):
            raise ValueError(
                f"stage name {self.name!r}: use lower-case letters, digits, '-' and '_' "
                "(it is a key in dotted paths such as stages.NAME.batch_size)"
            )


def stage_section_problems(
    stages: Sequence[StageDefinition[Any]], sections: Any, job_name: str
) -> list[str]:
    """``field.path: problem`` lines for a spec's ``stages`` against the job's stages.

    Every stage the job defines needs a section; a section for a stage the job
    doesn't define is an error naming it (a typo would otherwise be ignored).
    """
    if sections is None:
        sections = {}
    if not isinstance(sections, Mapping):
        return []  # the spec model reports the wrong type
    names = [stage.name for stage in stages]
    problems = []
    for name in sections:
        if name not in names:
            known = (f"job {job_name} has stages: {', '.join(names)}" if names
                     else f"job {job_name} has no stages before engine")
            problems.append(f"  stages.{name}: unknown model stage ({known})")
    for name in names:
        if name not in sections:
            problems.append(f"  stages.{name}: required, but not set (the engine section "
                            f"of job {job_name}'s stage {name!r})")
    return problems
