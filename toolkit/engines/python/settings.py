"""engine.kind python's settings: ``model`` names the user's class (``file.py:Class``)."""

from __future__ import annotations


from toolkit.spec.engine_settings import EngineSettings


class PythonSettings(EngineSettings):
    @property
    def user_class(self) -> str | None:
        return self.model
