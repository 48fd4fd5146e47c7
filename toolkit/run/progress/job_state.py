"""A submitted job as its watchers see it: its status, its info, and the two questions
they ask of a backend.

The backends (:mod:`toolkit.cluster.backends`) answer with these; the watcher
(:mod:`toolkit.run.progress.following`, :mod:`toolkit.run.progress.watched_job`) reads
them, so it needs no backend of its own. Nothing here imports Ray or Anyscale.
"""

from __future__ import annotations

from datetime import datetime
from enum import Enum
from typing import Protocol

from pydantic import BaseModel, ConfigDict, Field


class JobStatus(str, Enum):
    """Where a submitted job is in its life. The same names as Ray's ``JobStatus``."""

    PENDING = "PENDING"
    RUNNING = "RUNNING"
    SUCCEEDED = "SUCCEEDED"
    FAILED = "FAILED"
    STOPPED = "STOPPED"
    #: The service reported a state this toolkit does not know (not terminal).
    UNKNOWN = "UNKNOWN"

    def __str__(self) -> str:
        return self.value

    def is_terminal(self) -> bool:
        """``True`` once the job can no longer change: SUCCEEDED, FAILED or STOPPED."""
        return self in (JobStatus.SUCCEEDED, JobStatus.FAILED, JobStatus.STOPPED)


class JobInfo(BaseModel):
    """A job's state as one backend reports it. Never carries env vars or secrets."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    backend: str
    job_id: str
    status: JobStatus
    name: str | None = None
    entrypoint: str | None = None
    message: str | None = Field(None, description="The backend's one-line explanation.")
    start_time: datetime | None = None
    end_time: datetime | None = None
    url: str | None = None
    output: str | None = Field(
        None, description="Where the job writes results (from submit metadata), if known."
    )

    @property
    def duration_s(self) -> float | None:
        if self.start_time is None or self.end_time is None:
            return None
        return (self.end_time - self.start_time).total_seconds()


class WatchedJobs(Protocol):
    """What following a job asks of where it runs (every
    :class:`~toolkit.cluster.backends.base.Backend` answers it)."""

    #: Seconds between status polls while following a job.
    poll_interval_s: float
    #: The jobs run on this machine, sharing its Python (a ``--address local`` head).
    local: bool

    def status(self, job_id: str) -> JobInfo:
        """The job's current state."""
        ...

    def logs(self, job_id: str) -> str:
        """Everything the job's driver printed so far."""
        ...
