"""The registry of engine kinds: the built-in ones, and those other packages add.

An engine kind (``engine.kind``: vllm, transformers, http, sklearn, python) is one
package, ``toolkit/engines/<kind>/``, whose ``kind.py`` declares an
:class:`EngineKind` named ``KIND``: the tasks it runs, its typed settings (a subclass
of :class:`~toolkit.spec.engine_settings.EngineSettings`), the packages it needs, and
how it is preflighted and applied to a dataset. Everything else asks this registry:
spec validation, the CLI's ``--engine`` choices, local checks, render, plan and the
cluster entrypoint. Nothing outside ``toolkit/engines/`` compares a kind to a literal.
(The pattern is Ray Data LLM's ``ProcessorBuilder.register``.)

Another package adds a kind without touching the toolkit: an entry point in the
``toolkit.engines`` group naming its :class:`EngineKind` (or a module whose import
calls :func:`register_engine`)::

    [project.entry-points."toolkit.engines"]
    echo = "toolkit_echo:KIND"

The built-in kinds are always there, whatever was registered first; an installed
package that fails to load is named when a spec asks for a kind that is missing.

Example:
    >>> list(engine_kinds())[:5]
    ['vllm', 'transformers', 'http', 'sklearn', 'python']
    >>> engine_kind("sklearn").tasks
    ('tabular',)
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from importlib.metadata import entry_points
from typing import Any

from toolkit.spec.engine_settings import EngineSettings

#: The entry-point group through which installed packages add engine kinds.
ENTRY_POINT_GROUP = "toolkit.engines"
#: The built-in kinds' modules, in the order of --engine's choices and of messages
#: that list kinds.
BUILTIN_KIND_MODULES = tuple(f"toolkit.engines.{name}.kind" for name in (
    "vllm", "transformers", "http", "sklearn", "python"))


@dataclass(frozen=True)
class EngineKind:
    """One engine kind, as its package declares it.

    Attributes:
        name: ``engine.kind``.
        settings: Its settings model (a subclass of :class:`EngineSettings`).
        tasks: The ``engine.task`` values it runs.
        summary: One line for ``--engine``'s help.
        apply: ``(ds, settings, stage) -> ds``: adds the model stage to a Ray
            dataset (``stage`` is a :class:`toolkit.engines.StageInputs`).
        packages: Import name -> pip name of what its workers import.
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
            (:func:`toolkit.engines.row_step_resources`).
        batch_step: Its stage is a function of an Arrow batch on Ray tasks, given as
            ``(settings, StageInputs) -> (function, fn_kwargs)``: the pipeline runs a
            stage's preprocess, this function and its postprocess as one
            (:func:`toolkit.engines.engine_batch_step`).
    """

    name: str
    settings: type[EngineSettings]
    tasks: tuple[str, ...]
    summary: str
    apply: Callable[..., Any]
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


_KINDS: dict[str, EngineKind] = {}
#: What each installed plugin that failed to load raised, by entry point.
_BROKEN: dict[str, str] = {}
_loaded = False
_loading = False


def register_engine(kind: EngineKind) -> EngineKind:
    """Add ``kind`` (a later registration of the same name replaces it, so a kind
    registered by hand wins over a built-in or installed one of its name)."""
    _load()
    _KINDS[kind.name] = kind
    return kind


def unregister_engine(name: str) -> None:
    """Remove the kind ``name`` (a test's own kind, once the test is done)."""
    _KINDS.pop(name, None)


def engine_kinds() -> dict[str, EngineKind]:
    """Every kind by name: the built-in ones, then installed plugins', then any
    registered by hand."""
    _load()
    return _KINDS


def engine_kind(settings: EngineSettings | str) -> EngineKind:
    """The kind of an engine section (or of a kind name)."""
    name = settings if isinstance(settings, str) else settings.kind
    return engine_kinds()[name]


def broken_plugins() -> dict[str, str]:
    """Installed engine plugins that failed to load: entry point -> what it raised."""
    _load()
    return dict(_BROKEN)


def _load() -> None:
    global _loaded, _loading
    if _loaded or _loading:
        return
    _loading = True
    try:
        by_hand = dict(_KINDS)
        _KINDS.clear()
        for module in BUILTIN_KIND_MODULES:
            _add(importlib.import_module(module).KIND)
        for point in entry_points(group=ENTRY_POINT_GROUP):
            try:
                loaded = point.load()
            except Exception as error:  # noqa: BLE001 - a broken plugin is named, not fatal
                _BROKEN[f"{point.name} = {point.value}"] = f"{type(error).__name__}: {error}"
                continue
            if isinstance(loaded, EngineKind):
                _add(loaded)
            elif not isinstance(loaded, type(importlib)):  # a module registers itself
                _BROKEN[f"{point.name} = {point.value}"] = (
                    f"it names a {type(loaded).__name__}, not an EngineKind or a module")
        _KINDS.update(by_hand)
        _loaded = True
    finally:
        _loading = False


def _add(kind: EngineKind) -> None:
    _KINDS.setdefault(kind.name, kind)
