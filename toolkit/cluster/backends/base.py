"""What every backend speaks: the job models, the status enum and the Protocol.

A backend runs a prepared job somewhere else (a Ray cluster through the Ray Jobs
API, or Anyscale) and answers questions about it. The CLI and the watcher of a job
(:mod:`toolkit.run.progress.following`) only use this module's names (a job's status
and info are the progress package's, :mod:`toolkit.run.progress.job_state`), so adding
a backend means implementing :class:`Backend` and registering it in
:mod:`toolkit.cluster.backends`.

Nothing here imports Ray or Anyscale.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from pydantic import BaseModel, ConfigDict, Field

from toolkit.errors import SpecError
from toolkit.run.progress.job_state import JobInfo, JobStatus

__all__ = ["Backend", "JobHandle", "JobInfo", "JobNotFoundError", "JobStatus", "SubmitRequest"]


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class JobHandle(_Model):
    """What ``submit`` returns: enough to find the job again."""

    backend: str = Field(description="'ray' or 'anyscale'.")
    job_id: str = Field(description="The submission id (Ray) or job id (Anyscale).")
    address: str | None = Field(
        None, description="The Ray dashboard URL the job went to; None for Anyscale."
    )
    url: str | None = Field(None, description="Where to watch the job in a browser.")
    installs: list[str] = Field(
        default_factory=list,
        description="Requirements installed for the job because the cluster lacked them.")


class SubmitRequest(_Model):
    """A job ready to run: the spec file written, the entrypoint and what to upload.

    :func:`toolkit.cluster.render.prepare_submission` builds it from a validated spec; the
    Ray backend turns it into a runtime_env and the Anyscale backend into a
    ``JobConfig``. It holds no secrets: those are passed to ``submit`` separately
    and never stored.
    """

    job: str = Field(description="The job template name, e.g. 'text-industry'.")
    name: str = Field(description="Job name shown by the backend.")
    entrypoint: str = Field(description="Command run in the uploaded working dir.")
    working_dir: Path = Field(description="Absolute directory uploaded with the job.")
    spec_path: Path = Field(description="The spec file, relative to working_dir.")
    py_modules: list[Path] = Field(
        default_factory=list,
        description="Package directories shipped beside the working dir, relative to it.",
    )
    excludes: list[str] = Field(description="Globs left out of the upload.")
    requirements: list[str] = Field(
        default_factory=list, description="pip requirements installed on top of the image."
    )
    env_vars: dict[str, str] = Field(
        default_factory=dict, description="Non-secret environment variables for the job."
    )
    image_uri: str = Field(description="Container image (Anyscale).")
    compute_config: dict[str, Any] = Field(
        description="Anyscale compute config mapping: head_node, worker_nodes, cloud."
    )
    max_retries: int = Field(description="Anyscale retries of the whole job.")
    cloud: str | None = None
    output: str | None = Field(
        None, description="The spec's data.output, recorded so `status` can find the summary."
    )
    fingerprint: str | None = Field(
        None, description="The spec's results fingerprint (as the run's manifest records it), "
        "so a job in the dashboard can be matched to its output folder.",
    )


class JobNotFoundError(SpecError):
    """The backend has no job with that id (exit code 2: a bad argument)."""


@runtime_checkable
class Backend(Protocol):
    """A place jobs run. Every method raises a :class:`toolkit.errors.ToolkitError`:
    ``BackendUnavailableError`` (exit 3) when the service can't be reached or
    refuses the credentials, :class:`JobNotFoundError` (exit 2) for an unknown id.
    """

    #: ``"ray"`` or ``"anyscale"``.
    name: str
    #: Seconds between status polls while following a job.
    poll_interval_s: float
    #: The jobs run on this machine, sharing its Python (a ``--address local`` head).
    local: bool
    #: The cluster's nodes run on this machine and see its files at the same paths.
    same_machine: bool
    #: Where the jobs go, for people: a dashboard URL or "Anyscale".
    where: str

    def submit(self, request: SubmitRequest, secrets: Mapping[str, str]) -> JobHandle:
        """Start the job. ``secrets`` become env vars of the job and are never stored."""
        ...

    def status(self, job_id: str) -> JobInfo:
        """The job's current state."""
        ...

    def logs(self, job_id: str) -> str:
        """Everything the job's driver printed so far."""
        ...

    def stop(self, job_id: str) -> bool:
        """Ask the job to stop; ``False`` if it had already ended."""
        ...

    def list(self) -> list[JobInfo]:
        """Jobs this backend knows, newest first."""
        ...


# --- secrets -------------------------------------------------------------------------

#: Variables passed from the caller's environment to the job at submit time.
SECRET_ENV_NAMES: tuple[str, ...] = (
    "HF_TOKEN",
    "HUGGING_FACE_HUB_TOKEN",
    "WANDB_API_KEY",
    "OPENAI_API_KEY",
    "AWS_ACCESS_KEY_ID",
    "AWS_SECRET_ACCESS_KEY",
    "AWS_SESSION_TOKEN",
    "AWS_REGION",
    "AWS_DEFAULT_REGION",
)
_SECRET_MARKERS = ("TOKEN", "SECRET", "PASSWORD", "API_KEY", "ACCESS_KEY", "CREDENTIAL")


def secret_env(environ: Mapping[str, str] | None = None,
               names: Iterable[str] = ()) -> dict[str, str]:
    """The secrets to hand a job, taken from ``environ`` (default: ``os.environ``).

    Only :data:`SECRET_ENV_NAMES` and ``names`` (e.g. the variables an http engine
    reads its request headers from) that are set and non-empty; names that point at
    local files (``AWS_PROFILE``, ``AWS_CA_BUNDLE``) would be useless on a cluster.
    Only names, never values, may be shown to users: see :func:`describe_secrets`.
    """
    environ = os.environ if environ is None else environ
    wanted = sorted({*SECRET_ENV_NAMES, *names})
    return {name: environ[name] for name in wanted if environ.get(name)}


def describe_secrets(secrets: Mapping[str, str]) -> str:
    """``"HF_TOKEN, AWS_ACCESS_KEY_ID"``: the names only."""
    return ", ".join(sorted(secrets)) or "none"


def looks_secret(name: str) -> bool:
    """Whether an env var name looks like it holds a credential."""
    upper = name.upper()
    return name in SECRET_ENV_NAMES or any(marker in upper for marker in _SECRET_MARKERS)


def check_no_secrets(env_vars: Mapping[str, str], where: str) -> None:
    """Refuse to write secret-looking variables into ``where`` (a file or a request).

    Raises:
        SpecError: naming the variables (not their values).
    """
    bad = sorted(name for name in env_vars if looks_secret(name))
    if bad:
        raise SpecError(
            f"Refusing to put {', '.join(bad)} into {where}: it looks like a secret.",
            hint="Secrets are passed from your environment at submit time "
            f"({', '.join(SECRET_ENV_NAMES)}, AWS_*); export them instead.",
        )
