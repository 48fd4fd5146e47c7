"""Where submitted jobs run: ``ray`` (a Ray cluster's Jobs API) or ``anyscale``.

:func:`open_backend` is the one way in; the backends import Ray or Anyscale only
when opened, so importing this package stays cheap.
"""

from __future__ import annotations

from collections.abc import Callable

from toolkit.cluster.backends.base import (
    Backend,
    JobHandle,
    JobInfo,
    JobNotFoundError,
    JobStatus,
    SubmitRequest,
)
from toolkit.errors import SpecError

BACKEND_NAMES: tuple[str, ...] = ("ray", "anyscale")

__all__ = [
    "BACKEND_NAMES",
    "Backend",
    "JobHandle",
    "JobInfo",
    "JobNotFoundError",
    "JobStatus",
    "SubmitRequest",
    "open_backend",
]


def open_backend(
    name: str,
    address: str | None = None,
    on_event: Callable[[str], None] | None = None,
) -> Backend:
    """Open the backend ``name``.

    Args:
        name: ``"ray"`` or ``"anyscale"``.
        address: For ``ray``: the Ray dashboard URL (``http://HEAD:8265``), ``local``
            to start or reuse a Ray head on this machine, or ``None`` for
            ``$RAY_ADDRESS``. Not used by ``anyscale``.
        on_event: Called with one-line progress notes (e.g. "started a local head").

    Raises:
        SpecError: unknown backend, or ``address`` given for ``anyscale``.
        BackendUnavailableError: the cluster can't be reached or you are not logged in.
    """
    if name == "ray":
        from toolkit.cluster.backends.ray_jobs import RayJobsBackend

        return RayJobsBackend.connect(address, on_event=on_event)
    if name == "anyscale":
        if address:
            raise SpecError(
                "--address applies to --backend ray only; Anyscale picks the cluster itself.",
                hint="Drop --address, or use --backend ray.",
            )
        from toolkit.cluster.backends.anyscale_backend import AnyscaleBackend

        return AnyscaleBackend.connect()
    raise SpecError(f"Unknown backend {name!r}; choose one of: {', '.join(BACKEND_NAMES)}.")
