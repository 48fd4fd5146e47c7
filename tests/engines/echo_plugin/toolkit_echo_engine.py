"""engine.kind echo: answers every chat row with ``engine.answer`` (a plugin's example)."""

from __future__ import annotations

from pydantic import Field

from toolkit.engines.engine_kind import EngineCapabilities, EngineKind
from toolkit.spec.engine_settings import EngineSettings


class EchoSettings(EngineSettings):
    answer: str = Field("Other", description="What every row is answered.")


def apply_echo(ds, settings, stage):
    """The same rows out, with ``generated_text`` for each that reached the engine."""
    answer = settings.answer

    def echo(batch):
        batch["generated_text"] = [None if error else answer for error in batch["error"]]
        return batch

    return ds.map_batches(echo, batch_format="pandas", batch_size=settings.batch_size)


KIND = EngineKind(
    name="echo",
    settings=EchoSettings,
    tasks=("generate",),
    summary="echo (answers every row the same)",
    apply=apply_echo,
    # engine.answer is no model to look for before the run: the one capability to set.
    capabilities=EngineCapabilities(loads_checkpoint=False),
)
