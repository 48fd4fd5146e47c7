"""Turn a spec's ``engine.model`` into something an engine can load.

A Hugging Face id or a local checkpoint directory is passed through. A
``sample:`` model (a tiny random-weight model for smoke runs) is built by the
sample provider the run was given, on the node whose engine asks for it
(deterministic, seconds), so a smoke run needs no download anywhere.
"""

from __future__ import annotations

from pathlib import Path

from toolkit.errors import SpecError
from toolkit.spec.sample_sources import SampleProvider, require_sample, sample_name


def check_model_source(source: str, samples: SampleProvider | None = None) -> None:
    """Fail fast, on the driver, for a model that can't exist (nothing is loaded).

    Raises:
        SpecError: a ``sample:`` model without a provider that has it, or a
            local-looking path that isn't a checkpoint directory. Hub ids are left
            to the engine, which may have network access and credentials this
            machine lacks.
    """
    if sample_name(source) is not None:
        require_sample("engine.model", source, samples, "model")
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


def resolve_model_source(source: str, samples: SampleProvider | None = None) -> str:
    """Return a loadable model id or directory for ``source``, building samples on demand.

    Raises:
        SpecError: as ``check_model_source``.
    """
    check_model_source(source, samples)
    name = sample_name(source)
    if name is not None:
        assert samples is not None
        return samples.model_path(name)
    return str(Path(source).expanduser()) if source.startswith("~") else source
