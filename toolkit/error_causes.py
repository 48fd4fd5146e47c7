"""Why a run failed, told from the errors Ray hands back: error forensics.

Ray wraps an error raised on a worker several times over, and an engine worker that
died leaves only Ray's own words. :func:`root_cause` finds the innermost message,
:func:`engine_died_error` names a model worker that died past its restarts, and
:func:`run_failed_error` is the one paragraph an unknown failure becomes. Beside the
error family (:mod:`toolkit.errors`), as low: nothing here imports the run or an
engine (the engine-died check is given the stages' restart bounds as plain values),
and Ray only inside :func:`engine_died_error`.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from toolkit.errors import EngineDiedError, JobFailedError, error_chain


def root_cause(exc: BaseException) -> str:
    """The innermost error's message: Ray wraps worker errors several times over.

    Walks the cause chain and, in the text of each, keeps the last line shaped like
    ``SomeError: message``, skipping Ray's generic wrappers.
    """
    candidates: list[str] = []
    for seen in error_chain(exc):
        for line in str(seen).splitlines():
            line = line.strip()
            if _ERROR_LINE.match(line) and not line.startswith(_RAY_WRAPPERS):
                candidates.append(line)
    if candidates:
        line = candidates[-1]
        return line if len(line) <= 400 else line[:397] + "..."
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    return lines[-1] if lines else type(exc).__name__


# A traceback's last line: a built-in error (``ValueError: ...``) or a qualified class
# of any name (``pyarrow.lib.ArrowInvalid: ...``), never prose such as ``Hint: ...``.
_ERROR_LINE = re.compile(r"^([A-Za-z_]\w*(Error|Exception|Exit|Interrupt)"
                         r"|([a-z_]\w*\.)+[A-Z]\w*): ")
_RAY_WRAPPERS = ("ray.exceptions.", "RayTaskError", "RayActorError", "ActorDiedError",
                 "SystemException", "UserCodeException")


def engine_died_error(exc: BaseException, restarts: Sequence[tuple[str, int]],
                      log_file: str | None) -> EngineDiedError | None:
    """Why the run ended, when a model worker whose restarts are bounded died for good.

    Ray Data restarts its other actors without end, so an actor found dead here is
    an engine worker past ``max_restarts`` (vLLM's, whose engine dies with it).

    Args:
        restarts: ``(field, max_restarts)`` of each model stage whose engine bounds
            its restarts (``engine``, ``stages.NAME``); none: nothing here to tell.
        log_file: Ray's log, named in the hint.
    """
    from ray.exceptions import ActorDiedError

    died = next((seen for seen in error_chain(exc) if isinstance(seen, ActorDiedError)), None)
    if died is None or not restarts:
        return None
    named = ", ".join(f"{field}.max_restarts {bound}" for field, bound in restarts)
    # Ray's text goes on with generic advice on the OOM killer and `ray stop`.
    said = root_cause(died).split(" Some common causes", 1)[0]
    return EngineDiedError(
        f"A model engine worker died more often than Ray may restart it ({named}): "
        f"the run stopped. Ray's last word on it: {said}",
        hint="Something kills it that a restart won't fix: the machine running out of "
        "memory (lower engine.batch_size or engine.kv_cache_gib), a failing device, or "
        "nodes taken back (spot instances: raise engine.max_restarts, -1 for without "
        "end). " + (f"Ray's log: {log_file}. " if log_file else "")
        + "Rows already written stay; the same command resumes.",
    )


def run_failed_error(exc: BaseException, job_name: str, log_file: str | None) -> JobFailedError:
    """An error that is none of the toolkit's, as ``toolkit run`` tells it (exit 4)."""
    return JobFailedError(
        f"The {job_name} run failed: {root_cause(exc)}",
        hint="Rerun with TOOLKIT_DEBUG=1 for the full traceback; "
        + (f"Ray's output is in {log_file}." if log_file else
           "the Ray Dashboard shows worker logs."),
    )
