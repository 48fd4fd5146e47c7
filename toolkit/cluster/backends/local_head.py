"""A Ray head node on this machine for ``--address local``: started once, then reused.

:func:`ensure_local_head` starts ``ray start --head --block`` on free ports with its
own ``--temp-dir`` and remembers it in ``$TOOLKIT_CACHE_DIR/local-head.json``
(default ``~/.cache/batch-llm-toolkit``); later calls find it there and reuse it.
The head runs detached from the terminal, so it outlives the command that started
it; :func:`stop_local_head` (``toolkit stop --local-head``) ends it.

Stopping is precise: ``ray start --block`` kills every Ray process it started when
it gets SIGTERM, and any process still naming our own temp dir afterwards is
killed by pid. ``ray stop`` is never used, since it would stop every Ray on the
machine.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path

from pydantic import BaseModel, ConfigDict

from toolkit.errors import BackendUnavailableError
from toolkit.run.ray.connection import local_logical_cpus

STATE_FILE_NAME = "local-head.json"
START_TIMEOUT_S = 90.0
#: How long a busy head's dashboard may take to answer before we give up on it.
REUSE_TIMEOUT_S = 15.0
STOP_TIMEOUT_S = 30.0


class LocalHead(BaseModel):
    """A running head node this toolkit started."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    pid: int
    dashboard_url: str
    gcs_address: str
    temp_dir: str
    log_file: str


def cache_dir(environ: Mapping[str, str] | None = None) -> Path:
    """``$TOOLKIT_CACHE_DIR``, else ``~/.cache/batch-llm-toolkit``."""
    environ = os.environ if environ is None else environ
    configured = environ.get("TOOLKIT_CACHE_DIR")
    if configured:
        return Path(configured).expanduser()
    return Path.home() / ".cache" / "batch-llm-toolkit"


def state_path(environ: Mapping[str, str] | None = None) -> Path:
    return cache_dir(environ) / STATE_FILE_NAME


def free_port() -> int:
    """A TCP port free on 127.0.0.1 right now."""
    return free_ports(1)[0]


def free_ports(count: int) -> list[int]:
    """``count`` different TCP ports free on 127.0.0.1 right now (held together while
    they are drawn, so none comes twice)."""
    with contextlib.ExitStack() as held:
        ports = []
        for _ in range(count):
            sock = held.enter_context(socket.socket(socket.AF_INET, socket.SOCK_STREAM))
            sock.bind(("127.0.0.1", 0))
            ports.append(int(sock.getsockname()[1]))
        return ports


def ray_executable() -> str:
    """The ``ray`` CLI of this Python environment (so the head shares its packages)."""
    beside = Path(sys.executable).parent / "ray"
    if beside.exists():
        return str(beside)
    found = shutil.which("ray")
    if found is None:
        raise BackendUnavailableError(
            "The `ray` command is not installed in this environment.",
            hint="pip install 'ray[default]' (the toolkit's own dependency).",
        )
    return found


def head_command(
    temp_dir: Path, gcs_port: int, dashboard_port: int, num_cpus: int | None,
    extra_args: Sequence[str] = (),
) -> list[str]:
    """``ray start --head --block`` on the given ports, with every other fixed port free,
    and ``extra_args`` (e.g. ``--num-gpus=1``, ``--resources=...``)."""
    # Drawn apart from the two given ports, which were free (and let go) a moment ago:
    # drawn alone, one of them can come again and Ray refuses the pair.
    client, agent_http, agent_grpc, metrics, runtime_env = [
        port for port in free_ports(7) if port not in (gcs_port, dashboard_port)][:5]
    command = [
        ray_executable(),
        "start",
        "--head",
        "--block",
        "--node-ip-address=127.0.0.1",
        f"--port={gcs_port}",
        "--include-dashboard=true",
        "--dashboard-host=127.0.0.1",
        f"--dashboard-port={dashboard_port}",
        f"--ray-client-server-port={client}",
        # Ray's agents on fixed (52365) or lazily drawn ports clash with another Ray on
        # this machine, and `ray start --block` then ends the whole head.
        f"--dashboard-agent-listen-port={agent_http}",
        f"--dashboard-agent-grpc-port={agent_grpc}",
        f"--metrics-export-port={metrics}",
        f"--runtime-env-agent-port={runtime_env}",
        f"--temp-dir={temp_dir}",
        "--disable-usage-stats",
    ]
    if num_cpus is not None:
        command.append(f"--num-cpus={num_cpus}")
    return [*command, *extra_args]


def dashboard_responds(url: str, timeout_s: float = 2.0) -> bool:
    """Whether a Ray dashboard answers at ``url`` (401/403 count: token auth is on)."""
    try:
        with urllib.request.urlopen(f"{url}/api/version", timeout=timeout_s) as response:
            return bool(response.status == 200)
    except urllib.error.HTTPError as exc:
        return exc.code in (401, 403)
    except (OSError, ValueError):
        return False


def _short_temp_root() -> str:
    # Ray puts Unix sockets under the temp dir; their paths must stay under ~107 bytes.
    return "/tmp" if os.path.isdir("/tmp") else tempfile.gettempdir()


def _tail(path: Path, lines: int = 15) -> str:
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return ""
    return "\n".join(text.strip().splitlines()[-lines:])


def start_head(
    temp_dir: Path | None = None,
    *,
    num_cpus: int | None = None,
    extra_args: Sequence[str] = (),
    timeout_s: float = START_TIMEOUT_S,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> tuple[LocalHead, subprocess.Popen[bytes]]:
    """Start a head node and wait (at most ``timeout_s``) until its dashboard answers.

    Args:
        temp_dir: Ray's ``--temp-dir`` (keep it short); a new one under /tmp if unset.
        num_cpus: CPUs the head offers to tasks; unset, as many as a local
            ``toolkit run`` gets (``local_logical_cpus``: at least 4).
        extra_args: More ``ray start`` flags (GPUs or custom resources it declares).

    Returns:
        The head, and the ``ray start --block`` process (terminating it stops the head).

    Raises:
        BackendUnavailableError: it exited or did not answer in time; the message
            ends with the last lines of its log.
    """
    temp_dir = Path(temp_dir or tempfile.mkdtemp(prefix="tkray-", dir=_short_temp_root()))
    temp_dir.mkdir(parents=True, exist_ok=True)
    gcs_port, dashboard_port = free_ports(2)
    log_file = temp_dir / "ray-start.log"
    env = dict(os.environ)
    # The job entrypoint runs `python`: make it this environment's Python.
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
    # On SIGTERM, tear down at once instead of draining for Ray Serve (up to 30 s).
    env.setdefault("RAY_GRACEFUL_SHUTDOWN_DRAIN_TIMEOUT_S", "0")
    with open(log_file, "wb") as log:
        process = subprocess.Popen(
            head_command(temp_dir, gcs_port, dashboard_port,
                         num_cpus if num_cpus is not None else local_logical_cpus(), extra_args),
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            env=env,
            start_new_session=True,
        )
    head = LocalHead(
        pid=process.pid,
        dashboard_url=f"http://127.0.0.1:{dashboard_port}",
        gcs_address=f"127.0.0.1:{gcs_port}",
        temp_dir=str(temp_dir),
        log_file=str(log_file),
    )
    deadline = clock() + timeout_s
    while not dashboard_responds(head.dashboard_url, timeout_s=1.0):
        if process.poll() is not None:
            raise BackendUnavailableError(
                f"`ray start --head` exited with code {process.returncode}.\n"
                f"{_tail(log_file)}",
                hint=f"Its full log is {log_file}.",
            )
        if clock() >= deadline:
            stop_head(head, process=process)
            raise BackendUnavailableError(
                f"The local Ray head did not answer within {timeout_s:.0f} s.\n{_tail(log_file)}",
                hint=f"Its full log is {log_file}.",
            )
        sleep(0.5)
    return head, process


def _pid_alive(pid: int) -> bool:
    try:
        reaped, _ = os.waitpid(pid, os.WNOHANG)
        if reaped == pid:
            return False
    except ChildProcessError:
        pass  # not our child: ask the kernel
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as stat:
            if stat.read().rsplit(")", 1)[-1].split()[0] == "Z":
                return False
    except OSError:
        pass
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _cmdline(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as handle:
            return handle.read().replace(b"\0", b" ").decode("utf-8", "replace")
    except OSError:
        return ""


def pids_using(temp_dir: str) -> list[int]:
    """Processes whose command line names ``temp_dir``: the Ray processes of one head."""
    if not os.path.isdir("/proc"):
        return []
    me = os.getpid()
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit() and int(entry) != me and temp_dir in _cmdline(int(entry)):
            found.append(int(entry))
    return found


def _is_head_process(head: LocalHead) -> bool:
    """The recorded pid is alive and is that head's `ray start` (not a reused pid)."""
    return _pid_alive(head.pid) and head.temp_dir in _cmdline(head.pid)


def head_is_running(head: LocalHead) -> bool:
    """The recorded process is alive, is that head, and its dashboard answers."""
    return _is_head_process(head) and dashboard_responds(head.dashboard_url)


def stop_head(
    head: LocalHead,
    *,
    process: subprocess.Popen[bytes] | None = None,
    timeout_s: float = STOP_TIMEOUT_S,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> None:
    """Stop one head: SIGTERM to its ``ray start --block``, then kill stragglers by pid.

    Only processes naming ``head.temp_dir`` are touched, never other Ray instances.
    """
    if _pid_alive(head.pid) and head.temp_dir in _cmdline(head.pid):
        with contextlib.suppress(ProcessLookupError):
            os.kill(head.pid, signal.SIGTERM)
    deadline = clock() + timeout_s
    while _pid_alive(head.pid) and clock() < deadline:
        sleep(0.2)
    if process is not None and process.poll() is None:
        process.kill()
        process.wait(timeout=10)
    for pid in pids_using(head.temp_dir):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


def read_state(path: Path) -> LocalHead | None:
    try:
        return LocalHead.model_validate_json(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def write_state(head: LocalHead, path: Path) -> None:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_suffix(".tmp")
    partial.write_text(head.model_dump_json(indent=2), encoding="utf-8")
    partial.replace(path)


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    """One toolkit process at a time decides whether to start the local head."""
    import fcntl

    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path.with_suffix(".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def _forget(head: LocalHead) -> None:
    """Clean up after a recorded head that is gone (the machine rebooted, or it crashed)."""
    if Path(head.temp_dir).name.startswith("tkray-") and not pids_using(head.temp_dir):
        shutil.rmtree(head.temp_dir, ignore_errors=True)


def ensure_local_head(
    *,
    path: Path | None = None,
    on_event: Callable[[str], None] | None = None,
    num_cpus: int | None = None,
    timeout_s: float = START_TIMEOUT_S,
) -> LocalHead:
    """The running local head from the state file, or a new one (recorded there).

    Raises:
        BackendUnavailableError: a new head did not start.
    """
    path = state_path() if path is None else Path(path)
    with _locked(path):
        head = read_state(path)
        if head is not None and _is_head_process(head):
            if dashboard_responds(head.dashboard_url, timeout_s=REUSE_TIMEOUT_S):
                return head
            raise BackendUnavailableError(
                f"The local Ray head (pid {head.pid}) is running but its dashboard "
                f"{head.dashboard_url} does not answer.",
                hint=f"It may be overloaded; try again, or restart it with "
                f"`toolkit stop --local-head`. Its log: {head.log_file}",
            )
        if head is not None:
            _forget(head)
        head, _process = start_head(num_cpus=num_cpus, timeout_s=timeout_s)
        write_state(head, path)
    if on_event is not None:
        on_event(
            f"Started a local Ray head (dashboard {head.dashboard_url}, log {head.log_file}); "
            "later --address local commands reuse it. Stop it with: toolkit stop --local-head"
        )
    return head


def stop_local_head(path: Path | None = None) -> LocalHead | None:
    """Stop the head recorded in the state file; ``None`` if none was running."""
    path = state_path() if path is None else Path(path)
    with _locked(path):
        head = read_state(path)
        if head is None:
            return None
        running = _is_head_process(head)
        if running:
            stop_head(head)
        path.unlink(missing_ok=True)
        if running:
            shutil.rmtree(head.temp_dir, ignore_errors=True)
    return head if running else None
