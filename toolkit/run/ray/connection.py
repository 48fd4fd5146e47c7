"""Connect the driver to Ray: an embedded local instance, or the cluster at RAY_ADDRESS.

Joining a cluster (``--address``/``RAY_ADDRESS``: ``auto``, ``host:port`` or
``ray://host:10001``) first probes its port, then sends the cluster's token where
:mod:`toolkit.run.ray.auth` allows it (Ray itself would send it only for ``auto``).
A failure to join becomes one :class:`~toolkit.errors.BackendUnavailableError`
(exit 3) that says which of the usual causes it was: nothing listens there, the
cluster wants a token, or its Ray/Python versions differ from this machine's.

Example:
    >>> connection = connect_ray("10.0.0.5:6379", output="s3://bucket/out")  # doctest: +SKIP
    >>> connection.address, connection.dashboard_url, connection.warnings  # doctest: +SKIP
    ('10.0.0.5:6379', 'http://10.0.0.5:8265', ())
"""

from __future__ import annotations

import contextlib
import importlib
import logging
import os
import re
import threading
from collections.abc import Iterator, Mapping, MutableMapping
from dataclasses import dataclass

from toolkit.errors import BackendUnavailableError, SpecError, debug_enabled
from toolkit.run.output.location import output_location_warning
from toolkit.run.ray.auth import (
    AUTH_MODE_ENV_VAR,
    CONNECT_TIMEOUT_S,
    TOKEN_HINT,
    driver_auth_env,
    is_local_address,
    probe_address,
    read_auth_token,
)

#: Ray settings for a Ray started here. The raylet connects to its own object store
#: as the store's thread starts listening; when it is early, Ray's default is to try
#: again after 1 s, which stalled one local start in three. Polled every 0.1 s, with
#: the same 10 s of patience in all, the start no longer waits on the race.
LOCAL_RAY_SYSTEM_CONFIG: dict[str, int] = {
    "raylet_client_connect_timeout_milliseconds": 100,
    "raylet_client_num_connect_attempts": 100,
}

#: Ray Data's Parquet footer-reader pool size, and what a Ray started here gets.
FOOTER_ACTORS_ENV = "RAY_DATA_PARQUET_FOOTER_NUM_ACTORS"
LOCAL_FOOTER_ACTORS = 2

ADDRESS_HINT = (
    "Give the cluster's GCS address (--address HEAD:6379, as `ray start --head` prints it) "
    "or auto for a cluster started on this machine with `ray start`, and check that it is "
    "up. Leave out --address and RAY_ADDRESS to start Ray here instead."
)


@dataclass(frozen=True)
class RayConnection:
    """The Ray this driver is connected to.

    Attributes:
        address: The cluster's GCS address as Ray resolved it (``auto`` and
            ``127.0.0.1`` become the node's IP); the ``ray://`` URL for Ray Client.
        dashboard_url: ``http://HOST:PORT`` of its Ray Dashboard, if it has one.
        started_here: Ray was started by this process for this run.
        on_this_machine: The cluster runs on this machine (its disks are ours).
        warnings: What the user should know before the run starts (e.g. results
            that would land on the cluster's disks, not here).
    """

    address: str
    dashboard_url: str | None
    started_here: bool
    on_this_machine: bool = True
    warnings: tuple[str, ...] = ()


def ray_target(address: str | None, environ: Mapping[str, str]) -> str | None:
    """The address ``ray.init`` will join: ``address``, else ``RAY_ADDRESS``; ``None``
    (or ``local``) starts Ray here. Like Ray, ``auto`` yields to a set RAY_ADDRESS."""
    env_address = environ.get("RAY_ADDRESS", "").strip() or None
    target = (address or "").strip() or env_address
    if target == "auto" and env_address:
        return env_address
    return target


def connect_ray(
    address: str | None = None,
    *,
    output: str | None = None,
    connect_timeout_s: float = CONNECT_TIMEOUT_S,
    dashboard: bool = False,
) -> RayConnection:
    """``ray.init`` against ``address`` or ``RAY_ADDRESS``; without either, start Ray here.

    Inside a submitted job Ray sets RAY_ADDRESS, so the same code joins the cluster.
    When joining, ``RAY_AUTH_MODE=token`` is set in this process's environment if
    the cluster's token should be sent (see :mod:`toolkit.run.ray.auth`).

    Args:
        address: ``auto``, ``host:port`` (GCS) or ``ray://host:port``; ``None``
            uses RAY_ADDRESS, and without it starts Ray in this process.
        output: ``data.output`` of the run: when the cluster is not on this
            machine and this is a local path, :attr:`RayConnection.warnings` says so.
        connect_timeout_s: How long the port probe may take.
        dashboard: Start the Ray Dashboard with a Ray started here. Off by default:
            on a laptop its ten processes take about 1 GB and slow Ray's start by
            seconds, CPU and memory the engine needs; the run shows its own progress.

    Raises:
        BackendUnavailableError: the cluster is unreachable, refused this client's
            token (or wants one), or runs other Ray/Python versions.
        SpecError: Ray rejected the address as malformed.
    """
    import ray

    if ray.is_initialized():
        runtime = ray.get_runtime_context()
        return RayConnection(
            address=runtime.gcs_address, dashboard_url=_dashboard_url(), started_here=False
        )
    target = ray_target(address, os.environ)
    # The driver imports Ray Data next; that takes about as long as Ray's own start,
    # during which this process mostly waits on Ray's, so both go at once.
    threading.Thread(target=_import_quietly, args=("ray.data",),
                     name="import-ray-data", daemon=True).start()
    if target in (None, "local"):
        # "local" even without an address: ray.init(address=None) would join whatever
        # cluster /tmp/ray/ray_current_cluster names, a stale one left by a killed head too.
        # Ray turns token auth on for the Ray it starts and says so: a local run's
        # terminal (toolkit plan --tokens prints there) needs no news of its own Ray.
        logging.getLogger("ray._private.authentication.authentication_token_setup").setLevel(
            logging.ERROR)
        local_ray_environment(os.environ)  # before Ray starts: its workers inherit it
        try:
            context = ray.init(address="local", log_to_driver=True, configure_logging=True,
                               logging_level="WARNING", num_cpus=local_logical_cpus(),
                               include_dashboard=dashboard,
                               _system_config=LOCAL_RAY_SYSTEM_CONFIG)
        except Exception as exc:  # noqa: BLE001 - one paragraph, not Ray's traceback
            if debug_enabled():
                raise
            reason = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
            why = ("Ray waits 30 s for its processes, and a machine short of CPU or memory "
                   "(another Ray, a heavy job) can take longer: run the same command again "
                   "once it is quieter" if "timed out" in reason else
                   "Ray needs free memory and a writable temp folder (/tmp/ray, or "
                   "$RAY_TMPDIR); TOOLKIT_DEBUG=1 shows its traceback")
            raise BackendUnavailableError(
                f"Ray could not start on this machine: {reason}",
                hint=f"{why}. Or start Ray yourself (ray start --head) and pass --address auto.",
            ) from None
        return RayConnection(
            address=str(context.address_info.get("gcs_address") or "local"),
            dashboard_url=_with_scheme(context.dashboard_url),
            started_here=True,
        )

    probe_address(target, connect_timeout_s, hint=ADDRESS_HINT)
    auth_env = driver_auth_env(target, os.environ)
    _set_ray_env(auth_env)
    token_found = read_auth_token(os.environ) is not None
    mode = auth_env.get(AUTH_MODE_ENV_VAR) or os.environ.get(AUTH_MODE_ENV_VAR, "")
    try:
        context = ray.init(address=target, log_to_driver=True, configure_logging=True,
                           logging_level="WARNING")
    except Exception as exc:  # noqa: BLE001 - classified below
        if debug_enabled():
            raise
        raise connect_error(
            exc,
            target,
            token_sent=token_found and mode.strip().lower() == "token",
            token_found=token_found,
            token_path=os.environ.get("RAY_AUTH_TOKEN_PATH"),
        ) from None
    # Ray Client (ray://) gives a ClientContext, without address_info.
    address_info = getattr(context, "address_info", None) or {}
    joined = str(address_info.get("gcs_address") or target)
    on_this_machine = is_local_address(target) or is_local_address(joined)
    warning = None if on_this_machine or output is None else output_location_warning(
        output, "run")
    return RayConnection(
        address=joined,
        dashboard_url=_with_scheme(getattr(context, "dashboard_url", None)),
        started_here=False,
        on_this_machine=on_this_machine,
        warnings=(warning,) if warning else (),
    )


def _import_quietly(module: str) -> None:
    """Import ``module`` ahead of its use. Any error is left for the import that needs
    it; one while the process exits early (an error before the run) is no news."""
    with contextlib.suppress(BaseException):
        importlib.import_module(module)


def stop_local_ray() -> None:
    """Shut down the Ray this process started, at once.

    ``ray.shutdown()`` stops the raylet and the GCS before the autoscaler's monitor,
    whose SIGTERM handler then reports its "failure" to the GCS that is gone, and is
    killed only after a 1 s grace period: a second of every local run spent waiting.
    A Ray started here has nothing to scale, so its monitor is killed first.
    """
    import ray

    node = getattr(ray._private.worker, "_global_node", None)
    for process in getattr(node, "all_processes", {}).get("monitor", []):
        with contextlib.suppress(Exception):  # already gone: nothing to wait for
            process.process.kill()
            process.process.wait(timeout=1)
    ray.shutdown()


def connect_error(
    exc: BaseException,
    address: str,
    *,
    token_sent: bool,
    token_found: bool,
    token_path: str | None = None,
) -> BackendUnavailableError | SpecError:
    """Turn what ``ray.init`` raised while joining ``address`` into one toolkit error.

    Args:
        exc: The exception, with its cause chain.
        address: What was joined (``auto``, ``host:port``), named in the message.
        token_sent: This driver sent a token (so the cluster refused that one).
        token_found: A token was found here (it may have been withheld from a
            cluster on another host).
        token_path: ``$RAY_AUTH_TOKEN_PATH``, named when no token was found.

    Returns:
        BackendUnavailableError (exit 3) for an unreachable cluster, a token
        problem or a version mismatch (with both versions); SpecError (exit 2)
        when Ray rejected the address itself.
    """
    chain = list(_chain(exc))
    text = "\n".join(str(error) for error in chain)
    cluster = _cluster(address)
    cluster_ = cluster[0].upper() + cluster[1:]  # starting a sentence

    versions = _VERSION_MISMATCH.search(text)
    if versions:
        cluster_ray, cluster_py, here_ray, here_py = versions.groups()
        return BackendUnavailableError(
            f"{cluster_} runs Ray {cluster_ray} with Python {cluster_py}, "
            f"but this machine has Ray {here_ray} with Python {here_py}; a driver must "
            "match the cluster's versions.",
            hint=f"Run toolkit here with Ray {cluster_ray} and Python {cluster_py}, or let "
            "the cluster run the job: toolkit submit JOB --address http://HEAD:8265.",
        )

    if _is_auth_error(chain, text):
        if _BAD_TOKEN_PATH in text:  # Ray checks this before it tries to connect
            return BackendUnavailableError(
                f"RAY_AUTH_TOKEN_PATH names {token_path or 'a file'}, which is missing or "
                f"empty, so Ray won't join {cluster} without a token.", hint=TOKEN_HINT)
        if token_sent:
            problem = "refused the auth token this machine sent"
        elif token_found:
            problem = (
                "requires an auth token; the one on this machine was not sent, since it "
                "goes only to clusters on this machine unless RAY_AUTH_MODE=token is set"
            )
        elif token_path:
            problem = (
                f"requires an auth token, and none was found here (RAY_AUTH_TOKEN_PATH "
                f"names {token_path}, which is missing or empty)"
            )
        else:
            problem = (
                "requires an auth token, and none was found here ($RAY_AUTH_TOKEN, "
                "$RAY_AUTH_TOKEN_PATH or ~/.ray/auth_token)"
            )
        return BackendUnavailableError(f"{cluster_} {problem}.", hint=TOKEN_HINT)

    if isinstance(exc, ValueError) and "address" in text.lower():
        return SpecError(f"Ray address {address}: {_first_line(str(exc))}", hint=ADDRESS_HINT)

    if "Could not find any running Ray instance" in text:
        return BackendUnavailableError(
            f"No Ray cluster for address {address}: none is running on this machine.",
            hint=ADDRESS_HINT)
    # A token problem can look like a timeout (Ray Client): say so when none was sent.
    hint = ADDRESS_HINT if token_sent else f"{ADDRESS_HINT} If the cluster uses token auth: " \
        + TOKEN_HINT[len("This cluster uses token auth. "):]
    if any(isinstance(error, (ConnectionError, TimeoutError)) for error in chain):
        return BackendUnavailableError(
            f"Cannot reach {cluster} ({_innermost_reason(chain)}).", hint=hint)
    return BackendUnavailableError(
        f"Could not join {cluster}: {_innermost_reason(chain)}", hint=hint)


def local_ray_environment(environ: MutableMapping[str, str]) -> None:
    """What a Ray started here runs with, unless the user set it.

    Ray Data reads Parquet footers with a pool of 32 actors, sized for a cluster
    listing an object store; on one machine each is a Python process to start for a
    file or two. On 2 cores, tabular-predict over a million Parquet rows took 1.21x
    the wall time of bare Ray Data with 32, 1.00x with 2 (bench/tabular_vs_seeds.py).
    """
    environ.setdefault(FOOTER_ACTORS_ENV, str(LOCAL_FOOTER_ACTORS))


def local_logical_cpus() -> int:
    """Logical CPUs for a Ray started here: at least 4, even on a 2-core laptop.

    Besides the engine actor (1 CPU) a run needs read and write tasks, and a resumed
    run Ray Data's checkpoint-filter actor (1 CPU). With only 2 logical CPUs the
    reads starve and a resumed run waits forever; the extra stages are light, so
    sharing the cores is fine.
    """
    return max(4, os.cpu_count() or 1)


# Ray's text (ray/_private/utils.py check_version_info):
#   "Version mismatch: The cluster was started with:\n    Ray: X\n    Python: Y\n"
#   "This process on node Z was started with:\n    Ray: A\n    Python: B\n"
_VERSION_MISMATCH = re.compile(
    r"The cluster was started with:\s*Ray:\s*(\S+)\s*Python:\s*(\S+)\s*"
    r"This process on .*? was started with:\s*Ray:\s*(\S+)\s*Python:\s*(\S+)",
    re.DOTALL,
)
_BAD_TOKEN_PATH = "RAY_AUTH_TOKEN_PATH is set but"
_AUTH_MARKERS = ("InvalidAuthToken", "Unauthenticated", "AuthenticationError",
                 "no authentication token was found", _BAD_TOKEN_PATH)


def _is_auth_error(chain: list[BaseException], text: str) -> bool:
    try:
        from ray.exceptions import AuthenticationError
    except ImportError:  # pragma: no cover - Ray is a dependency
        return any(marker in text for marker in _AUTH_MARKERS)
    if any(isinstance(error, AuthenticationError) for error in chain):
        return True
    return any(marker in text for marker in _AUTH_MARKERS)


def _chain(exc: BaseException) -> Iterator[BaseException]:
    """``exc`` and its causes (Ray wraps the real error in ConnectionError/RuntimeError)."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        yield current
        current = current.__cause__ or current.__context__


def _first_line(text: str) -> str:
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return lines[0] if lines else "unknown error"


def _innermost_reason(chain: list[BaseException]) -> str:
    """The last line of the innermost error: Ray puts the real cause (often a whole
    traceback) inside its ``Failed to connect ...`` wrappers."""
    for error in reversed(chain):
        lines = [line.strip() for line in str(error).splitlines() if line.strip()]
        if lines:
            reason = lines[-1]
            return reason if len(reason) <= 300 else reason[:297] + "..."
    return type(chain[-1]).__name__ if chain else "unknown error"


def _cluster(address: str) -> str:
    if address.strip().lower() == "auto":
        return "the Ray cluster that address auto found on this machine"
    return f"the Ray cluster at {address}"


def _set_ray_env(env: Mapping[str, str]) -> None:
    """Set env vars Ray reads, and make an already imported Ray read them again.

    Ray's ``RayConfig`` (RAY_AUTH_MODE) is read when ``ray`` is imported and its
    token loader caches the token; Ray's own ``_enable_token_auth``
    (``ray/_private/authentication/authentication_token_setup.py``) re-reads the
    config the same way after it sets RAY_AUTH_MODE.
    """
    if not env:
        return
    os.environ.update(env)
    from ray._raylet import AuthenticationTokenLoader, Config

    Config.initialize("")
    AuthenticationTokenLoader.instance().reset_cache()


def _with_scheme(url: str | None) -> str | None:
    return f"http://{url}" if url and not url.startswith("http") else url


def _dashboard_url() -> str | None:
    try:
        import ray

        url = ray.worker.get_dashboard_url()
    except Exception:  # noqa: BLE001 - the URL is informational only
        return None
    return _with_scheme(url)
