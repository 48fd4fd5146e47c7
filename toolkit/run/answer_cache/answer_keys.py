"""What decides an answer, hashed: a stage's part once on the driver
(:func:`stage_context`), a row's part on the workers (:func:`row_key`).

A stage's part is its engine kind, its model's identity (:func:`model_identity`) and
its engine settings, less those of speed and memory that never change a token (the
results fingerprint's list, :mod:`toolkit.run.output.fingerprint`). A row's part is
its prompt as the engine is handed it (the chat messages after the job's preprocess,
which the engine templates with the settings above, or the prompt text where the
template is off) and its sampling parameters, the constraint among them.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

from toolkit.run.output.fingerprint import RESULT_NEUTRAL_ENGINE_KWARGS, RESULT_NEUTRAL_FIELDS
from toolkit.spec.sample_sources import sample_name

if TYPE_CHECKING:
    from toolkit.engines.model_source import ModelLocation
    from toolkit.spec.engine_settings import EngineSettings

#: Engine settings that don't change an answer: the pool's, and the model's name
#: (its identity stands for it).
_NEUTRAL_SETTINGS = frozenset(
    {"model", *(f.removeprefix("engine.") for f in RESULT_NEUTRAL_FIELDS
                if f.startswith("engine."))})
_CHUNK = 1 << 20


def model_identity(location: "ModelLocation", engine: "EngineSettings") -> dict[str, Any]:
    """What the model is, whatever its name: a ``sample:`` model by its name (it is
    built the same everywhere), a served one by its server and name, a local folder by
    a hash of its files' contents (read once, here, on the driver), a hub model by its
    id and the revision the engine is given (``engine_kwargs.revision``)."""
    source = location.source
    if sample_name(source) is not None:
        return {"sample": source}
    base_url = getattr(engine, "base_url", None)
    if base_url:
        return {"server": base_url, "model": source}
    folder = Path(source).expanduser()
    if folder.is_dir():
        return {"folder_sha256": folder_digest(folder)}
    return {"hub": source, "revision": engine.engine_kwargs.get("revision")}


def folder_digest(folder: Path) -> str:
    """A hash of every file's path in ``folder`` and its content."""
    digest = hashlib.sha256()
    for path in sorted(p for p in folder.rglob("*") if p.is_file()):
        digest.update(str(path.relative_to(folder)).encode() + b"\0")
        with path.open("rb") as stream:
            while chunk := stream.read(_CHUNK):
                digest.update(chunk)
        digest.update(b"\0")
    return digest.hexdigest()


def stage_context(location: "ModelLocation", engine: "EngineSettings") -> str:
    """The stage's part of every row's key: its engine kind, model and settings."""
    settings = engine.model_dump(mode="json", exclude=set(_NEUTRAL_SETTINGS))
    kwargs = {k: v for k, v in (settings.get("engine_kwargs") or {}).items()
              if k not in RESULT_NEUTRAL_ENGINE_KWARGS}
    settings["engine_kwargs"] = kwargs
    decisive = {"model": model_identity(location, engine), "settings": settings}
    return hashlib.sha256(json.dumps(decisive, sort_keys=True, default=str).encode()).hexdigest()


def repeatable(params: dict[str, Any]) -> bool:
    """Greedy decoding, or sampling with a seed the engine is given: the same answer
    every time."""
    return not float(params.get("temperature") or 0.0) > 0 or params.get("seed") is not None


def row_key(context: str, prompt: Any, params: dict[str, Any]) -> str:
    """A row's key: the stage's context, its prompt and its sampling parameters."""
    payload = json.dumps([context, prompt, params], sort_keys=True, default=str)
    return hashlib.blake2b(payload.encode(), digest_size=20).hexdigest()
