"""The driver's metrics recorder on a run folder written by hand: what each look adds to
the counters, the gauges it sets, and a stop-loss stop. Recorded into a fake of Ray's
metric objects (the real ones, read back through a real Prometheus, are checked in
tests/cluster/metrics/test_prometheus_figures.py)."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from toolkit.errors import StopLossError
from toolkit.run.metrics import instruments as m
from toolkit.run.metrics.recorder import RunMetrics, recording_metrics
from toolkit.run.output.run_directory import RunDirectory, RunState
from toolkit.spec.jobs.catalog import load_job
from toolkit.spec.loading import load_job_spec

JOB = load_job("text-industry")


class Recorded:
    """Ray's Counter/Gauge as far as the recorder uses them: what was added or set."""

    def __init__(self, definition: m.MetricDefinition) -> None:
        assert definition.name.startswith("toolkit_")
        self.definition = definition
        self.values: dict[tuple[tuple[str, str], ...], float] = {}

    def inc(self, value: float, tags: dict[str, str]) -> None:
        assert value > 0 and set(tags) == set(self.definition.tags)
        key = tuple(sorted(tags.items()))
        self.values[key] = self.values.get(key, 0) + value

    def set(self, value: float, tags: dict[str, str]) -> None:
        assert set(tags) == set(self.definition.tags)
        self.values[tuple(sorted(tags.items()))] = value


def result_table(rows: int, errors: int, truncated: int, tokens: int) -> pa.Table:
    ok = rows - errors - truncated
    return pa.table({
        "Index": [str(i) for i in range(rows)],
        "error": [None] * (ok + truncated) + ["preprocess: boom"] * errors,
        "failed_checks": [None] * ok + ["truncated"] * truncated + [None] * errors,
        "num_input_tokens": [tokens] * (ok + truncated) + [None] * errors,
        "num_generated_tokens": [1] * (ok + truncated) + [None] * errors,
    })


@pytest.fixture
def run(tmp_path: Path):
    spec = load_job_spec(JOB, smoke=True, overrides={"data.output": str(tmp_path / "out")})
    run_dir = RunDirectory(str(tmp_path / "out"))
    run_dir.prepare(spec, overwrite=False, resumable=True)
    plan = SimpleNamespace(job=JOB, spec=spec, data=spec.data, run_dir=run_dir,
                           state=RunState.EMPTY)
    made: dict[str, Recorded] = {}

    def metric(definition: m.MetricDefinition) -> Recorded:
        return made.setdefault(definition.name, Recorded(definition))

    return plan, made, metric


def value(made: dict[str, Recorded], definition: m.MetricDefinition, **tags: str) -> float:
    recorded = made.get(definition.name)
    if recorded is None:
        return 0
    return sum(v for key, v in recorded.values.items() if set(tags.items()) <= set(key))


def test_each_look_adds_what_the_new_files_hold(run, tmp_path):
    plan, made, metric = run
    metrics = RunMetrics(plan, lambda: 70, metric=metric, restarts=lambda: 2)
    metrics.look()
    assert made == {}  # no write begun: nothing to count, nor a write id to tag it with

    write_id = plan.run_dir.begin_write()
    pq.write_table(result_table(40, 3, 5, 10), tmp_path / "out" / f"part-{write_id}_a_000000-0.parquet")
    metrics.look()
    pq.write_table(result_table(30, 2, 0, 10), tmp_path / "out" / f"part-{write_id}_a_000001-0.parquet")
    metrics.look(finished=True)

    tags = {"job": "text-industry", "write_id": write_id}
    assert value(made, m.ROWS_WRITTEN, **tags) == 70
    assert value(made, m.ERROR_ROWS) == 5 and value(made, m.CHECK_FAILED_ROWS) == 5
    assert value(made, m.ROWS_OK) == 60
    assert value(made, m.CHECK_FAILURES, check="truncated") == 5
    assert value(made, m.INPUT_TOKENS) == 650 and value(made, m.OUTPUT_TOKENS) == 65
    assert value(made, m.ENGINE_RESTARTS) == 2  # counted once, not once per look
    assert value(made, m.OUTPUT_ROWS) == 70 and value(made, m.PLANNED_ROWS) == 70
    assert value(made, m.ETA_SECONDS) == 0 and value(made, m.STOP_LOSS_STATE) == 0
    assert m.ROWS_RESUMED.name not in made  # nothing was there before


def test_a_stop_loss_stop_is_counted_and_the_last_rows_still_are(run, tmp_path):
    plan, made, metric = run
    plan.run_dir.begin_write()  # an earlier run's write: not this run's
    with pytest.raises(StopLossError), \
            recording_metrics(plan, lambda: None, outlive=False, metric=metric) as metrics:
        write_id = plan.run_dir.begin_write()
        pq.write_table(result_table(20, 15, 0, 1),
                       tmp_path / "out" / f"part-{write_id}_a_000000-0.parquet")
        raise StopLossError("Stopped early")

    assert metrics is not None and metrics.write_id == write_id
    assert value(made, m.ROWS_WRITTEN) == 20 and value(made, m.ERROR_ROWS) == 15
    assert value(made, m.STOP_LOSS_STOPS) == 1 and value(made, m.STOP_LOSS_STATE) == 1
