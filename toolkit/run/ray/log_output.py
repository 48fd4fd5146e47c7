"""Where Ray's own output goes during ``toolkit run``: a log file, not the terminal.

Ray talks a lot on the driver's terminal: its Python loggers (``ray``, ``ray.data``),
Ray Data's progress bars, the workers' output it forwards (``log_to_driver``) and
lines the C++ core worker writes straight to file descriptor 2. With ``log_file``,
:func:`output_to` sends all of it to that file by pointing this process's fds 1 and 2
there for the run (the only way that catches the C++ lines too), and the caller
shows its own progress on a stream made by :func:`terminal` beforehand.
"""

from __future__ import annotations

import contextlib
import os
import sys
import tempfile
import time
from collections.abc import Iterator
from typing import TextIO

from toolkit.spec.models import JobSpec


def default_log_file(spec: JobSpec) -> str:
    """Where ``toolkit run`` puts Ray's output: ``<output>/_logs/run.log``; for an
    output on object storage (``s3://``), a file under this machine's temp dir."""
    from toolkit.run.output.run_directory import RunDirectory

    if "://" not in spec.data.output:
        path = RunDirectory(spec.data.output).log_file
        if path:
            return path
    stamp = time.strftime("%Y%m%d-%H%M%S")
    return os.path.join(tempfile.gettempdir(), "toolkit-logs", f"{spec.job}-{stamp}.log")


@contextlib.contextmanager
def terminal(stream: TextIO | None = None) -> Iterator[TextIO]:
    """A stream to where ``stream`` (default: stderr) goes now, which stays there
    while :func:`run_job` points fds 1 and 2 at its log file.

    A stream without a file descriptor (click's CliRunner, pytest's capsys) is
    yielded as it is: it doesn't write to fd 2, so the redirection misses it anyway.
    """
    stream = stream or sys.stderr
    try:
        fd = stream.fileno()
    except (AttributeError, OSError, ValueError):
        yield stream
        return
    stream.flush()
    own = os.fdopen(os.dup(fd), "w", buffering=1, encoding=stream.encoding or "utf-8",
                    errors="replace")
    try:
        yield own
    finally:
        own.close()


@contextlib.contextmanager
def output_to(log_file: str | None, job_name: str) -> Iterator[None]:
    """Point this process's fds 1 and 2 at ``log_file`` (appended) inside the block.

    File descriptors, not just ``sys.stdout``/``sys.stderr``: Ray's C++ core worker
    writes its lines (``[... E ...] core_worker.cc: ...``) to fd 2 itself. Ray's Python
    loggers, Ray Data's, warnings and the worker output Ray forwards
    (``log_to_driver``) all write to ``sys.stderr``/``sys.stdout``, which are fds 1
    and 2 underneath, so they follow.
    """
    if log_file is None:
        yield
        return
    os.makedirs(os.path.dirname(os.path.abspath(log_file)), exist_ok=True)
    log_fd = os.open(log_file, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    os.write(log_fd, f"==== toolkit run {job_name}, {time.strftime('%Y-%m-%d %H:%M:%S %Z')} "
                     f"(pid {os.getpid()}) ====\n".encode())
    _flush_std()
    saved = (os.dup(1), os.dup(2))
    # Ray colours the "(MapWorker pid=...)" prefix of forwarded worker lines unless
    # RAY_COLOR_PREFIX=0 (read as it prints, ray/_private/worker.py print_worker_logs).
    color = os.environ.get("RAY_COLOR_PREFIX")
    os.environ["RAY_COLOR_PREFIX"] = "0"
    try:
        os.dup2(log_fd, 1)
        os.dup2(log_fd, 2)
        yield
    finally:
        _flush_std()
        os.dup2(saved[0], 1)
        os.dup2(saved[1], 2)
        for fd in (*saved, log_fd):
            os.close(fd)
        if color is None:
            os.environ.pop("RAY_COLOR_PREFIX", None)
        else:
            os.environ["RAY_COLOR_PREFIX"] = color


def _flush_std() -> None:
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (AttributeError, OSError, ValueError):
            pass


@contextlib.contextmanager
def ray_data_quiet(quiet: bool) -> Iterator[None]:
    """Switch off Ray Data's progress bars for the run (they would fill the log file
    with redrawn lines). Set before the pipeline is built: a Dataset copies Ray
    Data's context when it is created. Ray Data's own log lines (execution plans,
    ``ray.data`` logger) still go to the log file, through fd 2."""
    if not quiet:
        yield
        return
    from ray.data import DataContext

    context = DataContext.get_current()
    previous = context.enable_progress_bars
    context.enable_progress_bars = False
    try:
        yield
    finally:
        context.enable_progress_bars = previous
