"""What the pipeline asks an engine section's kind, as named functions (its model
stage is the planned stage's ``kind.apply``): whether that stage is one function of a batch
(:func:`runs_as_batch_step`, :func:`engine_batch_step`), the resources that let Ray Data
fuse the step before it into it (:func:`row_step_resources`), and its check on the
driver (:func:`preflight_engine`). Each reads the kind's
:class:`~toolkit.engines.engine_kind.EngineCapabilities` from the registry, so no caller
pokes at a kind's flags."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from toolkit.engines import BatchStep, StageInputs
from toolkit.engines.registry import capabilities

if TYPE_CHECKING:
    from toolkit.spec.engine_settings import EngineSettings


def runs_as_batch_step(engine: "EngineSettings") -> bool:
    """The model stage of ``engine`` is one function of an Arrow batch on CPU tasks
    (:func:`engine_batch_step`), not a pool of model actors, a stage of several
    operators or one holding a GPU."""
    return capabilities(engine).batch_step is not None and not engine.gpus_per_worker


def engine_batch_step(engine: "EngineSettings", stage: StageInputs) -> BatchStep:
    """The model stage of ``engine`` as one function of an Arrow batch (where
    :func:`runs_as_batch_step`), its model loaded here.

    The pipeline runs the stage's preprocess, this function and its postprocess
    as one, and Ray Data fuses the writing of the results into the same tasks
    (:func:`toolkit.engines.batch_step_resources`). Ray fuses a chain of maps into a write only that
    far: once a write has joined the map before it, the pair no longer fuses with an
    earlier map that caps its tasks (``concurrency``). Apart, every piece made two more
    trips through the object store and two more tasks, which on 2 CPUs also landed on
    a second worker that unpickled the model again: tabular-predict at a million rows
    took 1.1 s longer (6.5 s of execution instead of 5.4).
    """
    step = capabilities(engine).batch_step
    if step is None:
        raise ValueError(f"engine.kind {engine.kind} is not a function of a batch")
    return step(engine, stage)


#: CPUs of a row step that stays apart from its engine. Not the read tasks' 1: a step
#: that asked for the same would fuse into the read task after its streaming
#: repartition (:func:`toolkit.run.input.source.in_pieces`), whose output buffer then
#: merges the pieces back into one block (a 640-row Parquet file written as one file).
UNFUSED_ROW_STEP_CPUS = 0.5


def row_step_resources(engine: "EngineSettings") -> dict[str, Any]:
    """The ``map_batches`` arguments for a step on the rows right before ``engine``'s
    stage (the job's preprocess), so that Ray Data fuses the two into one operator.

    Ray fuses a task step into the next map only when both ask for the same CPUs and
    pool size; apart, every block makes a round trip through the object store between
    them (tabular-predict at a million rows: one more operator of ten thousand-row
    blocks). A stage holding a GPU, one made of several operators (Ray Data LLM's
    processor), or one whose workers' restarts are bounded (an actor-only option a
    task step can't take, so the two could never fuse) gets a step of its own on CPU
    tasks, off the GPU worker's time (:data:`UNFUSED_ROW_STEP_CPUS`).
    """
    if not capabilities(engine).fuses_row_steps or engine.gpus_per_worker:
        return {"num_cpus": UNFUSED_ROW_STEP_CPUS}
    return {"num_cpus": engine.num_cpus, "concurrency": engine.pool_size[1]}


def preflight_engine(engine: "EngineSettings") -> None:
    """Fail on the driver, before any row is read, when the engine can't work (e.g.
    an http engine's server is unreachable); most kinds load their model in their
    workers and have nothing to check here.

    Raises:
        ToolkitError: naming what is wrong (an unreachable server: exit code 3).
    """
    check = capabilities(engine).preflight
    if check is not None:
        check(engine)
