"""vLLM's own engine metrics (time to first token, KV-cache use, requests running and
waiting...) reach Ray's metrics, where Prometheus, the Ray Dashboard and Grafana read
them: a run on a head of this test's own, then that head's metrics endpoints, as
Prometheus scrapes them (the targets Ray writes for its nodes)."""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import time
import urllib.request
from pathlib import Path

import pyarrow.csv as pacsv
from vllm_cli import succeeded, toolkit_run

from toolkit.cluster.backends.local_head import start_head, stop_head
from toolkit.samples.customers import customers_batch
from toolkit.samples.tiny_model import tiny_chat_model_path


def exported_lines(temp_dir: Path) -> list[str]:
    """Every line of every node's metrics endpoint the head's discovery file names."""
    discovery = temp_dir / "session_latest" / "prom_metrics_service_discovery.json"
    lines: list[str] = []
    for group in json.loads(discovery.read_text()):
        for target in group["targets"]:
            try:
                with urllib.request.urlopen(f"http://{target}/metrics", timeout=10) as page:
                    lines += page.read().decode().splitlines()
            except OSError:
                continue  # an agent not up yet: the next look
    return lines


def vllm_metrics(lines: list[str]) -> set[str]:
    return {line.split("{")[0].split(" ")[0] for line in lines
            if line.startswith("ray_vllm") and not line.startswith("#")}


def test_a_vllm_run_exports_vllms_engine_metrics_to_rays(tmp_path, monkeypatch):
    monkeypatch.setenv("RAY_metrics_report_interval_ms", "1000")  # the head's processes read it
    rows = tmp_path / "rows.csv"
    pacsv.write_csv(customers_batch(0, 40, seed=3), rows)
    temp_dir = Path(tempfile.mkdtemp(prefix="tkvm-", dir="/tmp"))
    head, process = start_head(temp_dir, num_cpus=4)
    try:
        succeeded(toolkit_run(
            "text-industry", "--engine", "vllm", "--accelerator", "none", "--concurrency", "1",
            "--model", str(tiny_chat_model_path()), "--input", str(rows),
            "--output", str(tmp_path / "out"), "--address", head.gcs_address))
        deadline, seen = time.monotonic() + 60, set()
        while time.monotonic() < deadline and not seen:
            seen = vllm_metrics(exported_lines(temp_dir))
            time.sleep(2)
        assert seen, "no ray_vllm* metric on the head's metrics endpoints"
        # What people tune a batch job with: tokens through the engine and its requests.
        assert any("prompt_tokens" in name for name in seen), sorted(seen)
    finally:
        stop_head(head, process=process)
        shutil.rmtree(temp_dir, ignore_errors=True)
        os.environ.pop("RAY_ADDRESS", None)
