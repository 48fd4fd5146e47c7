"""A vLLM engine that fails to start: vLLM's own reason, and the setting to change.

vLLM starts its engine in a child process (``EngineCore``); when that fails, the Ray
actor around it only gets ``RuntimeError: Engine core initialization failed. See root
cause above.``: the reason is in what the child printed, which lands in the actor's
own output files (Ray points a worker's fds 1 and 2 at ``worker-*.out``/``.err``). So
the actor notes where those files end before it starts the engine and reads what was
added when the start fails (:class:`OutputSince`, :func:`engine_start_reason`).

Light on purpose (no Ray, no vLLM): the driver and tests import it.
"""

from __future__ import annotations

import os
import re
from typing import Any

from toolkit.errors import EngineStartError

#: A line of vLLM's output saying why: ``ValueError: To serve at least one request...``,
#: after the prefixes vLLM and its logger put before it
#: (``(EngineCore pid=7) ERROR 11-26 14:16:50 [core.py:1374] ``).
_PREFIX = re.compile(r"^(?:\(.*? pid=\d+\)\s*)*(?:(?:ERROR|WARNING|INFO|CRITICAL) "
                     r"\S+ \S+ \[[^\]]*\]\s*)?")
_ERROR_LINE = re.compile(r"^(?:[a-z_][\w]*\.)*[A-Z]\w*(?:Error|Exception): \S")
#: Wrappers that only point at the reason: vLLM's of its child's failure, Ray's.
_WRAPPERS = ("Engine core initialization failed", "ray.exceptions.")
#: Words of a reason that is about the KV cache, and of one saying it is larger than
#: the machine's free memory (vLLM's CPU worker: "... less than requested memory for kv").
_KV_CACHE_WORDS = re.compile(r"KV cache|cache blocks|kv_cache|memory for kv", re.IGNORECASE)
_KV_CACHE_TOO_LARGE = re.compile(r"less than requested memory for kv", re.IGNORECASE)
#: vLLM's wrapper naming its engine process ended by a signal: ``{'EngineCore': -9}``.
_KILLED = re.compile(r"Failed core proc\(s\): \{'EngineCore': -(?P<signal>\d+)\}")
#: vLLM's refusal of a checkpoint whose architecture it has no implementation of.
_UNSUPPORTED_ARCHITECTURE = re.compile(
    r"Model architectures? \[(?P<names>[^\]]*)\] (?:are|is) not supported")
#: The longest reason kept: vLLM's run a few hundred characters (one lists every
#: architecture it supports: some 10,000).
MAX_REASON_CHARS = 700


class OutputSince:
    """What this process writes to its fds 1 and 2 from now on, where each is a file
    (a Ray worker's ``worker-*.out`` and ``.err``; a child process shares them)."""

    def __init__(self, fds: tuple[int, ...] = (1, 2)) -> None:
        self.offsets: dict[str, int] = {}
        for fd in fds:
            try:
                path = os.readlink(f"/proc/self/fd/{fd}")
                if os.path.isfile(path):
                    self.offsets.setdefault(path, os.path.getsize(path))
            except OSError:
                continue  # not Linux, or a pipe or terminal: nothing to read back

    def text(self, limit: int = 1 << 20) -> str:
        """What was appended since, up to ``limit`` characters from each file."""
        parts = []
        for path, offset in self.offsets.items():
            try:
                with open(path, encoding="utf-8", errors="replace") as output:
                    output.seek(offset)
                    parts.append(output.read(limit))
            except OSError:
                continue
        return "\n".join(parts)


def _shortened(line: str) -> str:
    line = line.split(" Supported architectures:")[0]  # the 10,000 characters: the docs list them
    return line if len(line) <= MAX_REASON_CHARS else line[:MAX_REASON_CHARS - 3] + "..."


def engine_start_reason(output: str) -> str | None:
    """vLLM's reason in ``output``: the first ``SomeError: message`` line that is not
    vLLM's generic wrapper, without vLLM's prefixes; None when there is none."""
    for raw in output.splitlines():
        line = _PREFIX.sub("", raw.strip()).strip()
        if _ERROR_LINE.match(line) and not any(w in line for w in _WRAPPERS):
            return _shortened(line)
    return None


def exception_reason(exc: BaseException) -> str:
    """``exc`` as one line of reason, for a start that failed in the engine actor itself
    (vLLM checks its arguments there, before any engine process): a pydantic
    ``ValidationError`` is its first error's message, not its header."""
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    if type(exc).__name__ == "ValidationError" and len(lines) > 1:
        lines = lines[1:]  # "1 validation error for ModelConfig" says nothing
    message = (lines[0] if lines else "").removeprefix("Value error, ")
    return _shortened(f"{type(exc).__name__}: {message}" if message else type(exc).__name__)


def engine_start_error(reason: str, engine_kwargs: dict[str, Any]) -> EngineStartError:
    """The run's error for an engine that could not start because of ``reason``, with
    the toolkit setting that changes it."""
    rerun = "Rows already written stay; the same command resumes."
    if unsupported := _UNSUPPORTED_ARCHITECTURE.search(reason):
        hint = (f"vLLM has no implementation of {unsupported['names']} (the architectures in "
                f"the checkpoint's config.json): pick a model of an architecture vLLM supports, "
                f"or run this one with --engine transformers. {rerun}")
    elif _KV_CACHE_WORDS.search(reason):
        size = engine_kwargs.get("kv_cache_memory_bytes")
        now = f" (now {size / 2**30:.4g} GiB)" if isinstance(size, (int, float)) else ""
        length = engine_kwargs.get("max_model_len")
        length_now = f" (now {length})" if length else ""
        if _KV_CACHE_TOO_LARGE.search(reason):
            hint = (f"Lower engine.kv_cache_gib{now} to what the machine's free memory "
                    f"holds. {rerun}")
        else:
            hint = (f"Its KV cache must hold at least one whole request: raise "
                    f"engine.kv_cache_gib{now} or lower engine.engine_kwargs.max_model_len"
                    f"{length_now}. {rerun}")
    elif killed := _KILLED.search(reason):
        hint = (f"vLLM's engine process was killed (signal {killed['signal']}) while it "
                f"started: by the machine's out-of-memory killer, or by hand. Give the "
                f"worker more memory or a smaller engine.kv_cache_gib, then run again. {rerun}")
    elif reason.rstrip().endswith("Failed core proc(s): {}"):
        # vLLM saw its engine process end while starting but not how (it was killed
        # before vLLM watched it): nothing in what it printed to change.
        hint = ("vLLM's engine process ended while it started without saying why: killed "
                "(the machine's out-of-memory killer, or by hand) or crashed. Ray's log "
                f"holds the worker's full output; give the worker more memory, then run "
                f"again. {rerun}")
    else:
        hint = (f"Change what vLLM names (engine.engine_kwargs are vLLM's engine "
                f"arguments, engine.model its model); Ray's log holds the worker's full "
                f"output. {rerun}")
    return EngineStartError(f"The vLLM engine could not start: {reason}", hint=hint)
