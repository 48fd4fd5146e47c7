"""Ray Data LLM's vLLM stage, with an engine that fails to start ending the run at once.

Ray Data LLM starts vLLM in its stage actor's ``__init__``. When that raises, Ray
Data counts an actor death at initialisation (``max_consecutive_actor_init_deaths``,
0 by default: the run fails), but the actor also aborts as it exits, and when Ray
sees the process die before it sees the error it restarts the actor
(``max_restarts=-1``, Ray Data's default for actor pools): vLLM fails again, and the
run shows "loading the model" for minutes before it ends with only ``Engine core
initialization failed`` (vLLM's reason stays in Ray's log).

Here the actor instead survives a failed start: it keeps vLLM's reason and raises it
on the first batch it is given. An error raised by a batch is not retried
(``actor_task_retry_on_errors`` is off), so the run stops within seconds of the
failed start, saying why, and keeps what it wrote. An engine that started and dies
later (its ``EngineCore`` killed, ``EngineDeadError``) is left to Ray Data LLM, which
exits the actor so that Ray restarts it and retries its rows.

Heavy (Ray Data LLM's stage imports torch): imported only where a processor is built.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any, AsyncIterator

from ray.data import DataContext
from ray.llm._internal.batch.stages.vllm_engine_stage import (
    vLLMEngineStageUDF as RayDataLlmEngineUDF,
)

from toolkit.engines.vllm.start_failure import (
    OutputSince,
    engine_start_error,
    engine_start_reason,
    exception_reason,
)
from toolkit.errors import EngineStartError

if TYPE_CHECKING:
    from ray.data.llm import Processor

logger = logging.getLogger(__name__)

#: Ray Data LLM's name for its vLLM stage in a processor.
ENGINE_STAGE = "vLLMEngineStage"


# The same class name as Ray Data LLM's: it names the Ray Data operator and the actor
# process (``ray::MapWorker(MapBatches(vLLMEngineStageUDF))``) users and tools look for.
class vLLMEngineStageUDF(RayDataLlmEngineUDF):  # noqa: N801 - Ray Data LLM's name
    """Ray Data LLM's vLLM stage; a failed engine start is raised on the first batch."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self.start_error: EngineStartError | None = None
        output = OutputSince()
        try:
            super().__init__(*args, **kwargs)
        except Exception as exc:  # noqa: BLE001 - any failed start ends the run, as Ray Data would
            reason = engine_start_reason(output.text()) or engine_start_reason(str(exc)) \
                or exception_reason(exc)
            self.start_error = engine_start_error(reason, dict(kwargs.get("engine_kwargs") or {}))
            logger.error("vLLM's engine did not start; the run stops at this worker's first "
                         "batch: %s", reason, exc_info=exc)

    async def udf(self, batch: list[dict[str, Any]]) -> AsyncIterator[dict[str, Any]]:
        if self.start_error is not None:
            # Raised as it is, not as Ray Data's UserCodeException (which reaches the
            # driver as text alone), so the driver re-raises it, exit code and hint. The
            # context is this task's own copy (Ray Data sets one per task), read when
            # Ray Data wraps the error.
            DataContext.get_current().raise_original_map_exception = True
            raise self.start_error
        async for output in super().udf(batch):
            yield output


def with_start_check(processor: "Processor", max_restarts: int) -> "Processor":
    """``processor`` with its vLLM stage run by :class:`vLLMEngineStageUDF`, whose
    actors Ray restarts at most ``max_restarts`` times each (-1: without end).

    Ray Data restarts a map actor without end by default, and Ray Data LLM exits the
    actor whenever its engine dies so that it is restarted: an engine that dies again
    and again (out of memory on some rows, a bad device) would run forever. Past the
    bound the actor stays dead and its batch fails the run (:func:`engine_died_error`).

    A copy of the stage with the class swapped: setting ``fn`` on it would validate
    the stage again, and its validator, run a second time, asks for a GPU."""
    stage = processor.get_stage_by_name(ENGINE_STAGE)
    processor.stages[ENGINE_STAGE] = stage.model_copy(update={
        "fn": vLLMEngineStageUDF,
        "map_batches_kwargs": {**stage.map_batches_kwargs, "max_restarts": max_restarts},
    })
    return processor
