"""Which engine kinds exist, as the spec layer asks it: the catalog it is handed.

The spec layer validates ``engine.kind`` and each kind's settings, but the kinds are
the engines' (a higher layer, and installed plugins'). So this module declares the
little it asks of them, :class:`EngineCatalog`, and the engines hand it one
(:func:`install_engine_catalog`): importing the ``toolkit`` package installs a loader
of the engines' registry, so a spec validated on its own (a test, a user's script, a
Ray worker unpickling one) knows the kinds too. The spec layer never imports engine
code, by statement or by name.

Light on purpose (no pydantic): the ``toolkit`` package imports it on every import.

Example:
    >>> engine_catalog().kinds()["sklearn"].tasks  # doctest: +SKIP
    ('tabular',)
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Protocol


class CatalogedKind(Protocol):
    """What spec validation reads of one engine kind."""

    @property
    def name(self) -> str:
        """``engine.kind``."""

    @property
    def settings(self) -> type[Any]:
        """Its settings model, a subclass of
        :class:`~toolkit.spec.engine_settings.EngineSettings`."""

    @property
    def tasks(self) -> tuple[str, ...]:
        """The ``engine.task`` values it runs."""


class EngineCatalog(Protocol):
    """The engine kinds a spec may name (:mod:`toolkit.engines.registry` is one)."""

    def kinds(self) -> Mapping[str, CatalogedKind]:
        """Every kind by name, in the order messages list them."""

    def broken_plugins(self) -> Mapping[str, str]:
        """Installed engine plugins that failed to load: entry point -> what it raised
        (named when a spec asks for a kind that is missing)."""


_catalog: EngineCatalog | None = None
_loader: Callable[[], EngineCatalog] | None = None


def install_engine_catalog(catalog: EngineCatalog | None = None, *,
                           loader: Callable[[], EngineCatalog] | None = None) -> None:
    """Hand the spec layer its catalog, or a ``loader`` that returns it on first use
    (so that importing the spec imports no engine until a spec is validated); with
    neither, take back what it was handed."""
    global _catalog, _loader
    _catalog, _loader = catalog, loader


def engine_catalog() -> EngineCatalog:
    """The catalog of engine kinds the spec layer was handed.

    Raises:
        RuntimeError: none was, which only happens when something undid the ``toolkit``
            package's own (it says what to install).
    """
    global _catalog
    if _catalog is None and _loader is not None:
        _catalog = _loader()
    if _catalog is None:
        raise RuntimeError(
            "The spec layer has no engine catalog to check engine.kind against: import "
            "toolkit.engines.registry and pass its ENGINE_CATALOG to "
            "toolkit.spec.engine_catalog.install_engine_catalog (importing the toolkit "
            "package does this for you).")
    return _catalog
