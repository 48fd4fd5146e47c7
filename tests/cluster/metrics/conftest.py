"""A real Prometheus scraping the test cluster, as a user's Prometheus scrapes Ray.

``prometheus`` starts Debian's ``prometheus`` on a free port with the scrape
configuration Ray's own ``metrics`` templates write (one job, ``ray``, whose targets
are the service-discovery file Ray writes for its nodes,
``<temp dir>/session_latest/prom_metrics_service_discovery.json``), scraping every
second, and stops exactly the process it started. Ray's processes export every second
in these tests (``RAY_metrics_report_interval_ms``, set before the head starts).
"""

from __future__ import annotations

import contextlib
import http.client
import json
import os
import shutil
import subprocess
import tempfile
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from toolkit.cluster.backends.local_head import LocalHead, free_ports

#: How often Ray's processes hand their metrics to their node's agent, here (ms).
REPORT_INTERVAL_MS = "1000"


@pytest.fixture(scope="module", autouse=True)
def _metrics_reported_every_second() -> Iterator[None]:
    """Before the module's head starts: its processes read it from their environment."""
    name = "RAY_metrics_report_interval_ms"
    before = os.environ.get(name)
    os.environ[name] = REPORT_INTERVAL_MS
    yield
    if before is None:
        os.environ.pop(name, None)
    else:
        os.environ[name] = before


class Prometheus:
    """A running Prometheus, queried over its HTTP API."""

    def __init__(self, url: str) -> None:
        self.url = url

    def query(self, promql: str) -> list[dict[str, Any]]:
        """The instant query's result vector (``/api/v1/query``)."""
        address = f"{self.url}/api/v1/query?" + urllib.parse.urlencode({"query": promql})
        with urllib.request.urlopen(address, timeout=10) as response:
            answer = json.load(response)
        assert answer["status"] == "success", answer
        return answer["data"]["result"]

    def query_range(self, promql: str, start: float, end: float, step_s: float = 1.0
                    ) -> list[dict[str, Any]]:
        """The range query's series (``/api/v1/query_range``), as a Grafana panel asks."""
        address = f"{self.url}/api/v1/query_range?" + urllib.parse.urlencode(
            {"query": promql, "start": start, "end": end, "step": step_s})
        with urllib.request.urlopen(address, timeout=10) as response:
            answer = json.load(response)
        assert answer["status"] == "success", answer
        return answer["data"]["result"]

    def value(self, promql: str) -> float | None:
        """The single value of a query that gives one series; None for none."""
        result = self.query(promql)
        assert len(result) <= 1, result
        return float(result[0]["value"][1]) if result else None

    def wait_for(self, promql: str, expected: float, timeout_s: float = 60.0) -> float | None:
        """The query's value once it equals ``expected`` (what was last seen after
        ``timeout_s``): Prometheus scrapes what Ray exports a second or two later."""
        deadline = time.monotonic() + timeout_s
        while True:
            seen = self.value(promql)
            if seen == expected or time.monotonic() > deadline:
                return seen
            time.sleep(1)


def scrape_config(discovery_file: Path) -> str:
    """Ray's own scrape configuration (its dashboard's metrics templates), every second."""
    return (
        "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n"
        "scrape_configs:\n- job_name: 'ray'\n  file_sd_configs:\n"
        f"  - files:\n    - '{discovery_file}'\n    refresh_interval: 1s\n"
    )


@pytest.fixture(scope="module")
def prometheus(two_nodes: LocalHead) -> Iterator[Prometheus]:
    executable = shutil.which("prometheus")
    if executable is None:
        pytest.skip("prometheus is not installed (.ci/run installs Debian's)")
    folder = Path(tempfile.mkdtemp(prefix="tkprom-", dir="/tmp"))
    discovery = Path(two_nodes.temp_dir) / "session_latest" / "prom_metrics_service_discovery.json"
    (folder / "prometheus.yml").write_text(scrape_config(discovery))
    process, url = _started(executable, folder)
    try:
        yield Prometheus(url)
    finally:
        process.terminate()
        with contextlib.suppress(subprocess.TimeoutExpired):
            process.wait(timeout=30)
        if process.poll() is None:
            process.kill()
            process.wait(timeout=30)
        shutil.rmtree(folder, ignore_errors=True)


def _started(executable: str, folder: Path) -> tuple[subprocess.Popen[bytes], str]:
    """Prometheus on a free port, once ready; a port taken meanwhile (by a Ray agent
    started since it was found free) is given up for another."""
    for _ in range(3):
        [port] = free_ports(1)
        with open(folder / "prometheus.log", "wb") as log:
            process = subprocess.Popen(
                [executable, f"--config.file={folder / 'prometheus.yml'}",
                 f"--storage.tsdb.path={folder / 'data'}",
                 f"--web.listen-address=127.0.0.1:{port}"],
                stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        url = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 60
        while process.poll() is None and not _ready(url):
            if time.monotonic() > deadline:
                process.kill()
                process.wait(timeout=30)
                raise AssertionError("prometheus did not get ready in 60 s")
            time.sleep(0.5)
        if process.poll() is None:
            return process, url
    raise AssertionError((folder / "prometheus.log").read_text()[-3000:])


def _ready(url: str) -> bool:
    with contextlib.suppress(OSError, http.client.HTTPException):
        with urllib.request.urlopen(f"{url}/-/ready", timeout=2) as response:
            return response.status == 200
    return False
