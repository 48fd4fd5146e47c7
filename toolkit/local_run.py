"""``toolkit run``: run a job's pipeline from this process on local Ray or RAY_ADDRESS."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from toolkit.errors import JobFailedError, ToolkitError, debug_enabled
from toolkit.job_definition import JobDefinition
from toolkit.run_summary import RunSummary
from toolkit.spec import JobSpec


def run_job(
    job: JobDefinition[Any],
    spec: JobSpec,
    overwrite: bool = False,
    address: str | None = None,
    on_connected: Callable[[str | None], None] | None = None,
) -> RunSummary:
    """Connect to Ray (embedded unless ``address``/RAY_ADDRESS) and run the pipeline.

    Args:
        on_connected: called with the Ray Dashboard URL once Ray is up, so a
            caller can show it while the run is in progress.

    Raises:
        ToolkitError: bad spec/input (exit 2) or the run failed (exit 4), with the
            underlying cause in one paragraph.
    """
    from toolkit.pipeline import run_pipeline
    from toolkit.ray_connection import connect_ray

    connection = connect_ray(address)
    if on_connected is not None:
        on_connected(connection.dashboard_url)
    try:
        return run_pipeline(job, spec, overwrite=overwrite)
    except ToolkitError:
        raise
    except Exception as exc:
        if debug_enabled():
            raise
        raise JobFailedError(
            f"The {job.name} run failed: {root_cause(exc)}",
            hint="Rerun with TOOLKIT_DEBUG=1 for the full traceback; the Ray Dashboard "
            "shows worker logs.",
        ) from None


def root_cause(exc: BaseException) -> str:
    """The innermost error's last line: Ray wraps worker errors several times over."""
    seen = exc
    while True:
        inner = getattr(seen, "cause", None) or seen.__cause__
        if inner is None or inner is seen:
            break
        seen = inner
    lines = [line.strip() for line in str(seen).strip().splitlines() if line.strip()]
    detail = lines[-1] if lines else ""
    name = type(seen).__name__
    return f"{name}: {detail}" if detail and not detail.startswith(name) else detail or name
