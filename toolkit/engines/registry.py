"""The registry of engine kinds: the built-in ones, and those other packages add.

An engine kind (``engine.kind``: vllm, transformers, http, sklearn, python, batch-api) is one
package, ``toolkit/engines/<kind>/``, whose ``kind.py`` declares an
:class:`~toolkit.engines.engine_kind.EngineKind` named ``KIND``: the tasks it runs, its
typed settings (a subclass of :class:`~toolkit.spec.engine_settings.EngineSettings`),
how it is applied to a dataset, and its capabilities (the packages it needs, how it is
preflighted, ...). Everything else asks this registry: the CLI's ``--engine`` choices,
local checks, render, plan and the cluster entrypoint; spec validation asks it as the
spec layer's :class:`~toolkit.spec.engine_catalog.EngineCatalog`
(:data:`ENGINE_CATALOG`, which importing the ``toolkit`` package hands the spec layer).
Nothing outside ``toolkit/engines/`` compares a kind to a literal. (The pattern is Ray
Data LLM's ``ProcessorBuilder.register``.)

Another package adds a kind without touching the toolkit: an entry point in the
``toolkit.engines`` group naming its kind (an
:class:`~toolkit.engines.engine_kind.EnginePlugin`), or a module whose import calls
:func:`register_engine`::

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
from collections.abc import Mapping
from importlib.metadata import entry_points

from toolkit.engines.engine_kind import (
    EngineCapabilities,
    EngineKind,
    EnginePlugin,
    as_engine_kind,
)
from toolkit.spec.engine_settings import EngineSettings

__all__ = ["ENGINE_CATALOG", "EngineCapabilities", "EngineKind", "EnginePlugin",
           "broken_plugins", "capabilities", "engine_kind", "engine_kinds",
           "register_engine", "unregister_engine"]

#: The entry-point group through which installed packages add engine kinds.
ENTRY_POINT_GROUP = "toolkit.engines"
#: The built-in kinds' modules, in the order of --engine's choices and of messages
#: that list kinds.
BUILTIN_KIND_MODULES = tuple(f"toolkit.engines.{name}.kind" for name in (
    "vllm", "transformers", "http", "sklearn", "python", "batch_api"))


_KINDS: dict[str, EngineKind] = {}
#: What each installed plugin that failed to load raised, by entry point.
_BROKEN: dict[str, str] = {}
_loaded = False
_loading = False


def register_engine(plugin: EnginePlugin) -> EngineKind:
    """Add ``plugin``'s kind (a later registration of the same name replaces it, so a
    kind registered by hand wins over a built-in or installed one of its name)."""
    _load()
    kind = _KINDS[plugin.name] = as_engine_kind(plugin)
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


def capabilities(settings: EngineSettings | str) -> EngineCapabilities:
    """What the pipeline may ask of the kind of an engine section (or of a kind name)."""
    return engine_kind(settings).capabilities


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
            if isinstance(loaded, EnginePlugin):
                _add(loaded)
            elif not isinstance(loaded, type(importlib)):  # a module registers itself
                _BROKEN[f"{point.name} = {point.value}"] = (
                    f"it names a {type(loaded).__name__}, not an EngineKind or a module")
        _KINDS.update(by_hand)
        _loaded = True
    finally:
        _loading = False


def _add(plugin: EnginePlugin) -> None:
    _KINDS.setdefault(plugin.name, as_engine_kind(plugin))


class _Catalog:
    """This registry as the spec layer's
    :class:`~toolkit.spec.engine_catalog.EngineCatalog`."""

    def kinds(self) -> Mapping[str, EngineKind]:
        return engine_kinds()

    def broken_plugins(self) -> Mapping[str, str]:
        return broken_plugins()


#: The registry as the spec layer asks it (``toolkit/__init__.py`` hands it over).
ENGINE_CATALOG = _Catalog()
