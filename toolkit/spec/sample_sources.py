"""``sample:`` inputs and models: names a spec may use, served by a provider passed in.

A smoke run reads generated rows (``sample:customers``) and loads a tiny model
built offline (``sample:tiny-chat``). What those names mean lives in
:mod:`toolkit.samples`, which only the commands that ask for samples import (the
CLI, and the cluster entrypoint of a job submitted with ``--smoke``): they hand a
:class:`SampleProvider` to the pipeline, which passes it on to the engines. So
neither the pipeline nor the engines nor any job imports the samples package.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Protocol

from toolkit.errors import SpecError
from toolkit.spec.models import SAMPLE_PREFIX

if TYPE_CHECKING:
    from ray.data import Dataset


class SampleProvider(Protocol):
    """Generated inputs and tiny models by name (without the ``sample:`` prefix)."""

    input_names: tuple[str, ...]
    model_names: tuple[str, ...]
    #: Rows each input makes when ``data.rows`` is unset (a run's expected rows).
    default_rows: Mapping[str, int]

    def open_input(self, name: str, rows: int | None, seed: int,
                   partitions: int | None) -> "Dataset":
        """A Ray Dataset of generated rows whose Read yields the id column."""
        ...

    def model_path(self, name: str) -> str:
        """A local checkpoint directory, built on first use on the node that asks."""
        ...


def sample_name(source: str) -> str | None:
    """``"customers"`` for ``"sample:customers"``; None for anything else."""
    return source[len(SAMPLE_PREFIX):] if source.startswith(SAMPLE_PREFIX) else None


def require_sample(
    field: str, source: str, samples: SampleProvider | None, kind: str
) -> str:
    """The sample name in ``source``, checked against what ``samples`` provides.

    Raises:
        SpecError: no provider was given (a ``sample:`` source outside a smoke
            run) or it has no such name; the message lists the names it has.
    """
    name = sample_name(source)
    assert name is not None
    if samples is None:
        raise SpecError(
            f"{field}: {source!r} is a generated sample, which only smoke runs provide.",
            hint="Run with --smoke (the toolkit CLI), or point it at real data/a real model.",
        )
    known = samples.input_names if kind == "input" else samples.model_names
    if name not in known:
        raise SpecError(
            f"{field}: unknown sample {kind} {source!r}.",
            hint=f"Use one of: {', '.join(SAMPLE_PREFIX + n for n in known)}.",
        )
    return name
