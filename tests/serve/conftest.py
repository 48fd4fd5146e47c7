"""A real `toolkit serve` process on a free port with its own store and API key."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

API_KEY = "test-key-123"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@dataclass
class Server:
    """A `toolkit serve --smoke` process; `client` is the official openai client on it."""

    store: Path
    port: int
    process: subprocess.Popen | None = None

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def client(self, api_key: str = API_KEY):
        from openai import OpenAI

        return OpenAI(base_url=self.base_url, api_key=api_key, max_retries=0, timeout=30)

    def start(self, *flags: str) -> "Server":
        """``toolkit serve --smoke`` with ``flags``; requests may ask for gpt-4o-mini."""
        log = open(self.store.parent / f"{self.store.name}-server.log", "ab")
        self.process = subprocess.Popen(
            [sys.executable, "-m", "toolkit.cli.main", "serve", "--smoke", "--store",
             str(self.store), "--port", str(self.port), "--served-model-name", "gpt-4o-mini",
             *flags],
            stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
            env={**os.environ, "TOOLKIT_API_KEY": API_KEY, "RAY_ADDRESS": ""})
        deadline = time.monotonic() + 60
        client = self.client()
        while True:
            assert self.process.poll() is None, "toolkit serve exited"
            assert time.monotonic() < deadline, "toolkit serve did not come up"
            try:
                client.batches.list(limit=1)
                return self
            except Exception:  # noqa: BLE001 - not listening yet
                time.sleep(0.2)

    def kill(self) -> None:
        """SIGKILL the server alone: its batch runs are left running, as after a crash."""
        assert self.process is not None
        self.process.kill()
        self.process.wait(timeout=10)

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGINT)
            try:
                self.process.wait(timeout=60)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait(timeout=10)


@pytest.fixture
def start_server(tmp_path: Path) -> Iterator[Callable[..., Server]]:
    servers: list[Server] = []

    def start(*flags: str, store: Path | None = None) -> Server:
        server = Server(store=store or tmp_path / "store", port=free_port())
        servers.append(server)
        return server.start(*flags)

    yield start
    for server in servers:
        server.stop()


@pytest.fixture(scope="module")
def server(tmp_path_factory) -> Iterator[Server]:
    """One server for the tests that don't stop it."""
    started = Server(store=tmp_path_factory.mktemp("serve") / "store", port=free_port())
    started.start()
    yield started
    started.stop()


def write_requests(path: Path, count: int, malformed: dict[int, str] | None = None) -> Path:
    """``count`` request lines; every third asks for 1 token, the others for 4.
    ``malformed`` replaces lines (1-based) by the text given."""
    lines = []
    for i in range(1, count + 1):
        if malformed and i in malformed:
            lines.append(malformed[i])
            continue
        lines.append(json.dumps({"custom_id": f"req-{i}", "method": "POST",
                                 "url": "/v1/chat/completions",
                                 "body": {"model": "gpt-4o-mini",
                                          "max_tokens": 1 if i % 3 == 0 else 4,
                                          "messages": [{"role": "user",
                                                        "content": f"What is {i} plus {i}?"}]}}))
    path.write_text("\n".join(lines) + "\n")
    return path


def wait_for(client, batch_id: str, until: Callable, timeout_s: float = 240):
    """Poll the batch until ``until(batch)``; the batch then."""
    deadline = time.monotonic() + timeout_s
    while True:
        batch = client.batches.retrieve(batch_id)
        if until(batch):
            return batch
        assert time.monotonic() < deadline, f"batch stuck at {batch.status}: {batch}"
        time.sleep(0.3)
