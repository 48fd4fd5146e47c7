"""What the code after preflight reads of a run, each part as a small protocol.

After :func:`~toolkit.run.preflight.preflight` a run is its
:class:`~toolkit.run.run_plan.RunPlan`, and no function takes the raw spec: each asks
for the part it reads (the input and output, the model stages' engine sections, the
stop-loss), and the plan provides every one. A :class:`~toolkit.spec.models.JobSpec`
provides them too, so a library caller or a test without a plan passes its spec where
a plan would go; the results are the same (a plan's stages are the spec's, resolved).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Protocol, TypeVar

from toolkit.spec.cascade import CascadeConfig
from toolkit.spec.engine_settings import EngineSettings
from toolkit.spec.models import CacheConfig, DataConfig, SamplingConfig
from toolkit.spec.quality import ChecksConfig, StopLossConfig


class RunData(Protocol):
    """The run's input and output (``data``)."""

    @property
    def data(self) -> DataConfig: ...


class EngineStages(Protocol):
    """Every model stage's engine section with its spec path (``stages.NAME``,
    ``cascade``, ``engine``), in the order rows go through them: the main one last."""

    @property
    def model_stages(self) -> Sequence[tuple[str, EngineSettings]]: ...


class RefittableStages(EngineStages, Protocol):
    """Engine stages that can be run with some sections replaced (smaller pools)."""

    def with_engines(self: StagesT, engines: Mapping[str, EngineSettings]) -> StagesT: ...


StagesT = TypeVar("StagesT", bound=RefittableStages)


class StopLossRules(Protocol):
    """What the stop-loss judges by (``stop_loss``) and advises on (``sampling``)."""

    @property
    def stop_loss(self) -> StopLossConfig: ...

    @property
    def sampling(self) -> SamplingConfig: ...


class SummarizedRun(RunData, EngineStages, Protocol):
    """What the end-of-run summary reads besides the written rows."""

    @property
    def checks(self) -> ChecksConfig: ...

    @property
    def cascade(self) -> CascadeConfig | None: ...

    @property
    def cache(self) -> CacheConfig | None: ...

    @property
    def uses_sample_model(self) -> bool: ...
