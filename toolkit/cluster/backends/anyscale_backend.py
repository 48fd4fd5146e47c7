"""The ``anyscale`` backend: jobs on Anyscale through the ``anyscale`` package's SDK.

It submits the same ``JobConfig`` that ``toolkit render`` writes (validated with
anyscale's own models), with the absolute working dir and the caller's secrets
added in memory only. The SDK object is injectable: tests pass
``anyscale.job.JobSDK(client=FakeAnyscaleClient(), timer=FakeTimer())``, the fake
that anyscale ships, so no test talks to Anyscale or patches its internals.

Credentials come from ``$ANYSCALE_CLI_TOKEN`` or ``~/.anyscale/credentials.json``
(written by ``anyscale login``); without either, every call fails at once with a
``BackendUnavailableError`` (exit 3) saying how to log in.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import click  # only to catch the ClickExceptions that anyscale itself raises

from toolkit.cluster.backends.base import (
    JobHandle,
    JobInfo,
    JobNotFoundError,
    JobStatus,
    SubmitRequest,
)
from toolkit.errors import BackendUnavailableError, ToolkitError

CREDENTIALS_ENV_VAR = "ANYSCALE_CLI_TOKEN"
CREDENTIALS_FILE = Path("~/.anyscale/credentials.json")
LOGIN_HINT = (
    "Run `anyscale login`, or set ANYSCALE_CLI_TOKEN to an API key created in the Anyscale "
    "console (https://console.anyscale.com/v2/api-keys)."
)

#: anyscale's JobState -> ours.
_STATES: dict[str, JobStatus] = {
    "STARTING": JobStatus.PENDING,
    "RUNNING": JobStatus.RUNNING,
    "SUCCEEDED": JobStatus.SUCCEEDED,
    "FAILED": JobStatus.FAILED,
    "TERMINATED": JobStatus.STOPPED,
    "UNKNOWN": JobStatus.UNKNOWN,
}


def has_credentials(environ: Mapping[str, str] | None = None, home: Path | None = None) -> bool:
    """Whether an Anyscale token is configured (not whether it is valid)."""
    environ = os.environ if environ is None else environ
    if environ.get(CREDENTIALS_ENV_VAR, "").strip():
        return True
    path = (home / ".anyscale" / "credentials.json") if home else CREDENTIALS_FILE.expanduser()
    return path.is_file()


def _console_url(job_id: str) -> str:
    from anyscale.util import get_endpoint

    return str(get_endpoint(f"/jobs/{job_id}"))


class AnyscaleBackend:
    """Jobs on Anyscale.

    Example:
        >>> backend = AnyscaleBackend()  # doctest: +SKIP
        >>> handle = backend.submit(prepare_submission(job, spec).request, secret_env())
        >>> backend.status(handle.job_id).status
        <JobStatus.PENDING: 'PENDING'>
    """

    name = "anyscale"
    poll_interval_s = 10.0
    local = False
    same_machine = False
    where = "Anyscale"

    def __init__(
        self,
        sdk: Any | None = None,
        *,
        console_url: Callable[[str], str] = _console_url,
        environ: Mapping[str, str] | None = None,
    ):
        """
        Args:
            sdk: An ``anyscale.job.JobSDK``; built on first use (after the login
                check) when omitted.
            console_url: job id -> console URL.
            environ: Where to look for ``ANYSCALE_CLI_TOKEN`` (default ``os.environ``).
        """
        self._sdk = sdk
        self._console_url = console_url
        self._environ = environ

    @classmethod
    def connect(cls, environ: Mapping[str, str] | None = None) -> AnyscaleBackend:
        """A backend using the real SDK, after a quick local check for credentials.

        Raises:
            BackendUnavailableError: not logged in (no token anywhere).
        """
        backend = cls(environ=environ)
        backend.check_login()
        return backend

    def check_login(self) -> None:
        """Fail fast, without network, when no Anyscale token is configured."""
        if self._sdk is None and not has_credentials(self._environ):
            raise BackendUnavailableError(
                "Not logged in to Anyscale: ANYSCALE_CLI_TOKEN is not set and "
                f"{CREDENTIALS_FILE} does not exist.",
                hint=LOGIN_HINT,
            )

    def _jobs(self) -> Any:
        if self._sdk is None:
            self.check_login()
            try:
                from anyscale.job import JobSDK

                self._sdk = JobSDK()
            except click.ClickException as exc:  # anyscale's credential errors
                raise BackendUnavailableError(
                    f"Anyscale refused the credentials: {exc.format_message()}", hint=LOGIN_HINT
                ) from None
            except Exception as exc:  # noqa: BLE001 - network errors of many kinds
                raise BackendUnavailableError(
                    f"Cannot reach Anyscale: {exc}", hint="Check your network and ANYSCALE_HOST."
                ) from None
        return self._sdk

    def _call(self, action: str, job_id: str | None, fn: Callable[[Any], Any]) -> Any:
        jobs = self._jobs()
        try:
            return fn(jobs)
        except ToolkitError:
            raise
        except click.ClickException as exc:
            raise BackendUnavailableError(
                f"Anyscale could not {action}: {exc.format_message()}", hint=LOGIN_HINT
            ) from None
        except RuntimeError as exc:
            if job_id is not None and "not found" in str(exc):
                raise JobNotFoundError(
                    f"No Anyscale job {job_id!r}.",
                    hint="List your jobs with: toolkit list --backend anyscale",
                ) from None
            raise BackendUnavailableError(f"Anyscale could not {action}: {exc}") from None
        except (OSError, ValueError) as exc:
            raise BackendUnavailableError(f"Anyscale could not {action}: {exc}") from None

    def _info(self, status: Any) -> JobInfo:
        state = str(getattr(status.state, "value", status.state))
        created = status.created_at
        if isinstance(created, datetime) and created.tzinfo is None:
            created = created.replace(tzinfo=timezone.utc)
        config = getattr(status, "config", None)
        return JobInfo(
            backend=self.name,
            job_id=status.id,
            status=_STATES.get(state, JobStatus.UNKNOWN),
            name=status.name,
            entrypoint=getattr(config, "entrypoint", None),
            message=f"Anyscale state {state}",
            start_time=created if isinstance(created, datetime) else None,
            url=self._console_url(status.id),
        )

    # -- the Backend protocol ----------------------------------------------------------

    def job_config(self, request: SubmitRequest, secrets: Mapping[str, str]) -> Any:
        """The validated ``anyscale.job.models.JobConfig`` this backend submits."""
        from toolkit.cluster.render import anyscale_job_config, validate_job_config

        return validate_job_config(
            anyscale_job_config(request, working_dir=str(request.working_dir), extra_env=secrets)
        )

    def submit(self, request: SubmitRequest, secrets: Mapping[str, str]) -> JobHandle:
        config = self.job_config(request, secrets)
        job_id = self._call("submit the job", None, lambda jobs: jobs.submit(config))
        return JobHandle(backend=self.name, job_id=job_id, url=self._console_url(job_id))

    def status(self, job_id: str) -> JobInfo:
        return self._info(
            self._call("get the job's status", job_id, lambda jobs: jobs.status(id=job_id))
        )

    def logs(self, job_id: str) -> str:
        return str(
            self._call("get the job's logs", job_id, lambda jobs: jobs.get_logs(id=job_id)) or ""
        )

    def stop(self, job_id: str) -> bool:
        if self.status(job_id).status.is_terminal():
            return False
        self._call("terminate the job", job_id, lambda jobs: jobs.terminate(id=job_id))
        return True

    def list(self) -> list[JobInfo]:
        statuses = self._call("list jobs", None, lambda jobs: list(jobs.list(max_items=50)))
        infos = [self._info(status) for status in statuses]
        epoch = datetime.fromtimestamp(0, tz=timezone.utc)
        return sorted(infos, key=lambda info: info.start_time or epoch, reverse=True)
