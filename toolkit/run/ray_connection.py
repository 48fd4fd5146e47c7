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
    kwargs: dict[str, object] = {}
    if target is None:
        kwargs["num_cpus"] = local_logical_cpus()
    context = ray.init(address=target, log_to_driver=True, configure_logging=True,
                       logging_level="WARNING", **kwargs)
    url = context.dashboard_url
    return RayConnection(
        address=context.address_info.get("gcs_address", target or "local"),
        dashboard_url=f"http://{url}" if url and not url.startswith("http") else url,
        started_here=target is None,
    )


def local_logical_cpus() -> int:
    """Logical CPUs for a Ray started here: at least 4, even on a 2-core laptop.

    Besides the engine actor (1 CPU) a run needs read and write tasks, and a resumed
    run Ray Data's checkpoint-filter actor (1 CPU). With only 2 logical CPUs the
    reads starve and a resumed run waits forever; the extra stages are light, so
    sharing the cores is fine.
    """
    return max(4, os.cpu_count() or 1)


def _dashboard_url() -> str | None:
    try:
        import ray

        url = ray.worker.get_dashboard_url()
    except Exception:  # noqa: BLE001 - the URL is informational only
        return None
    return f"http://{url}" if url and not url.startswith("http") else url
