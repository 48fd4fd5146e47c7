"""Turn a spec's ``engine.model`` into something an engine can load.

``sample:`` sources are tiny random-weight models built offline on the node that
needs them (deterministic, seconds), so a smoke run works on a laptop or a cluster
without any download. Anything else is passed through as a Hugging Face id or a
local checkpoint directory.
"""

from __future__ import annotations

from pathlib import Path

from toolkit.errors import SpecError
from toolkit.spec.models import SAMPLE_PREFIX

SAMPLE_MODELS = ("tiny-chat", "tiny-vision")


def check_model_source(source: str) -> None:
    """Fail fast, on the driver, for a model that can't exist (nothing is loaded).

    Raises:
        SpecError: an unknown ``sample:`` name, or a local-looking path that isn't a
            checkpoint directory. Hub ids are left to the engine, which may have
            network access and credentials this machine lacks.
    """
    if source.startswith(SAMPLE_PREFIX):
        if source[len(SAMPLE_PREFIX):] not in SAMPLE_MODELS:
            raise SpecError(
                f"engine.model: unknown sample model {source!r}.",
                hint=f"Use one of: {', '.join(SAMPLE_PREFIX + m for m in SAMPLE_MODELS)}.",
            )
        return
    if not (source.startswith(("/", "./", "../", "~")) or Path(source).exists()):
        return
    path = Path(source).expanduser()
    if not path.is_dir():
        raise SpecError(
            f"engine.model: model directory {source} does not exist.",
            hint="Give a checkpoint directory (with config.json) or a Hugging Face id "
            "such as Qwen/Qwen2.5-0.5B-Instruct.",
        )
    if not (path / "config.json").is_file():
        raise SpecError(
            f"engine.model: {source} has no config.json, so it is not a model checkpoint.",
            hint="Point at the directory that save_pretrained() wrote.",
        )


def resolve_model_source(source: str) -> str:
    """Return a loadable model id or directory for ``source``, building samples on demand.

    Raises:
        SpecError: as ``check_model_source``.
    """
    check_model_source(source)
    if source == SAMPLE_PREFIX + "tiny-chat":
        from toolkit.samples.tiny_model import tiny_chat_model_path

        return str(tiny_chat_model_path())
    if source == SAMPLE_PREFIX + "tiny-vision":
        from toolkit.samples.tiny_vision_model import tiny_vision_model_path

        return str(tiny_vision_model_path())
    return str(Path(source).expanduser()) if source.startswith("~") else source
