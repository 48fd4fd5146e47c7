"""The ``ray`` backend: jobs on a Ray cluster through ``ray.job_submission``.

The address is the Ray dashboard URL (``http://HEAD:8265``), ``local`` for a head
on this machine (started once, then reused: :mod:`toolkit.cluster.backends.local_head`),
or ``$RAY_ADDRESS`` when no ``--address`` is given. An explicit ``--address``
always wins over ``$RAY_ADDRESS`` (Ray's own client does it the other way round).

Token auth (on by default in Ray 2.60): the client sends the token from
``$RAY_AUTH_TOKEN``, ``$RAY_AUTH_TOKEN_PATH`` or ``~/.ray/auth_token`` when
``RAY_AUTH_MODE=token`` is set or the cluster is on this machine (which shares
that token file). It is never sent to other hosts unless you set RAY_AUTH_MODE.
The driver of ``toolkit run`` follows the same rule: both use
:mod:`toolkit.run.ray_auth`.

Example:
    >>> backend = RayJobsBackend.connect("local")  # doctest: +SKIP
    >>> handle = backend.submit(prepare_submission(job, spec, target="ray", local=True).request, {})
"""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import Callable, Iterator, Mapping
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any

from toolkit.cluster.backends.base import (
    JobHandle,
    JobInfo,
    JobNotFoundError,
    JobStatus,
    SubmitRequest,
)
from toolkit.errors import BackendUnavailableError, ToolkitError
from toolkit.run.ray_auth import CONNECT_TIMEOUT_S, TOKEN_HINT, auth_headers, probe_address

if TYPE_CHECKING:
    from ray.job_submission import JobSubmissionClient

_ADDRESS_ENV_VARS = ("RAY_API_SERVER_ADDRESS", "RAY_ADDRESS")
_ADDRESS_HINT = (
    "Pass --address http://HEAD:8265 (the Ray dashboard of your cluster), or --address local "
    "to start (or reuse) a Ray head on this machine, or set RAY_ADDRESS. "
    "For Anyscale use --backend anyscale."
)


@contextlib.contextmanager
def _address_env_hidden() -> Iterator[None]:
    """Ray's client lets RAY_ADDRESS override its ``address`` argument; ours must win."""
    saved = {name: os.environ.pop(name) for name in _ADDRESS_ENV_VARS if name in os.environ}
    try:
        yield
    finally:
        os.environ.update(saved)


def _quiet_ray_upload_logs() -> None:
    for name in ("ray.dashboard.modules.dashboard_sdk", "ray._private.runtime_env.packaging"):
        logging.getLogger(name).setLevel(logging.WARNING)
    # "Directory '.git' is now ignored by default": we exclude those ourselves.
    logging.getLogger("ray._private.runtime_env.working_dir").setLevel(logging.ERROR)


def _first_line(message: str | None) -> str | None:
    """Ray appends the last 20,000 chars of the logs to a failure message; keep the gist."""
    if not message:
        return message
    first = message.strip().splitlines()[0]
    return first.split(", last available logs", 1)[0].rstrip(":")


def _timestamp(ms: int | None) -> datetime | None:
    if not ms:
        return None
    return datetime.fromtimestamp(ms / 1000, tz=timezone.utc)


class RayJobsBackend:
    """Jobs on one Ray cluster. Build it with :meth:`connect`."""

    name = "ray"
    poll_interval_s = 1.0

    def __init__(
        self,
        client: JobSubmissionClient,
        address: str,
        *,
        local: bool = False,
        address_flag: str | None = None,
    ):
        """
        Args:
            client: A connected ``ray.job_submission.JobSubmissionClient``.
            address: Its dashboard URL (shown to users and used in job URLs).
            local: The cluster is a head on this machine sharing this Python
                environment: pip requirements are skipped.
            address_flag: What the user passed as --address (for hints).
        """
        self._client = client
        self.address = address.rstrip("/")
        self.local = local
        self.where = self.address
        self._flags = f" --address {address_flag}" if address_flag else ""

    @classmethod
    def connect(
        cls,
        address: str | None,
        *,
        on_event: Callable[[str], None] | None = None,
        connect_timeout_s: float = CONNECT_TIMEOUT_S,
        environ: Mapping[str, str] | None = None,
    ) -> RayJobsBackend:
        """Connect to ``address`` (see the module doc), failing within seconds if down.

        Raises:
            BackendUnavailableError: no address, unreachable, or the token is refused.
        """
        environ = os.environ if environ is None else environ
        local = address == "local"
        if local:
            from toolkit.cluster.backends.local_head import ensure_local_head

            url = ensure_local_head(on_event=on_event).dashboard_url
        else:
            url = address or environ.get("RAY_API_SERVER_ADDRESS") or environ.get("RAY_ADDRESS")
            if not url:
                raise BackendUnavailableError("No Ray cluster given.", hint=_ADDRESS_HINT)
        probe_address(url, connect_timeout_s, hint=_ADDRESS_HINT)
        from ray.exceptions import AuthenticationError
        from ray.job_submission import JobSubmissionClient

        _quiet_ray_upload_logs()

        try:
            with _address_env_hidden():
                client = JobSubmissionClient(url, headers=auth_headers(url, environ))
        except AuthenticationError:
            raise BackendUnavailableError(
                f"The Ray cluster at {url} refused this client's credentials.", hint=TOKEN_HINT
            ) from None
        except (ConnectionError, RuntimeError, ValueError) as exc:
            raise BackendUnavailableError(
                f"Cannot use the Ray cluster at {url}: {exc}", hint=_ADDRESS_HINT
            ) from None
        return cls(client, url, local=local, address_flag=address)

    # -- helpers ----------------------------------------------------------------------

    def job_url(self, job_id: str) -> str:
        return f"{self.address}/#/jobs/{job_id}"

    def _call(self, action: str, job_id: str | None, fn: Callable[[], Any]) -> Any:
        """Run one client call, turning Ray's exceptions into toolkit errors."""
        import requests
        from ray.exceptions import AuthenticationError

        try:
            return fn()
        except ToolkitError:
            raise
        except AuthenticationError:
            raise BackendUnavailableError(
                f"The Ray cluster at {self.address} refused this client's credentials.",
                hint=TOKEN_HINT,
            ) from None
        except (requests.exceptions.RequestException, ConnectionError) as exc:
            raise BackendUnavailableError(
                f"Lost the connection to the Ray cluster at {self.address} while trying to "
                f"{action}: {exc}",
                hint="Check that the cluster is still up.",
            ) from None
        except RuntimeError as exc:
            text = str(exc)
            if job_id is not None and ("404" in text or "does not exist" in text):
                raise JobNotFoundError(
                    f"No job {job_id!r} on the Ray cluster at {self.address}.",
                    hint=f"List its jobs with: toolkit list{self._flags}",
                ) from None
            raise BackendUnavailableError(
                f"The Ray cluster at {self.address} could not {action}: {text}"
            ) from None

    def _info(self, details: Any) -> JobInfo:
        metadata = details.metadata or {}
        job_id = details.submission_id or details.job_id
        try:
            status = JobStatus(str(details.status))
        except ValueError:
            status = JobStatus.UNKNOWN
        return JobInfo(
            backend=self.name,
            job_id=job_id,
            status=status,
            name=metadata.get("job_name"),
            entrypoint=details.entrypoint,
            message=_first_line(details.message),
            start_time=_timestamp(details.start_time),
            end_time=_timestamp(details.end_time),
            url=self.job_url(job_id),
            output=metadata.get("toolkit_output"),
        )

    # -- the Backend protocol ----------------------------------------------------------

    def runtime_env(self, request: SubmitRequest, secrets: Mapping[str, str]) -> dict[str, Any]:
        """The runtime_env for ``request``: working_dir upload, env vars, pip unless local."""
        runtime_env: dict[str, Any] = {
            "working_dir": str(request.working_dir),
            "excludes": list(request.excludes),
            "env_vars": {**request.env_vars, **secrets},
        }
        if request.py_modules:
            runtime_env["py_modules"] = [str(request.working_dir / p) for p in request.py_modules]
        if request.requirements and not self.local:
            runtime_env["pip"] = list(request.requirements)
        return runtime_env

    def submit(self, request: SubmitRequest, secrets: Mapping[str, str]) -> JobHandle:
        """Upload the working dir and start ``request.entrypoint``.

        Raises:
            BackendUnavailableError: the cluster refused or failed the submission.
        """
        job_id = self._call(
            "submit the job",
            None,
            lambda: self._client.submit_job(
                entrypoint=request.entrypoint,
                runtime_env=self.runtime_env(request, secrets),
                metadata={"job_name": request.name, "toolkit_job": request.job,
                          **({"toolkit_output": request.output} if request.output else {})},
            ),
        )
        return JobHandle(
            backend=self.name, job_id=job_id, address=self.address, url=self.job_url(job_id)
        )

    def status(self, job_id: str) -> JobInfo:
        return self._info(
            self._call("get the job's status", job_id, lambda: self._client.get_job_info(job_id))
        )

    def logs(self, job_id: str) -> str:
        return str(
            self._call("get the job's logs", job_id, lambda: self._client.get_job_logs(job_id))
        )

    def stop(self, job_id: str) -> bool:
        return bool(self._call("stop the job", job_id, lambda: self._client.stop_job(job_id)))

    def list(self) -> list[JobInfo]:
        jobs = self._call("list jobs", None, self._client.list_jobs)
        infos = [self._info(details) for details in jobs if details.submission_id]
        epoch = datetime.fromtimestamp(0, tz=timezone.utc)
        return sorted(infos, key=lambda info: info.start_time or epoch, reverse=True)
