"""A submitted run's figures, read back from a real Prometheus scraping a two-node Ray.

The run is a user's YAML job (text-industry's prompt, failing on every 7th row) on the
tiny smoke model, with a confidence check some answers fail: error rows, rows failing a
check, rows passing and tokens. What Prometheus holds after the run (over its HTTP API)
is what ``_summary.json`` says. A run stopped part way and resumed writes under a new
write id: its ``toolkit_rows_resumed`` plus its ``toolkit_rows_written`` are the rows on
disk.
"""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from tests.cluster.test_submitted_run import toolkit
from toolkit.cluster.backends.ray_jobs import RayJobsBackend
from toolkit.run.metrics import instruments as m
from toolkit.run.metrics.dashboard import dashboard_json, panel_queries

CHECKOUT = Path(__file__).resolve().parents[3]
ROWS = 60
#: Enough rows, in small blocks, for the run to be stopped part way.
RESUMED_ROWS = 240
#: The prompt fails (divides by zero) on every 7th row: an error row.
FAILING_PROMPT = 'Company: {{ Company | trim }} {{ "" if (Index | int) % 7 else 1 // 0 }}'
RUN_FLAGS = ("--smoke", "--input", "customers.csv", "--set", "checks.min_confidence=0.15",
             "--set", "stop_loss.failure_rate=null")


@pytest.fixture
def project(tmp_path: Path) -> Path:
    """A user's folder: their customers and a job whose prompt fails on some rows."""
    folder = tmp_path / "my-project"
    folder.mkdir()
    made = subprocess.run(["toolkit", "samples", "customers", "--rows", str(RESUMED_ROWS), "-o",
                           "customers.csv"], cwd=folder, capture_output=True, text=True)
    assert made.returncode == 0, made.stderr
    job = (CHECKOUT / "templates" / "text-industry.yaml").read_text()
    assert "Company: {{ Company | trim }}" in job
    (folder / "mixed.yaml").write_text(
        job.replace("Company: {{ Company | trim }}", FAILING_PROMPT)
        .replace("job: text-industry", "job: mixed-industry"))
    return folder


def metric(prometheus, definition: m.MetricDefinition, write_id: str, **tags: str) -> float:
    """A metric of one write, summed over the nodes and workers that reported it."""
    matchers = ",".join([f'write_id="{write_id}"', *(f'{k}="{v}"' for k, v in tags.items())])
    value = prometheus.value(f"sum({definition.prometheus_name}{{{matchers}}})")
    return 0.0 if value is None else value


def test_a_submitted_runs_figures_in_prometheus_are_its_summarys(project, two_nodes, prometheus):
    address = two_nodes.dashboard_url
    started = time.time()
    done = toolkit("submit", "./mixed.yaml", *RUN_FLAGS, "--rows", str(ROWS),
                   "--output", "out/mixed", "--follow", cwd=project, address=address)

    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    output = project / "out" / "mixed"
    summary = json.loads((output / "_summary.json").read_text())
    [write_id] = json.loads((output / "_manifest.json").read_text())["write_ids"]
    # A run with every kind of row: the comparison below means something.
    assert summary["rows_written"] == ROWS
    assert summary["error_rows"] > 0 and summary["check_failed_rows"] > 0
    assert summary["rows_ok"] > 0 and summary["input_tokens"] > 0

    # Scraped a second or two after the driver's last report.
    assert prometheus.wait_for(
        f'sum({m.ROWS_WRITTEN.prometheus_name}{{write_id="{write_id}"}})', ROWS) == ROWS
    for definition in (m.ROWS_WRITTEN, m.ROWS_OK, m.ERROR_ROWS, m.CHECK_FAILED_ROWS,
                       m.INPUT_TOKENS, m.OUTPUT_TOKENS):
        assert metric(prometheus, definition, write_id) == summary[definition.summary_field], \
            definition.name
    for check, count in summary["checks"].items():
        assert metric(prometheus, m.CHECK_FAILURES, write_id, check=check) == count["failed"]
    # Ray's scrape configuration names its target job "ray": the job tag stays, renamed.
    [series] = prometheus.query(f'{m.ROWS_WRITTEN.prometheus_name}{{write_id="{write_id}"}}')
    assert series["metric"]["exported_job"] == "mixed-industry"
    assert series["metric"]["job"] == "ray"

    # Every panel of the shipped dashboard shows the run, as Grafana asks for it.
    empty = [(title, query) for title, query in panel_queries(dashboard_json())
             if not prometheus.query_range(
                 query.replace("$job", "mixed-industry").replace("$write_id", write_id),
                 start=started, end=time.time())]
    assert not empty, empty
    # The summary, and so `toolkit status`, says where they are and which series are its.
    assert summary["metrics"]["write_id"] == write_id
    assert summary["metrics"]["job"] == "mixed-industry"
    assert summary["metrics"]["dashboard"].endswith("/#/metrics")
    assert f"write_id={write_id}" in done.stdout


def test_a_stopped_and_resumed_runs_counters_add_up_to_the_rows_on_disk(
        project, two_nodes, prometheus):
    address = two_nodes.dashboard_url
    output = project / "out" / "resumed"
    submit = ("submit", "./mixed.yaml", *RUN_FLAGS, "--rows", str(RESUMED_ROWS),
              "--partitions", "48", "--output", "out/resumed")
    backend = RayJobsBackend.connect(address)  # stops it at once, not after a CLI starts
    started = toolkit(*submit, cwd=project, address=address)
    assert started.returncode == 0, started.stderr[-3000:]
    job_id = started.stdout.strip().splitlines()[0]
    deadline = time.monotonic() + 180
    while not list(output.glob("part-*")):  # its first rows are written: stop it there
        assert time.monotonic() < deadline, "no rows written in 180 s"
        time.sleep(0.5)
    assert backend.stop(job_id)

    resumed = toolkit(*submit, "--follow", cwd=project, address=address)

    assert resumed.returncode == 0, resumed.stdout[-3000:] + resumed.stderr[-3000:]
    summary = json.loads((output / "_summary.json").read_text())
    on_disk = pq.read_table(output, columns=["Index"]).num_rows
    assert on_disk == summary["rows_written"] == RESUMED_ROWS
    write_ids = json.loads((output / "_manifest.json").read_text())["write_ids"]
    assert len(write_ids) == 2, resumed.stderr[-3000:]
    first, last = write_ids
    assert "Resumed:" in " ".join(summary["notes"]), summary["notes"]
    # The rows already on disk when it started, as the summary counts them: most of
    # them, or all (a loaded machine writes on until the stop lands).
    resumed_rows = summary["rows_written"] - summary["rows_this_run"]
    assert 0 < resumed_rows <= on_disk, summary
    assert prometheus.wait_for(f'sum({m.ROWS_RESUMED.prometheus_name}{{write_id="{last}"}})',
                               resumed_rows) == resumed_rows
    # A counter is made by its first rows: a resume with none left has no series.
    written = prometheus.wait_for(
        f'sum({m.ROWS_WRITTEN.prometheus_name}{{write_id="{last}"}})',
        on_disk - resumed_rows, timeout_s=60 if on_disk > resumed_rows else 5)
    assert (written or 0) == on_disk - resumed_rows, sorted(
        (r["metric"]["__name__"], r["metric"].get("write_id"), r["value"][1])
        for r in prometheus.query('{__name__=~"ray_toolkit_.*"}'))
    # The stopped run counted what it had written when it was stopped.
    assert metric(prometheus, m.ROWS_WRITTEN, first) >= resumed_rows
