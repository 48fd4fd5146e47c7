"""Connect the driver to Ray: an embedded local instance, or the cluster at RAY_ADDRESS."""

from __future__ import annotations

import os
from dataclasses import dataclass


@dataclass(frozen=True)
class RayConnection:
    address: str
    dashboard_url: str | None
    started_here: bool


def connect_ray(address: str | None = None) -> RayConnection:
    """``ray.init`` against ``address`` or ``RAY_ADDRESS``; without either, start Ray here.

    Inside a submitted job Ray sets RAY_ADDRESS, so the same code joins the cluster.
    """
    import ray

    target = address or os.environ.get("RAY_ADDRESS") or None
    if ray.is_initialized():
        context = ray.get_runtime_context()
        return RayConnection(
            address=context.gcs_address, dashboard_url=_dashboard_url(), started_here=False
        )
    context = ray.init(address=target, log_to_driver=True, configure_logging=True,
                       logging_level="WARNING")
    url = context.dashboard_url
    return RayConnection(
        address=context.address_info.get("gcs_address", target or "local"),
        dashboard_url=f"http://{url}" if url and not url.startswith("http") else url,
        started_here=target is None,
    )


def _dashboard_url() -> str | None:
    try:
        import ray

        url = ray.worker.get_dashboard_url()
    except Exception:  # noqa: BLE001 - the URL is informational only
        return None
    return f"http://{url}" if url and not url.startswith("http") else url
