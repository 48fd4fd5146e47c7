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
:mod:`toolkit.run.ray.auth`.

Example:
    >>> backend = RayJobsBackend.connect("local")  # doctest: +SKIP
    >>> handle = backend.submit(prepare_submission(job, spec, target="ray", local=True).request, {})
"""

from __future__ import annotations

import contextlib
import logging
import os
import shlex
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any

from toolkit.cluster.backends.base import (
    JobHandle,
    JobInfo,
    JobNotFoundError,
    JobStatus,
    SubmitRequest,
)
from toolkit.errors import BackendUnavailableError, ToolkitError
from toolkit.run.ray.auth import (
    CONNECT_TIMEOUT_S,
    TOKEN_HINT,
    auth_headers,
    is_local_address,
    probe_address,
)

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


#: How long the package probe may take before every requirement is installed anyway.
PROBE_TIMEOUT_S = 60.0
PROBE_MARKER = "toolkit-probe: "
#: A probe's findings stand for one cluster session this long.
PROBE_CACHE_S = 3600.0


def _probe_cache() -> Path:
    from toolkit.cluster.backends.local_head import cache_dir

    return cache_dir() / "cluster-packages.json"


def _distribution_name(requirement: str) -> str:
    """``pydantic`` of ``pydantic>=2.7,<3``."""
    import re

    return re.split(r"[<>=!~;\[ ]", requirement, maxsplit=1)[0].strip()


def _probe_result(logs: str) -> dict[str, str | None] | None:
    import json

    for line in reversed(logs.splitlines()):
        if line.startswith(PROBE_MARKER):
            with contextlib.suppress(ValueError):
                return json.loads(line[len(PROBE_MARKER):])
    return None


def _satisfies(version: str | None, requirement: str) -> bool:
    """Whether an installed ``version`` meets ``requirement`` (a missing one doesn't)."""
    if version is None:
        return False
    try:
        from packaging.requirements import Requirement

        return Requirement(requirement).specifier.contains(version, prereleases=True)
    except Exception:  # noqa: BLE001 - an unusual requirement: installed is enough
        return True


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
        # Its nodes see this machine's files at the same paths (a head started here).
        self.same_machine = local or is_local_address(self.address)
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

    def runtime_env(self, request: SubmitRequest, secrets: Mapping[str, str],
                    install: Sequence[str] = ()) -> dict[str, Any]:
        """The runtime_env for ``request``: working_dir upload, env vars, and pip for
        ``install`` (what the cluster lacks of ``request.requirements``) only."""
        runtime_env: dict[str, Any] = {
            "working_dir": str(request.working_dir),
            "excludes": list(request.excludes),
            "env_vars": {**request.env_vars, **secrets},
        }
        if request.py_modules:
            runtime_env["py_modules"] = [str(request.working_dir / p) for p in request.py_modules]
        if install:
            runtime_env["pip"] = list(install)
        return runtime_env

    def missing_requirements(self, requirements: Sequence[str],
                             timeout_s: float = PROBE_TIMEOUT_S) -> list[str]:
        """Which of ``requirements`` the cluster's Python lacks (or has at a version
        they exclude), asked of the cluster itself with a job of one line.

        A pip runtime_env builds a fresh virtualenv for every job (more than a minute
        before the job runs, ~85 s measured), so the job gets one only for what is
        really missing. A head on this machine sharing this Python lacks nothing.
        A probe that can't tell (it failed, timed out) keeps every requirement.
        """
        if not requirements or self.local:
            return []
        wanted = {_distribution_name(r): r for r in requirements}
        found = self._remembered_versions(sorted(wanted))
        if found is None:
            found = self._probe_versions(sorted(wanted), timeout_s)
            if found is None:
                return list(requirements)
            self._remember_versions(found)
        return [requirement for name, requirement in wanted.items()
                if not _satisfies(found.get(name), requirement)]

    def _probe_versions(self, names: list[str], timeout_s: float
                        ) -> dict[str, str | None] | None:
        """The versions of ``names`` in the cluster's Python (None: not installed), from
        a job of one line; None when the probe can't tell."""
        code = ("import importlib.metadata as m, json\n"
                "def v(n):\n"
                "    try: return m.version(n)\n"
                "    except m.PackageNotFoundError: return None\n"
                f"print({PROBE_MARKER!r} + json.dumps({{n: v(n) for n in {names!r}}}))")
        try:
            job_id = self._client.submit_job(
                entrypoint=shlex.join(["python", "-c", code]),
                metadata={"job_name": "toolkit-probe", "toolkit_probe": "packages"})
            deadline = time.monotonic() + timeout_s
            while not self._client.get_job_status(job_id).is_terminal():
                if time.monotonic() > deadline:
                    self._client.stop_job(job_id)
                    return None
                time.sleep(0.2)
            logs = self._client.get_job_logs(job_id)
            with contextlib.suppress(Exception):
                self._client.delete_job(job_id)  # a probe is no job of the user's
        except Exception:  # noqa: BLE001 - the submit itself reports a real problem
            return None
        return _probe_result(logs)

    def _session(self) -> str | None:
        """The cluster's Ray session (a restart is a new one), from its dashboard."""
        import requests

        try:
            response = requests.get(f"{self.address}/api/version", timeout=CONNECT_TIMEOUT_S,
                                    headers=auth_headers(self.address, os.environ))
            return str(response.json()["session_name"])
        except Exception:  # noqa: BLE001 - unknown: probe again
            return None

    def _remembered_versions(self, names: list[str]) -> dict[str, str | None] | None:
        """What an earlier probe of this cluster session found, if it covers ``names``
        and is recent: a second submit doesn't wait for a probe job again."""
        import json

        session = self._session()
        if session is None:
            return None
        try:
            cached = json.loads(_probe_cache().read_text(encoding="utf-8"))
            entry = cached[f"{self.address} {session}"]
        except (OSError, ValueError, KeyError, TypeError):
            return None
        if not isinstance(entry, dict) or time.time() - entry.get("at", 0) > PROBE_CACHE_S:
            return None
        versions = entry.get("versions") or {}
        return versions if all(name in versions for name in names) else None

    def _remember_versions(self, versions: dict[str, str | None]) -> None:
        import json

        session = self._session()
        if session is None:
            return
        path = _probe_cache()
        with contextlib.suppress(OSError, ValueError):
            try:
                cached = json.loads(path.read_text(encoding="utf-8"))
            except (OSError, ValueError):
                cached = {}
            key = f"{self.address} {session}"
            known = (cached.get(key) or {}).get("versions") or {}
            cached[key] = {"at": time.time(), "versions": {**known, **versions}}
            path.parent.mkdir(parents=True, exist_ok=True)
            partial = path.with_suffix(".tmp")
            partial.write_text(json.dumps(cached, indent=2), encoding="utf-8")
            partial.replace(path)

    def submit(self, request: SubmitRequest, secrets: Mapping[str, str]) -> JobHandle:
        """Upload the working dir and start ``request.entrypoint``, installing only the
        requirements the cluster lacks.

        Raises:
            BackendUnavailableError: the cluster refused or failed the submission.
        """
        install = self.missing_requirements(request.requirements)
        metadata = {"job_name": request.name, "toolkit_job": request.job,
                    **({"toolkit_output": request.output} if request.output else {}),
                    **({"toolkit_fingerprint": request.fingerprint}
                       if request.fingerprint else {})}
        job_id = self._call(
            "submit the job",
            None,
            lambda: self._client.submit_job(
                entrypoint=request.entrypoint,
                runtime_env=self.runtime_env(request, secrets, install),
                metadata=metadata,
            ),
        )
        return JobHandle(
            backend=self.name, job_id=job_id, address=self.address, url=self.job_url(job_id),
            installs=install,
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
        infos = [self._info(details) for details in jobs if details.submission_id
                 and not (details.metadata or {}).get("toolkit_probe")]
        epoch = datetime.fromtimestamp(0, tz=timezone.utc)
        return sorted(infos, key=lambda info: info.start_time or epoch, reverse=True)
