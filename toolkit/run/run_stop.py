"""Stopping a running pipeline from a watcher thread or a signal, as Ctrl-C would.

Ray Data runs the pipeline in the main thread; a watcher that decides the run must
end (resources that never come, most rows failing) interrupts it with
``KeyboardInterrupt``, Ray Data stops its execution and keeps what it wrote, and the
caller raises the watcher's error instead of the interrupt. SIGTERM (a scheduler, a
container stop) is taken the same way as Ctrl-C while a run goes.
"""

from __future__ import annotations

import _thread
import contextlib
import signal
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from toolkit.errors import ToolkitError
from toolkit.run.progress.model import polling


@dataclass
class StopOutcome:
    """Set by :func:`stopping_when` when a watcher stopped the run."""

    stopped_with: ToolkitError | None = None


@contextlib.contextmanager
def stopping_when(judge: Callable[[], ToolkitError | None], outcome: StopOutcome, *,
                  interval_s: float, join_timeout_s: float = 15.0) -> Iterator[None]:
    """Call ``judge`` every ``interval_s`` (in a background thread) while the block
    runs; the first error it returns stops the run.

    The main thread is interrupted and ``outcome.stopped_with`` set; the interrupt may
    arrive just after the block, so the caller catches ``KeyboardInterrupt`` around
    the ``with`` and raises ``outcome.stopped_with`` when set. Outside the main thread
    nothing is interrupted.
    """
    lock = threading.Lock()
    done = False
    can_interrupt = threading.current_thread() is threading.main_thread()

    def look() -> None:
        error = judge()
        if error is not None and can_interrupt:
            with lock:
                if not done and outcome.stopped_with is None:
                    outcome.stopped_with = error
                    _thread.interrupt_main()

    stop = polling(look, interval_s, join_timeout_s=join_timeout_s)
    try:
        yield
    finally:
        with lock:
            done = True
        stop()


@contextlib.contextmanager
def sigterm_as_ctrl_c() -> Iterator[None]:
    """Inside the block, SIGTERM interrupts the main thread as Ctrl-C does (Python's
    default would end the process at once, before the run could say what it kept).
    Outside the main thread nothing changes."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def interrupt(signum: int, frame: object) -> None:
        raise KeyboardInterrupt

    before = signal.signal(signal.SIGTERM, interrupt)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, before)
