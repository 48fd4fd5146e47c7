"""Noticing that the cluster's GCS is gone, before Ray ends the run without a word.

A driver whose GCS (the head's control service) stops answering is ended by Ray's core
worker after ``gcs_rpc_server_reconnect_timeout_s`` (60 s unless ``RAY_...`` says
otherwise): exit code 1, and the only trace a line in the run's log. A user sees the
progress line freeze for a minute and the command end with nothing said. So while a
run goes, :func:`watch_gcs` knocks on the GCS port every few seconds: a silence is
told at once, and just before Ray would end the process the run ends itself, saying
what was lost and how to resume (:func:`toolkit.run.driver.watch_cluster`).

A GCS that comes back in time (a head restarted with GCS fault tolerance) is simply
watched on.
"""

from __future__ import annotations

import os
import socket
import threading
import time
from collections.abc import Callable, Mapping

#: Ray's own default for ``gcs_rpc_server_reconnect_timeout_s``.
RAY_RECONNECT_TIMEOUT_S = 60.0
#: How long before Ray's deadline the run ends itself: time to say why and let go
#: of its folder.
MARGIN_S = 10.0


def reconnect_timeout_s(environ: Mapping[str, str] = os.environ) -> float:
    """How long Ray lets this driver wait for a silent GCS before it ends the process."""
    try:
        value = float(environ.get("RAY_gcs_rpc_server_reconnect_timeout_s", ""))
    except ValueError:
        return RAY_RECONNECT_TIMEOUT_S
    return value if value > 0 else RAY_RECONNECT_TIMEOUT_S


def lost_after_s(environ: Mapping[str, str] = os.environ) -> float:
    """A silence this long means the cluster is lost: ahead of Ray's own deadline."""
    timeout = reconnect_timeout_s(environ)
    return max(timeout - MARGIN_S, timeout / 2)


def gcs_answers(address: str, timeout_s: float = 2.0) -> bool:
    """Whether something accepts a TCP connection at ``address`` (``host:port``)."""
    host, _, port = address.rpartition(":")
    try:
        with socket.create_connection((host.strip("[]"), int(port)), timeout=timeout_s):
            return True
    except (OSError, ValueError):
        return False


def watchable(address: str) -> bool:
    """A ``host:port`` GCS address (not Ray Client's ``ray://``, not ``local``)."""
    host, sep, port = address.rpartition(":")
    return bool(sep and host and port.isdigit()) and "://" not in address


def watch_gcs(
    address: str,
    *,
    on_silent: Callable[[float], None],
    on_lost: Callable[[float], None],
    lost_after: float,
    silent_after: float = 5.0,
    interval_s: float = 2.0,
    probe: Callable[[str], bool] = gcs_answers,
    clock: Callable[[], float] = time.monotonic,
) -> Callable[[], None]:
    """Probe ``address`` every ``interval_s`` in a daemon thread until stopped.

    ``on_silent(seconds)`` is called once a silence has lasted ``silent_after``
    (again after each recovery), ``on_lost(seconds)`` once it has lasted ``lost_after``,
    always after ``on_silent``; the watch then ends. Both run in the watching thread. Returns ``stop()``.
    """
    stopped = threading.Event()

    def loop() -> None:
        silent_since: float | None = None
        told = False
        while not stopped.wait(interval_s):
            if probe(address):
                silent_since, told = None, False
                continue
            now = clock()
            silent_since = now if silent_since is None else silent_since
            silence = now - silent_since
            if stopped.is_set():
                return
            if silence >= silent_after and not told:
                told = True
                on_silent(silence)
            if silence >= lost_after:
                on_lost(silence)
                return

    thread = threading.Thread(target=loop, name="toolkit-gcs-watch", daemon=True)
    thread.start()

    def stop() -> None:
        stopped.set()

    return stop
