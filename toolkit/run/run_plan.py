"""A run, resolved once: what :func:`~toolkit.run.preflight.preflight` found and decided.

Everything after the checks reads the plan instead of going back to the spec, and no
function after them takes the spec: the pipeline its stages (each with its engine
section, task contract, result columns and constraint, worked out once from the job's
options), input reading the rows the checks counted and the samples, progress and the
summary the run directory, its state and its stages, the cluster's resource check the
stages; the sections preflight takes as they are (``sampling``, ``checks``,
``stop_loss``, ``compute``) are read through the plan. The spec stays in the plan as
the record of what was asked (the run directory's fingerprint, the manifest).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from toolkit.engines.model_source import ModelLocation
from toolkit.engines.registry import EngineKind, engine_kind
from toolkit.run.output.run_directory import RunDirectory, RunState
from toolkit.run.output.writer_lock import WriterLock
from toolkit.spec.cascade import CASCADE_FIELD, CascadeConfig
from toolkit.spec.engine_settings import EngineSettings
from toolkit.spec.job_definition import JobDefinition
from toolkit.spec.models import (
    MAIN_STAGE,
    CacheConfig,
    ComputeConfig,
    DataConfig,
    JobSpec,
    SamplingConfig,
)
from toolkit.spec.quality import ChecksConfig, StopLossConfig
from toolkit.spec.row_contract import TASK_CONTRACTS, TaskContract
from toolkit.spec.sample_sources import SampleProvider
from toolkit.spec.stages import StageDefinition


@dataclass(frozen=True)
class PlannedStage:
    """One model stage as it will run: the job's hooks, the spec's engine section, its
    engine kind and where its model loads from, all worked out here once; the
    pipeline turns it into its steps (:mod:`toolkit.run.stage_steps`).

    Attributes:
        field: The engine section's spec path (``engine``, ``stages.NAME``), as
            errors and notices name it.
        kind: The engine section's kind, from the registry.
        model: Where ``engine.model`` loads from; preflight gives a ``sample:`` model
            the run's sample provider, which builds it where it loads.
        results: Result columns and their Arrow type aliases.
        required: Input columns the stage reads.
        structured_output: The constraint every row's sampling params carry (a
            generate stage), or None.
    """

    definition: StageDefinition[Any]
    field: str
    engine: EngineSettings
    kind: EngineKind
    model: ModelLocation
    contract: TaskContract
    results: Mapping[str, str]
    required: tuple[str, ...]
    structured_output: dict[str, Any] | None
    #: Set on a cascade's small-model stage: it answers the main stage's rows first,
    #: and this decides which go on to the main stage.
    cascade: CascadeConfig | None = None

    @property
    def name(self) -> str:
        return CASCADE_FIELD if self.cascade is not None else self.definition.name


def plan_stages(job: JobDefinition[Any], spec: JobSpec, options: Any) -> tuple[PlannedStage, ...]:
    """The job's model stages in the order rows go through them, each with its engine;
    with a cascade, its small model's stage just before the main one. Each model is
    located as the spec names it, with no sample provider: the caller that has one
    (preflight, a token count) gives it to the stages' ``sample:`` models."""
    planned = []
    for stage in job.stages:
        if stage.name == MAIN_STAGE and spec.cascade is not None:
            small = spec.cascade_engine
            assert small is not None
            contract = TASK_CONTRACTS[small.task]
            planned.append(PlannedStage(
                definition=stage, engine=small, kind=engine_kind(small),
                model=ModelLocation(small.model), field=CASCADE_FIELD, contract=contract,
                results=dict(stage.result_columns(options)),
                required=tuple(stage.required_columns(options)),
                structured_output=stage.structured_output(options) if contract.chat else None,
                cascade=spec.cascade))
        engine = spec.stage_engine(stage.name)
        contract = TASK_CONTRACTS[engine.task]
        planned.append(PlannedStage(
            definition=stage, engine=engine, kind=engine_kind(engine),
            model=ModelLocation(engine.model),
            field="engine" if stage.name == MAIN_STAGE else f"stages.{stage.name}",
            contract=contract, results=dict(stage.result_columns(options)),
            required=tuple(stage.required_columns(options)),
            structured_output=stage.structured_output(options) if contract.chat else None))
    return tuple(planned)


@dataclass(frozen=True)
class RunPlan:
    """A checked run, its folder held (see :meth:`release`).

    Attributes:
        options: The job's hooks' options (``job.options_of(spec)``).
        stages: Every model stage, in the order rows go through them.
        input_rows: The rows of the input the checks counted (every id read and
            found unique), so the run needn't read them again; None where the
            checks couldn't (a folder, a remote file with ``--rows``, samples).
        state: What the run must do in its folder: start, resume, or nothing.
        resumable: False for a streamed Hugging Face dataset, whose ids can't be
            read ahead.
        samples: Serves ``sample:`` inputs and models (smoke runs).
    """

    job: JobDefinition[Any]
    spec: JobSpec
    options: Any
    stages: tuple[PlannedStage, ...]
    input_rows: int | None
    run_dir: RunDirectory
    state: RunState
    resumable: bool
    lock: WriterLock
    samples: SampleProvider | None = None

    @property
    def data(self) -> DataConfig:
        return self.spec.data

    # The sections preflight takes as they are, read through the plan (the parts
    # toolkit.spec.run_settings names), so that nothing after it takes the spec.
    @property
    def sampling(self) -> SamplingConfig:
        return self.spec.sampling

    @property
    def compute(self) -> ComputeConfig:
        return self.spec.compute

    @property
    def checks(self) -> ChecksConfig:
        return self.spec.checks

    @property
    def stop_loss(self) -> StopLossConfig:
        return self.spec.stop_loss

    @property
    def cascade(self) -> CascadeConfig | None:
        return self.spec.cascade

    @property
    def cache(self) -> CacheConfig | None:
        return self.spec.cache

    @property
    def uses_sample_model(self) -> bool:
        """The spec asked for a tiny random-weight model: results are not meaningful."""
        return self.spec.uses_sample_model

    @property
    def model_stages(self) -> list[tuple[str, EngineSettings]]:
        """Each stage's engine section with its spec path, in the order rows go
        through them (:class:`~toolkit.spec.run_settings.EngineStages`)."""
        return [(stage.field, stage.engine) for stage in self.stages]

    @property
    def dropped_columns(self) -> list[str]:
        """Input columns the job doesn't write (e.g. image bytes)."""
        return self.job.drop_columns(self.options) if self.job.drop_columns else []

    @property
    def required_columns(self) -> list[str]:
        """Every column some stage reads, then the id column, once each."""
        return list(dict.fromkeys([*(c for s in self.stages for c in s.required),
                                   self.data.id_column]))

    @property
    def batch_size(self) -> int:
        """The smallest stage batch: a result file holds whole batches of every stage."""
        return min(stage.engine.batch_size for stage in self.stages)

    def with_engines(self, engines: Mapping[str, EngineSettings]) -> RunPlan:
        """The plan with some stages' engine sections replaced (by field); the spec
        changed to match, so the run's record says what ran."""
        if not engines:
            return self
        stages = tuple(dataclasses.replace(stage, engine=engines.get(stage.field, stage.engine))
                       for stage in self.stages)
        return dataclasses.replace(self, spec=self.spec.with_engines(engines), stages=stages)

    def release(self) -> None:
        """The run is over (done, failed or stopped): another run may write the folder."""
        self.lock.release()
