"""What a job is: its contract with the shared pipeline.

A job turns one input row into chat messages (``preprocess``) and one generated
answer back into result columns (``postprocess``); the pipeline does the rest
(reading, the engine, error rows, resume, writing, the summary). Where jobs come
from (the built-ins, a user's YAML or Python file) is :mod:`toolkit.spec.jobs.catalog`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Generic, TypeVar

from toolkit.spec.models import MAIN_STAGE, JobSpec, StrictModel
from toolkit.spec.stages import StageDefinition, no_constraint

OptionsT = TypeVar("OptionsT")


def spec_options(spec: JobSpec) -> Any:
    """What most jobs' hooks read: the spec's ``options`` section."""
    return spec.options


@dataclass(frozen=True)
class JobDefinition(Generic[OptionsT]):
    """A job's contract with the shared pipeline.

    Every hook takes the job's *options* (``options_of(spec)``; by default the
    spec's ``options`` section), which travel to the Ray workers with it, so the
    hooks must be plain module-level functions of picklable values.

    Attributes:
        name: The CLI name, e.g. ``text-industry``.
        description: One line for ``toolkit jobs``.
        spec_model: The job's ``JobSpec`` subclass (its ``options`` narrowed).
        preprocess: ``(row, options) -> {"messages": [...]}`` for one input row.
            Raising ``ValueError`` makes that row an error row (the message is
            kept in its ``error`` column) instead of failing the job. It may also
            return the row's own ``sampling_params`` (vLLM names: ``max_tokens``,
            ``temperature``, ``top_p``, ``seed``, ``structured_outputs``), which
            override the spec's for that row; a ``None`` keeps the spec's value.
        postprocess: ``(row, options) -> {result columns}`` from a row that has
            ``generated_text``. Raising ``ValueError`` makes it an error row.
        required_columns: ``options -> columns`` the input must have besides
            ``data.id_column``; checked before any model loads.
        structured_output: ``options -> constraint`` in vLLM's structured-outputs
            form (``{"choice": [...]}``, ``{"regex": ...}``, ``{"json": schema}``) or
            ``None`` (the default: free text); both engines honour it.
        result_columns: ``options -> {column: Arrow type alias}`` of what
            postprocess returns; null on error rows, the same type in every file.
        defaults: The spec's first layer (``data``, ``engine``, ``sampling``, ...),
            under the job file, ``-f``, flags and ``--set``.
        smoke_overrides: dotted spec paths set by ``--smoke`` (sample input and
            tiny model) before the user's own flags are applied.
        drop_columns: ``options -> columns`` of the input not to write (e.g.
            image bytes).
        summary_columns / summarize: job-specific figures for the run summary
            (e.g. accuracy), computed from just these columns of the output.
        options_of: Picks the hooks' options out of a validated spec.
        stages: Model stages that run before the main one, in order, each with
            its own engine section ``stages.<name>`` in the spec (see
            :mod:`toolkit.spec.stages`). A row that fails in one is an error row
            the later stages skip. Empty for a one-stage job.
        preprocess_batch / postprocess_batch: the hooks for a whole block at once,
            Arrow in and out (see :class:`~toolkit.spec.stages.StageDefinition`);
            a job that has them pays no Python per row around its model.
        source_dir: The folder of the user's job file (None for a built-in or a
            module): the classes a spec names for ``engine.kind: python`` may come
            from code in it, as from the folder the command runs from (see
            :mod:`toolkit.spec.jobs.user_classes`).
    """

    name: str
    description: str
    spec_model: type[JobSpec]
    preprocess: Callable[[dict[str, Any], OptionsT], dict[str, Any]]
    postprocess: Callable[[dict[str, Any], OptionsT], dict[str, Any]]
    required_columns: Callable[[OptionsT], list[str]]
    result_columns: Callable[[OptionsT], dict[str, str]]
    structured_output: Callable[[OptionsT], dict[str, Any] | None] = no_constraint
    defaults: Mapping[str, Any] = field(default_factory=dict)
    smoke_overrides: Mapping[str, Any] = field(default_factory=dict)
    drop_columns: Callable[[OptionsT], list[str]] | None = None
    summary_columns: tuple[str, ...] = ()
    summarize: Callable[[Any], dict[str, int | float]] | None = None
    multimodal: bool = False
    options_of: Callable[[JobSpec], OptionsT] = spec_options
    stages: tuple[StageDefinition[OptionsT], ...] = ()
    source_dir: Path | None = None
    preprocess_batch: Callable[[Any, OptionsT], Any] | None = None
    postprocess_batch: Callable[[Any, OptionsT], Any] | None = None

    def __post_init__(self) -> None:
        names = [stage.name for stage in self.stages]
        if len(set(names)) != len(names) or MAIN_STAGE in names:
            raise ValueError(f"job {self.name}: stage names must differ from each other "
                             f"and from {MAIN_STAGE!r}, got {names}")

    @property
    def stage_list(self) -> tuple[StageDefinition[OptionsT], ...]:
        """Every model stage in the order rows go through them: :attr:`stages`, then the
        main one (named ``engine``, from the job's own hooks)."""
        main = StageDefinition(
            name=MAIN_STAGE, preprocess=self.preprocess, postprocess=self.postprocess,
            result_columns=self.result_columns, structured_output=self.structured_output,
            required_columns=self.required_columns, multimodal=self.multimodal,
            preprocess_batch=self.preprocess_batch, postprocess_batch=self.postprocess_batch)
        return (*self.stages, main)


__all__ = ["JobDefinition", "JobSpec", "StageDefinition", "StrictModel", "spec_options"]
