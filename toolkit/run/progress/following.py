"""Watch a submitted job until it ends: bounded, with an injectable clock.

:func:`follow` polls the backend's status and prints the log text that is new
since the last poll; it returns the final :class:`JobInfo` or raises
``WaitTimeoutError`` (exit 6) once ``timeout_s`` has passed. The job keeps running
after a timeout. :func:`raise_for_outcome` turns the end state into the exit-code
contract: SUCCEEDED 0, FAILED 4, STOPPED 5. :func:`stopped_following` is what a
follower says when the user stops it with Ctrl-C (exit 130): the job keeps running.

Both take ``clock`` and ``sleep``, so tests drive time by hand and never sleep.
"""

from __future__ import annotations

import contextlib
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from toolkit.run.progress.job_state import JobInfo, JobStatus, WatchedJobs
from toolkit.errors import JobFailedError, JobStoppedError, WaitTimeoutError

#: Default bound for --follow / logs --follow: long batch jobs run for hours.
DEFAULT_TIMEOUT_S = 24 * 3600.0


@dataclass(frozen=True)
class Clock:
    """Where waiting code reads the time and sleeps. Tests pass a fake one."""

    now: Callable[[], float] = time.monotonic
    sleep: Callable[[float], None] = time.sleep


REAL_CLOCK = Clock()


@contextlib.contextmanager
def ctrl_c_noticed(clock: Clock = REAL_CLOCK) -> Iterator[Clock]:
    """``clock``, whose ``sleep`` raises ``KeyboardInterrupt`` once Ctrl-C was pressed.

    Ctrl-C raises ``KeyboardInterrupt`` wherever the main thread is, and when that
    is a finalizer (a ``__del__`` run by the garbage collector while a poll reads
    files or closes a connection), Python prints it as ``Exception ignored in ...``
    and goes on: the follow kept following to the job's end. While the block runs,
    SIGINT is also remembered, so the next sleep between polls raises it again, and
    the ignored one is not printed.
    Outside the main thread (no signal handler can be set there), or where SIGINT is
    ignored, ``clock`` is yielded as it is.
    """
    pressed = threading.Event()

    def on_sigint(signum: int, frame: object) -> None:
        pressed.set()
        raise KeyboardInterrupt

    def sleep(seconds: float) -> None:
        if not pressed.is_set():
            clock.sleep(seconds)
        if pressed.is_set():
            raise KeyboardInterrupt

    # SIGINT ignored (a background job of a script) stays ignored.
    if threading.current_thread() is not threading.main_thread() \
            or signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        yield clock
        return
    previous_hook = sys.unraisablehook

    def unraisable(info: sys.UnraisableHookArgs) -> None:
        # The KeyboardInterrupt on_sigint raised inside a finalizer: Python would
        # print it as a traceback; the next sleep raises it where it is caught.
        if not (pressed.is_set() and isinstance(info.exc_value, KeyboardInterrupt)):
            previous_hook(info)

    previous = signal.signal(signal.SIGINT, on_sigint)
    sys.unraisablehook = unraisable
    try:
        yield Clock(now=clock.now, sleep=sleep)
    finally:
        signal.signal(signal.SIGINT, previous)
        sys.unraisablehook = previous_hook


def follow(
    backend: WatchedJobs,
    job_id: str,
    *,
    timeout_s: float = DEFAULT_TIMEOUT_S,
    on_log: Callable[[str], None] | None = None,
    on_status: Callable[[JobInfo], None] | None = None,
    on_poll: Callable[[JobInfo], None] | None = None,
    poll_interval_s: float | None = None,
    clock: Clock = REAL_CLOCK,
) -> JobInfo:
    """Wait for ``job_id`` to end, passing each new chunk of its log to ``on_log``.

    Args:
        timeout_s: Give up after this many seconds (the job keeps running).
        on_log: Called with log text not shown before; ``None`` skips fetching logs.
        on_status: Called whenever the status changes (including the first poll).
        on_poll: Called after every poll while the job has not ended (progress and
            stall checks, see :mod:`toolkit.run.progress.watched_job`); what it raises
            ends the wait.
        poll_interval_s: Seconds between polls (default: the backend's).
        clock: Time source and sleep.

    Returns:
        The job's final info (SUCCEEDED, FAILED or STOPPED).

    Raises:
        WaitTimeoutError: still not ended after ``timeout_s``.
        BackendUnavailableError / JobNotFoundError: from the backend.
    """
    interval = backend.poll_interval_s if poll_interval_s is None else poll_interval_s
    deadline = clock.now() + timeout_s
    shown = 0
    last_status: JobStatus | None = None
    while True:
        info = backend.status(job_id)
        if info.status != last_status:
            last_status = info.status
            if on_status is not None:
                on_status(info)
        if on_log is not None:
            # Status first, logs second: once terminal, these logs are complete.
            text = backend.logs(job_id)
            if len(text) < shown:  # the service truncated or rotated them
                shown = 0
            if len(text) > shown:
                on_log(text[shown:])
                shown = len(text)
        if info.status.is_terminal():
            return info
        if on_poll is not None:
            on_poll(info)
        remaining = deadline - clock.now()
        if remaining <= 0:
            raise WaitTimeoutError(
                f"Job {job_id} is still {info.status} after {timeout_s:g} s; it keeps running.",
                hint=f"Watch it again with `toolkit logs {job_id} --follow`, or stop it with "
                f"`toolkit stop {job_id}` (add the same --backend/--address).",
            )
        clock.sleep(min(interval, remaining))


def raise_for_outcome(info: JobInfo) -> None:
    """Return for SUCCEEDED; raise ``JobFailedError`` (4) or ``JobStoppedError`` (5).

    Raises:
        JobFailedError: FAILED, with the backend's message.
        JobStoppedError: STOPPED.
        WaitTimeoutError: not terminal yet (a caller bug; exit 6).
    """
    if info.status == JobStatus.SUCCEEDED:
        return
    detail = f": {info.message}" if info.message else "."
    if info.status == JobStatus.FAILED:
        raise JobFailedError(
            f"Job {info.job_id} FAILED{detail}",
            hint=f"See why with `toolkit logs {info.job_id}`"
            + (f" or {info.url}" if info.url else "")
            + ".",
        )
    if info.status == JobStatus.STOPPED:
        raise JobStoppedError(f"Job {info.job_id} was STOPPED{detail}")
    raise WaitTimeoutError(f"Job {info.job_id} has not ended yet (status {info.status}).")


def stopped_following(job_id: str, flags: str = "") -> str:
    """What a follower prints when Ctrl-C stops it: the job keeps running, and the two
    commands that watch it again and stop it (``flags``: the same ``--address`` or
    ``--backend`` the user gave, with a leading space)."""
    return (f"Stopped following: job {job_id} keeps running on the cluster.\n"
            f"Watch it again: toolkit logs {job_id} --follow{flags}\n"
            f"Stop it: toolkit stop {job_id}{flags}")


def stopped_submitting(flags: str = "") -> str:
    """What ``toolkit submit`` prints when Ctrl-C stops it before it follows the job:
    there is no job id to name, and the job may or may not have been submitted."""
    return ("Stopped: toolkit submit was interrupted. If the job was submitted (its id "
            "is printed above), it keeps running on the cluster.\n"
            f"List the jobs: toolkit list{flags}\n"
            f"Stop one: toolkit stop JOB_ID{flags}")
