"""What an engine kind is: what a plugin writes, and what the pipeline may ask of it.

A kind's package (``toolkit/engines/<kind>/kind.py``, or a plugin's module) writes an
:class:`EnginePlugin`: a name, a settings model, the tasks it runs, one line for
``--engine``'s help, and how it adds its model stage to a dataset. That is all a
plugin must know. What the rest of the toolkit may ask of a kind beyond that (which
packages its workers import, whether its model is a checkpoint, whether Ray Data may
fuse a step into its stage, ...) is its :class:`EngineCapabilities`, a record whose
defaults suit a plugin's stage of its own; the built-in kinds set the fields that
make them fast or checked earlier. :class:`EngineKind` is both, as one value.

Example:
    >>> from toolkit.spec.engine_settings import EngineSettings
    >>> kind = EngineKind(name="mine", settings=EngineSettings, tasks=("generate",),
    ...                   summary="mine (a test)", apply=lambda ds, settings, stage: ds)
    >>> kind.capabilities.loads_checkpoint, kind.capabilities.fuses_row_steps
    (True, False)
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, fields, replace
from typing import Any, Protocol, runtime_checkable

from toolkit.spec.engine_settings import EngineSettings


@runtime_checkable
class EnginePlugin(Protocol):
    """What an engine kind must write (an :class:`EngineKind` is one; so is any object
    with these attributes, whose ``capabilities``, if it has them, are read too)."""

    #: ``engine.kind``.
    name: str
    #: Its settings model: a subclass of :class:`EngineSettings` adding its own fields.
    settings: type[EngineSettings]
    #: The ``engine.task`` values it runs.
    tasks: tuple[str, ...]
    #: One line for ``--engine``'s help.
    summary: str

    def apply(self, ds: Any, settings: Any, stage: Any) -> Any:
        """``(ds, settings, stage) -> ds``: add the model stage to a Ray dataset
        (``stage`` is a :class:`toolkit.engines.StageInputs`)."""


@dataclass(frozen=True)
class EngineCapabilities:
    """What the pipeline may ask of a kind; each default suits a plugin's own stage.

    Attributes:
        packages: Import name -> pip name of what its workers import; a run is
            refused before it starts, naming them, where they are missing.
        checked_on_head: Whether the cluster entrypoint checks ``packages`` on the
            head node (vLLM's are on GPU workers, which may run another image).
        install_extra: This package's extra that installs it on a cluster image
            that lacks it (``pip install 'batch-llm-toolkit[EXTRA]'``).
        missing_hint: What to do when ``packages`` are missing on this machine.
        loads_checkpoint: ``engine.model`` is a model checkpoint (a Hugging Face id,
            a folder or a ``sample:`` model), checked before the run starts.
        imports_transformers: Loading the model imports transformers (and so
            torchvision where it is installed).
        preflight: ``settings -> None``, run on the driver before any row is read
            (raises a ToolkitError, e.g. an unreachable server).
        planned_from_table: ``toolkit plan``'s throughput table covers it (on GPUs).
        ray_llm_prompt: Its chat prompts are built as Ray Data LLM's chat-template and
            tokenize stages build them: a final assistant message is continued (no
            generation prompt), and the templated text is encoded with the
            tokenizer's special tokens (a tokenizer that adds BOS adds it again). Off:
            the transformers engine's way (a generation prompt always, no special
            tokens added). ``toolkit plan --tokens`` counts prompts the same way.
        fuses_row_steps: Its stage is one ``map_batches`` that a CPU step placed right
            before it (the job's preprocess) may join, when it holds no GPU
            (:func:`toolkit.engines.kind_dispatch.row_step_resources`).
        batch_step: Its stage is a function of an Arrow batch on Ray tasks, given as
            ``(settings, StageInputs) -> (function, fn_kwargs)``: the pipeline runs a
            stage's preprocess, this function and its postprocess as one
            (:func:`toolkit.engines.kind_dispatch.engine_batch_step`).
    """

    packages: Mapping[str, str] = field(default_factory=dict)
    checked_on_head: bool = True
    install_extra: str | None = None
    missing_hint: str = ""
    loads_checkpoint: bool = True
    imports_transformers: bool = False
    preflight: Callable[[Any], None] | None = None
    planned_from_table: bool = False
    ray_llm_prompt: bool = False
    fuses_row_steps: bool = False
    batch_step: Callable[[Any, Any], tuple[Callable[..., Any], dict[str, Any]]] | None = None

    @property
    def packages_on_head(self) -> Mapping[str, str]:
        """The ``packages`` the cluster entrypoint checks on the head node."""
        return self.packages if self.checked_on_head else {}


#: The capabilities' names, which :class:`EngineKind` also takes as keywords.
CAPABILITIES = frozenset(f.name for f in fields(EngineCapabilities))


@dataclass(frozen=True, init=False)
class EngineKind:
    """One engine kind: what its package writes (:class:`EnginePlugin`) and its
    :class:`EngineCapabilities`.

    The capabilities may also be given as keywords of their own
    (``EngineKind(..., loads_checkpoint=False)``), the form installed plugins were
    written in before the record had them apart; and read as attributes
    (``kind.loads_checkpoint``), as code written then reads them.
    """

    name: str
    settings: type[EngineSettings]
    tasks: tuple[str, ...]
    summary: str
    apply: Callable[..., Any]
    capabilities: EngineCapabilities

    def __init__(self, name: str, settings: type[EngineSettings], tasks: tuple[str, ...],
                 summary: str, apply: Callable[..., Any],
                 capabilities: EngineCapabilities | None = None, **flags: Any) -> None:
        unknown = sorted(set(flags) - CAPABILITIES)
        if unknown:
            raise TypeError(f"EngineKind got unknown capabilities {', '.join(unknown)}; "
                            f"it takes {', '.join(sorted(CAPABILITIES))}")
        for key, value in (("name", name), ("settings", settings), ("tasks", tuple(tasks)),
                           ("summary", summary), ("apply", apply),
                           ("capabilities", replace(capabilities or EngineCapabilities(),
                                                    **flags))):
            object.__setattr__(self, key, value)

    def __getattr__(self, name: str) -> Any:
        # Only reached for names that are not fields: a capability read the old way.
        if name in CAPABILITIES:
            return getattr(self.capabilities, name)
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")


def as_engine_kind(plugin: EnginePlugin) -> EngineKind:
    """``plugin`` as an :class:`EngineKind` (itself when it is one)."""
    if isinstance(plugin, EngineKind):
        return plugin
    return EngineKind(name=plugin.name, settings=plugin.settings, tasks=plugin.tasks,
                      summary=plugin.summary, apply=plugin.apply,
                      capabilities=getattr(plugin, "capabilities", None))
