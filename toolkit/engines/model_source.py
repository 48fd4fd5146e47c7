"""Where a stage's model loads from: ``engine.model`` resolved once, in preflight.

A Hugging Face id or a local checkpoint directory is passed through. A
``sample:`` model (a tiny random-weight model for smoke runs) carries the sample
provider the run was given, and is built by it on the node whose engine asks for
its path (deterministic, seconds): a worker on another node needn't have the head's
cache, and a smoke run needs no download anywhere. Engines take a
:class:`ModelLocation`, never the provider.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from toolkit.errors import SpecError
from toolkit.spec.sample_sources import SampleProvider, require_sample, sample_name


@dataclass(frozen=True)
class ModelLocation:
    """A stage's model, as its engine will load it (picklable: it travels to workers).

    Attributes:
        source: ``engine.model`` as the spec gives it (``sample:tiny-chat``, an id, a
            folder): what messages name.
        samples: Builds a ``sample:`` model where :meth:`path` is asked (smoke runs);
            None outside them, where a ``sample:`` model is refused.
    """

    source: str
    samples: SampleProvider | None = None

    @property
    def is_sample(self) -> bool:
        return sample_name(self.source) is not None

    def check(self) -> None:
        """Fail fast, on the driver, for a model that can't exist (nothing is loaded).

        Raises:
            SpecError: a ``sample:`` model without a provider that has it, or a
                local-looking path that isn't a checkpoint directory. Hub ids are left
                to the engine, which may have network access and credentials this
                machine lacks.
        """
        source = self.source
        if self.is_sample:
            require_sample("engine.model", source, self.samples, "model")
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

    def path(self) -> str:
        """A loadable model id or directory, a sample model built here on first use.

        Raises:
            SpecError: as :meth:`check`.
        """
        self.check()
        name = sample_name(self.source)
        if name is not None:
            assert self.samples is not None
            return self.samples.model_path(name)
        source = self.source
        return str(Path(source).expanduser()) if source.startswith("~") else source


def model_location(model: str | ModelLocation) -> ModelLocation:
    """``model`` as a location: a plain id or folder (what a test or a caller outside a
    run hands an engine) is one with no sample provider."""
    return model if isinstance(model, ModelLocation) else ModelLocation(model)
