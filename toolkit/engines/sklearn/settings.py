"""engine.kind sklearn's settings (the shared ones; its tasks run as Ray tasks)."""

from __future__ import annotations


from toolkit.spec.engine_settings import EngineSettings


class SklearnSettings(EngineSettings):
    @property
    def workers_at_start(self) -> int:
        """One: the model runs in Ray tasks, which start as CPUs free up, not a pool."""
        return 1
