"""Model stages: each engine kind (one package, ``toolkit/engines/<kind>/``) applies
its own to a dataset. Which one runs is configuration (``engine.kind``), not code: the
run's plan holds each stage's kind, from the registry (:mod:`toolkit.engines.registry`),
and calls its ``apply``; what the pipeline asks of a kind's capabilities is in
:mod:`toolkit.engines.kind_dispatch`. Beside the kinds live what several share: the
actor-pool model stage (:mod:`~toolkit.engines.batch_stage`), where a model comes from
(:mod:`~toolkit.engines.model_source`), image decoding and the torch checks.

This module holds only what a kind's stage is handed and gives back (it imports no
kind, so the kinds' modules import it freely)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from toolkit.engines.model_source import ModelLocation
    from toolkit.spec.engine_settings import EngineSettings


class EngineRecords(Protocol):
    """Small JSON records an engine keeps in the run folder as it goes (a provider's
    file and batch ids), so a rerun of the run finds them. The run layer hands one
    over (:class:`toolkit.run.output.engine_records.RunFolderRecords`); it is
    picklable, so the engine's Ray tasks read and write it too."""

    def claim(self) -> None:
        """On the driver, before any record is written: the run folder's manifest
        records the folder as the toolkit's."""

    def read_all(self) -> dict[str, dict[str, Any]]:
        """Every record, by name."""

    def write(self, name: str, content: dict[str, Any]) -> None:
        """Write record ``name`` whole (replacing it), once the run still holds its
        folder."""


@dataclass(frozen=True)
class StageInputs:
    """What a model stage takes from its job besides its engine section.

    Attributes:
        multimodal: A generate stage whose messages carry images.
        model: Where the stage's model loads from, as preflight found it (None:
            ``engine.model`` as it is). A ``sample:`` model travels to the engine's
            workers as such and is built where they run.
        options: The job's options (a user's predictor class reads its columns there).
        id_column: The input's id column (``data.id_column``), which names a row to
            a service that answers rows out of order (a Batch API's ``custom_id``).
        records: Where the stage may keep records of its own in the run folder
            (None: nowhere, e.g. a token count outside a run).
    """

    multimodal: bool = False
    model: "ModelLocation | None" = None
    options: Any = None
    id_column: str | None = None
    records: EngineRecords | None = None


#: A function of an Arrow batch, and the keyword arguments it is called with.
BatchStep = tuple[Callable[..., Any], dict[str, Any]]


def batch_step_resources(engine: "EngineSettings") -> dict[str, Any]:
    """The ``map_batches`` arguments of a stage run as one function
    (:func:`~toolkit.engines.kind_dispatch.engine_batch_step`): its engine's CPUs and
    tasks at most."""
    return {"num_cpus": engine.num_cpus, "concurrency": engine.pool_size[1]}


