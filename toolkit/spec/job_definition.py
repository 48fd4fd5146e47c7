"""What a job is: its contract with the shared pipeline.

A job is its model stages in the order rows go through them, the main one
(``engine``) last, plus what surrounds them: the spec model, defaults, what
``--smoke`` sets, the summary's own figures. Each stage turns a row into its
model's inputs (``preprocess``) and the model's outputs back into result columns
(``postprocess``); the pipeline does the rest (reading, the engine, error rows,
resume, writing, the summary). Where jobs come from (the built-ins, a user's YAML
or Python file) is :mod:`toolkit.spec.jobs.catalog`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Generic, TypeVar

from toolkit.spec.models import MAIN_STAGE, JobSpec, StrictModel
from toolkit.spec.stages import StageDefinition, no_columns, no_constraint

OptionsT = TypeVar("OptionsT")


def spec_options(spec: JobSpec) -> Any:
    """What most jobs' hooks read: the spec's ``options`` section."""
    return spec.options


@dataclass(frozen=True, init=False)
class JobDefinition(Generic[OptionsT]):
    """A job's contract with the shared pipeline.

    Every hook takes the job's *options* (``options_of(spec)``; by default the
    spec's ``options`` section), which travel to the Ray workers with it, so the
    hooks must be plain module-level functions of picklable values.

    A job is written either with its stages::

        JobDefinition(name="review-triage", description=..., spec_model=...,
                      stages=(StageDefinition(name="sentiment", ...),
                              StageDefinition(name="engine", preprocess=..., ...)))

    or, for a job of one model stage, with that stage's hooks as keywords
    (``preprocess=``, ``postprocess=``, ``result_columns=``, ``required_columns=``,
    ``structured_output=``, ``multimodal=``, ``preprocess_batch=``,
    ``postprocess_batch=``: :class:`~toolkit.spec.stages.StageDefinition`'s), which
    makes the ``engine`` stage from them. The keywords may also follow earlier
    ``stages`` (the form job files used before stages were the whole job).

    Attributes:
        name: The CLI name, e.g. ``text-industry``.
        description: One line for ``toolkit jobs``.
        spec_model: The job's ``JobSpec`` subclass (its ``options`` narrowed).
        stages: Every model stage in the order rows go through them, the main one,
            named ``engine``, last; each earlier stage has its own engine section
            ``stages.<name>`` in the spec (see :mod:`toolkit.spec.stages`). A row
            that fails in one is an error row the later stages skip.
        defaults: The spec's first layer (``data``, ``engine``, ``sampling``, ...),
            under the job file, ``-f``, flags and ``--set``.
        smoke_overrides: dotted spec paths set by ``--smoke`` (sample input and
            tiny model) before the user's own flags are applied.
        drop_columns: ``options -> columns`` of the input not to write (e.g.
            image bytes).
        summary_columns / summarize: job-specific figures for the run summary
            (e.g. accuracy), computed from just these columns of the output.
        options_of: Picks the hooks' options out of a validated spec.
        complete_spec: ``(layered spec data, smoke) -> None``, called just before the
            spec is validated, to fill in what the job's input decides (the
            openai-batch job: the endpoint its file is for, the task that answers
            it and, under ``--smoke``, that task's tiny model); None: nothing.
        source_dir: The folder of the user's job file (None for a built-in or a
            module): the classes a spec names for ``engine.kind: python`` may come
            from code in it, as from the folder the command runs from (see
            :mod:`toolkit.spec.jobs.user_classes`).
    """

    name: str
    description: str
    spec_model: type[JobSpec]
    stages: tuple[StageDefinition[OptionsT], ...]
    defaults: Mapping[str, Any]
    smoke_overrides: Mapping[str, Any]
    drop_columns: Callable[[OptionsT], list[str]] | None
    summary_columns: tuple[str, ...]
    summarize: Callable[[Any], dict[str, int | float]] | None
    options_of: Callable[[JobSpec], OptionsT]
    source_dir: Path | None
    complete_spec: Callable[[dict[str, Any], bool], None] | None

    def __init__(
        self,
        name: str,
        description: str,
        spec_model: type[JobSpec],
        stages: Sequence[StageDefinition[OptionsT]] = (),
        *,
        defaults: Mapping[str, Any] | None = None,
        smoke_overrides: Mapping[str, Any] | None = None,
        drop_columns: Callable[[OptionsT], list[str]] | None = None,
        summary_columns: tuple[str, ...] = (),
        summarize: Callable[[Any], dict[str, int | float]] | None = None,
        options_of: Callable[[JobSpec], OptionsT] = spec_options,
        source_dir: Path | None = None,
        complete_spec: Callable[[dict[str, Any], bool], None] | None = None,
        preprocess: Callable[[dict[str, Any], OptionsT], dict[str, Any]] | None = None,
        postprocess: Callable[[dict[str, Any], OptionsT], dict[str, Any]] | None = None,
        result_columns: Callable[[OptionsT], dict[str, str]] | None = None,
        required_columns: Callable[[OptionsT], list[str]] = no_columns,
        structured_output: Callable[[OptionsT], dict[str, Any] | None] = no_constraint,
        multimodal: bool = False,
        preprocess_batch: Callable[[Any, OptionsT], Any] | None = None,
        postprocess_batch: Callable[[Any, OptionsT], Any] | None = None,
    ) -> None:
        stages = tuple(stages)
        if preprocess is not None or postprocess is not None or result_columns is not None:
            if preprocess is None or postprocess is None or result_columns is None:
                raise ValueError(f"job {name}: its main stage needs preprocess, postprocess "
                                 "and result_columns together")
            stages = (*stages, StageDefinition(
                name=MAIN_STAGE, preprocess=preprocess, postprocess=postprocess,
                result_columns=result_columns, required_columns=required_columns,
                structured_output=structured_output, multimodal=multimodal,
                preprocess_batch=preprocess_batch, postprocess_batch=postprocess_batch))
        names = [stage.name for stage in stages]
        if not names or names[-1] != MAIN_STAGE:
            raise ValueError(f"job {name}: its last stage must be the main one, named "
                             f"{MAIN_STAGE!r} (or give its preprocess, postprocess and "
                             f"result_columns as keywords); got stages {names}")
        if len(set(names)) != len(names):
            raise ValueError(f"job {name}: stage names must differ from each other, "
                             f"got {names}")
        for attribute, value in (
                ("name", name), ("description", description), ("spec_model", spec_model),
                ("stages", stages), ("defaults", dict(defaults or {})),
                ("smoke_overrides", dict(smoke_overrides or {})),
                ("drop_columns", drop_columns), ("summary_columns", tuple(summary_columns)),
                ("summarize", summarize), ("options_of", options_of),
                ("source_dir", source_dir), ("complete_spec", complete_spec)):
            object.__setattr__(self, attribute, value)

    @property
    def main_stage(self) -> StageDefinition[OptionsT]:
        """The last model stage, ``engine``: the spec's ``engine`` section runs it."""
        return self.stages[-1]

    @property
    def earlier_stages(self) -> tuple[StageDefinition[OptionsT], ...]:
        """The stages before the main one, each with a ``stages.<name>`` section."""
        return self.stages[:-1]


__all__ = ["JobDefinition", "JobSpec", "StageDefinition", "StrictModel", "spec_options"]
