"""The toolkit's error family: each category has its own exit code and a hint.

Other tools script against our exit codes, so they are a contract:

==== =====================================================
code meaning
==== =====================================================
0    success (for watched jobs: the job SUCCEEDED)
1    unexpected error
2    invalid spec, flag or input data, or an output folder another run is writing
     (nothing was started; or, for a run paused until another took its folder over,
     nothing more was written)
3    backend or cluster unreachable, not logged in, or it can never hold the run
4    the job FAILED (a watched job that exited 8, 9, 10 or 11 on the cluster shows as 4)
5    the job was STOPPED
6    a bounded wait timed out (``--follow --timeout``, ``stop --wait --timeout``)
7    a followed job wrote no row for ``--stall-timeout`` (``--fail-on-stall``)
8    the stop-loss: too many of a run's rows failed (what it wrote stays)
9    a model engine could not start (a setting, the model or the machine; what the
     run wrote stays)
10   a model engine died more often than Ray may restart it (what the run wrote stays)
11   the output folder can't be written (a full disk or quota, a read-only mount, a
     permission lost): what the run wrote whole stays, and the same command resumes
130  stopped by Ctrl-C or SIGTERM (a local run keeps what it wrote; a watched job
     keeps running)
==== =====================================================

Tracebacks are shown only with ``TOOLKIT_DEBUG=1``. Messages never show a credential
in a URL (:func:`toolkit.redaction.redact`).

These are plain exceptions, so the library works without click: only the CLI
(:mod:`toolkit.cli.click_errors`) turns them into click's, with the same exit codes.
"""

from __future__ import annotations

import os
from collections.abc import Iterator

from toolkit.redaction import redact


def debug_enabled() -> bool:
    return os.environ.get("TOOLKIT_DEBUG", "") not in ("", "0", "false", "no")


class ToolkitError(Exception):
    """Base class: a message saying what went wrong and a hint saying what to do.

    ``str(error)`` is the message; :meth:`format_message` adds the hint, as the CLI
    shows it after ``Error:``.
    """

    exit_code = 1

    def __init__(self, message: str, hint: str | None = None) -> None:
        # Redacted here, so str(error), logs and the CLI never show a URL's credentials.
        self.message = redact(message)
        self.hint = redact(hint)
        super().__init__(self.message)

    def __str__(self) -> str:
        return self.message

    def format_message(self) -> str:
        """The message, then ``Hint: ...`` on its own line when there is a hint."""
        if self.hint:
            return f"{self.message}\nHint: {self.hint}"
        return self.message


class SpecError(ToolkitError):
    """The spec, a flag or a template is invalid. Nothing was started."""

    exit_code = 2


class OutputInUseError(SpecError):
    """Another live run (or retry) is writing the output folder. Nothing was started."""


class WriterFencedError(OutputInUseError):
    """A run that was paused past its lock's takeover (a machine asleep, a stopped
    process) woke to find another run writing its folder: it stopped before writing
    anything more (see :mod:`toolkit.run.output.fence`). Same exit code: the folder is
    another run's, and the same command later resumes.

    Raised on a Ray worker and re-raised by the driver, so it pickles with its hint.
    """

    def __reduce__(self) -> tuple[type, tuple[str, str | None]]:
        return type(self), (self.message, self.hint)


class InputDataError(ToolkitError):
    """The input data is missing, unreadable or lacks a column the job needs."""

    exit_code = 2


class InputChangedError(InputDataError):
    """The input changed since the run in the output folder wrote its rows, and the
    rerun wasn't told whether to keep or redo them (``--input-changed``). Nothing was run."""


class BackendUnavailableError(ToolkitError):
    """The cluster or service can't be reached, or credentials are missing."""

    exit_code = 3


class ResourcesUnavailableError(BackendUnavailableError):
    """The cluster can never give a model stage what it asks for (a GPU type no node
    has, a pool larger than the cluster): the run would wait at 0 rows forever."""


class JobFailedError(ToolkitError):
    exit_code = 4


class JobStoppedError(ToolkitError):
    exit_code = 5


class RunInterruptedError(ToolkitError):
    """A local run stopped by Ctrl-C or SIGTERM: the rows it wrote stay, and the same
    command resumes it (128 + SIGINT, as shells count it)."""

    exit_code = 130


class WaitTimeoutError(ToolkitError):
    exit_code = 6


class JobStalledError(ToolkitError):
    """A followed job wrote no row for ``--stall-timeout`` (with ``--fail-on-stall``).

    The job itself keeps running: Ray Data LLM can hang instead of failing (for
    example on a CUDA out-of-memory error, ray#59986), so only the watcher stops.
    """

    exit_code = 7


class StopLossError(ToolkitError):
    """Too many of a run's rows failed (errors or checks): seen early, the run stops;
    seen only when it ended, it fails all the same.

    Everything it wrote stays; ``toolkit retry OUTPUT`` redoes the failed rows and the
    ones it never reached.
    """

    exit_code = 8


class EngineStartError(ToolkitError):
    """A model engine failed to start (a KV cache too small for one request, a model
    it can't load): every worker would fail the same way, so the run stops at the first
    failed start rather than restarting it for minutes. The message carries the
    engine's own reason; what the run wrote stays, and the same command resumes.

    Raised on a Ray worker and re-raised by the driver, so it pickles with its hint.
    """

    exit_code = 9

    def __reduce__(self) -> tuple[type, tuple[str, str | None]]:
        return type(self), (self.message, self.hint)


class EngineDiedError(ToolkitError):
    """A model engine worker died mid-run more often than Ray was allowed to restart
    it (``engine.max_restarts``): something kills it that a restart won't fix. What the
    run wrote stays, and the same command resumes."""

    exit_code = 10


class OutputWriteError(ToolkitError):
    """The output folder can't be written: its disk is full (ENOSPC), a quota is used
    up (EDQUOT), it became read-only (EROFS) or the permission to write was lost
    (EACCES, EPERM), on the driver or on a Ray worker. The run stopped at the first
    failed write; what it wrote whole stays, nothing half-written is kept, and the same
    command resumes once the folder can be written again
    (:mod:`toolkit.run.output.write_failure`).

    Pickles with its hint, like the errors raised on a Ray worker.
    """

    exit_code = 11

    def __reduce__(self) -> tuple[type, tuple[str, str | None]]:
        return type(self), (self.message, self.hint)


def toolkit_cause(exc: BaseException) -> ToolkitError | None:
    """The toolkit's own error that ``exc`` is or wraps, as it was raised (Ray and Ray
    Data wrap an error raised on a worker, and keep the original, hint and all, as
    ``cause``; Ray's wrapper may also pass for its class, without its fields)."""
    return next((seen for seen in error_chain(exc)
                 if isinstance(seen, ToolkitError) and "hint" in vars(seen)), None)


def error_chain(exc: BaseException) -> Iterator[BaseException]:
    """``exc``, then what it wraps, outermost first: Ray keeps a worker's error as
    ``cause``, Python as ``__cause__``. Each error once (a chain may loop)."""
    seen: BaseException | None = exc
    visited: set[int] = set()
    while seen is not None and id(seen) not in visited:
        visited.add(id(seen))
        yield seen
        seen = getattr(seen, "cause", None) or seen.__cause__
