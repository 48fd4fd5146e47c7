"""A command run as on a user's terminal: a pseudo-terminal (160 columns) as its stdin,
stdout and stderr, everything it printed read back (the standard library's pty, no
pexpect)."""

from __future__ import annotations

import fcntl
import os
import re
import select
import struct
import subprocess
import termios
import time
from collections.abc import Mapping
from pathlib import Path

#: Colours and cursor moves, which a terminal draws and a test reads past.
ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")


def run_on_terminal(argv: list[str], cwd: Path, env: Mapping[str, str],
                    timeout_s: float = 600) -> tuple[str, int]:
    """Everything ``argv`` printed (ANSI codes and all) and its exit code; past
    ``timeout_s`` its whole process group is killed."""
    leader, follower = os.openpty()
    fcntl.ioctl(follower, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 160, 0, 0))
    process = subprocess.Popen(argv, stdin=follower, stdout=follower, stderr=follower,
                               cwd=cwd, env=dict(env), start_new_session=True)
    os.close(follower)
    printed = bytearray()
    deadline = time.monotonic() + timeout_s
    try:
        while time.monotonic() < deadline:
            exited = process.poll() is not None
            # Once it exited, what it printed is already buffered: drain, then stop.
            ready, _, _ = select.select([leader], [], [], 0.2 if exited else 1.0)
            if not ready:
                if exited:
                    break
                continue
            try:
                chunk = os.read(leader, 65536)
            except OSError:  # EIO: every writer closed the terminal
                break
            if not chunk:
                break
            printed += chunk
        code = process.wait(timeout=max(1.0, deadline - time.monotonic()))
    finally:
        if process.poll() is None:
            os.killpg(process.pid, 9)
        os.close(leader)
    return printed.decode("utf-8", errors="replace"), code
