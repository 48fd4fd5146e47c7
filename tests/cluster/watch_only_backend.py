"""A base for test Backends that can only be watched: status and logs are theirs to script."""

from __future__ import annotations

from collections.abc import Mapping

from toolkit.cluster.backends.base import JobHandle, JobInfo, SubmitRequest


class WatchOnlyBackend:
    """Speaks the whole Backend protocol; subclasses define ``status`` and ``logs``."""

    name = "fake"
    poll_interval_s = 2.0
    local = False
    same_machine = False
    where = "a test"

    def submit(self, request: SubmitRequest, secrets: Mapping[str, str]) -> JobHandle:
        raise NotImplementedError

    def stop(self, job_id: str) -> bool:
        raise NotImplementedError

    def list(self) -> list[JobInfo]:
        return []
