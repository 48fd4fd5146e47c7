"""follow/raise_for_outcome with a scripted backend and a hand-driven clock: no sleeping."""

from __future__ import annotations


import pytest
from watch_only_backend import WatchOnlyBackend

from toolkit.cluster.backends.base import Backend, JobInfo, JobStatus
from toolkit.run.progress.following import Clock, follow, raise_for_outcome
from toolkit.errors import JobFailedError, JobStoppedError, WaitTimeoutError


class ScriptedBackend(WatchOnlyBackend):
    """A Backend whose job moves one scripted step per status poll."""

    name = "scripted"

    def __init__(self, steps: list[tuple[JobStatus, str]]):
        self.steps = steps
        self.polls = 0
        self.current = steps[0] if steps else (JobStatus.PENDING, "")

    def status(self, job_id: str) -> JobInfo:
        self.current = self.steps[min(self.polls, len(self.steps) - 1)]
        self.polls += 1
        return JobInfo(backend=self.name, job_id=job_id, status=self.current[0],
                       message="scripted")

    def logs(self, job_id: str) -> str:
        return self.current[1]


class FakeClock:
    def __init__(self) -> None:
        self.now = 100.0
        self.sleeps: list[float] = []

    def clock(self) -> Clock:
        return Clock(now=lambda: self.now, sleep=self._sleep)

    def _sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds


def test_scripted_backend_is_a_backend() -> None:
    assert isinstance(ScriptedBackend([]), Backend)


def test_follow_prints_only_new_log_text_and_returns_the_end_state() -> None:
    backend = ScriptedBackend([
        (JobStatus.PENDING, ""),
        (JobStatus.RUNNING, "a\n"),
        (JobStatus.RUNNING, "a\nb\n"),
        (JobStatus.SUCCEEDED, "a\nb\ndone\n"),
    ])
    fake = FakeClock()
    chunks: list[str] = []
    seen: list[JobStatus] = []
    info = follow(backend, "job-1", timeout_s=60, on_log=chunks.append,
                  on_status=lambda i: seen.append(i.status), clock=fake.clock())
    assert info.status == JobStatus.SUCCEEDED
    assert chunks == ["a\n", "b\n", "done\n"]
    assert seen == [JobStatus.PENDING, JobStatus.RUNNING, JobStatus.SUCCEEDED]
    assert fake.sleeps == [2.0, 2.0, 2.0]


def test_follow_is_bounded_by_the_timeout() -> None:
    backend = ScriptedBackend([(JobStatus.RUNNING, "working\n")])
    fake = FakeClock()
    with pytest.raises(WaitTimeoutError) as caught:
        follow(backend, "job-7", timeout_s=5, on_log=lambda _: None, clock=fake.clock())
    assert caught.value.exit_code == 6
    assert caught.value.message == "Job job-7 is still RUNNING after 5 s; it keeps running."
    assert "toolkit logs job-7 --follow" in caught.value.hint
    assert fake.sleeps == [2.0, 2.0, 1.0]  # never waits past the deadline
    assert fake.now == 105.0


def test_rotated_logs_are_shown_again_from_the_start() -> None:
    backend = ScriptedBackend([
        (JobStatus.RUNNING, "long line one\n"), (JobStatus.SUCCEEDED, "new\n")])
    chunks: list[str] = []
    follow(backend, "j", on_log=chunks.append, clock=FakeClock().clock())
    assert chunks == ["long line one\n", "new\n"]


@pytest.mark.parametrize(("status", "error", "code"), [
    (JobStatus.FAILED, JobFailedError, 4),
    (JobStatus.STOPPED, JobStoppedError, 5),
    (JobStatus.RUNNING, WaitTimeoutError, 6),
])
def test_outcomes_map_to_exit_codes(status: JobStatus, error: type, code: int) -> None:
    info = JobInfo(backend="ray", job_id="j", status=status, message="why", url="http://x")
    with pytest.raises(error) as caught:
        raise_for_outcome(info)
    assert caught.value.exit_code == code


def test_success_raises_nothing() -> None:
    raise_for_outcome(JobInfo(backend="ray", job_id="j", status=JobStatus.SUCCEEDED))
