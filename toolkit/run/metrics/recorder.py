"""The driver's side of the metrics: a run's figures recorded while it goes and when it ends.

:func:`recording_metrics` wraps a run on the driver (a ``toolkit run``, a submitted job's
entrypoint), once Ray is up: every :data:`METRICS_INTERVAL_S` (and once more when the
run ends, however it ends) :class:`RunMetrics` counts this run's committed result files
(:class:`~toolkit.run.metrics.write_figures.WrittenFigures`) and adds what is new to its
counters, so the counters end at what the files hold: the summary's figures for a run
that did not resume. Nothing runs per row, or in Ray's workers; a look lists the
output folder and reads the new files' few figure columns once each.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

from toolkit.errors import StopLossError
from toolkit.redaction import redact
from toolkit.run.metrics import instruments as m
from toolkit.run.metrics.engine_restarts import engine_restarts
from toolkit.run.metrics.write_figures import WriteFigures, WrittenFigures
from toolkit.run.output.run_directory import RunState
from toolkit.run.progress.model import Clock, ProgressReporter, RowCounts, polling
from toolkit.run.run_plan import RunPlan

#: Seconds between looks at the rows written while a run goes.
METRICS_INTERVAL_S = 5.0
#: Beyond Ray's report interval, for its export to have gone out.
EXPORT_MARGIN_S = 1.0


def report_interval_s() -> float:
    """How often Ray's processes export their metrics (``RAY_metrics_report_interval_ms``;
    never under a second), as this process's Ray was configured."""
    try:
        import ray

        return max(ray._config.metrics_report_interval_ms(), 1000) / 1000
    except Exception:  # noqa: BLE001 - an older or newer Ray: its default
        return 10.0


class RunMetrics:
    """Records one run's figures as Ray metrics, tagged with its job and write id.

    The write id is the one this run added to the folder's manifest (the pipeline adds
    it just before the first row is written); until then there is nothing to count.
    """

    def __init__(self, plan: RunPlan, total: Callable[[], int | None], *,
                 clock: Clock = time.monotonic,
                 metric: Callable[[m.MetricDefinition], Any] = m.ray_metric,
                 restarts: Callable[[], int | None] = engine_restarts) -> None:
        """
        Args:
            plan: The run's plan (its job, output folder, state and cascade).
            total: The rows the run will write, where known (polled until it is).
            clock: Monotonic seconds, for the rate and the ETA.
            metric: Makes the recording object of a metric (Ray's by default).
            restarts: The run's engine restarts so far (Ray's state API by default).
        """
        self._job = plan.job.name
        self._run_dir = plan.run_dir
        self._format = plan.data.output_format
        self._big_model = plan.spec.engine.model if plan.spec.cascade is not None else None
        manifest = plan.run_dir.read_manifest()
        self._earlier_writes = set(manifest.write_ids if manifest is not None else ())
        # What Ray Data's checkpoint kept, as the pipeline counts a resume's earlier rows.
        self._resumed = plan.run_dir.checkpointed_rows() if plan.state is RunState.PARTIAL else 0
        self._write_id: str | None = None
        self._counter: WrittenFigures | None = None
        self._recorded = WriteFigures(0, 0, 0)
        self._reporter = ProgressReporter(lambda: RowCounts(self._resumed + self._recorded.rows, 0),
                                          total=total, clock=clock)
        self._metric = metric
        self._restarts = restarts
        self._restarted = 0
        self._stopped = False
        self._stop_counted = False
        self._clock = clock
        #: When a counter last grew: Ray exports it to the node's agent a report
        #: interval later, not when the process ends.
        self.last_added: float | None = None
        self._made: dict[str, Any] = {}
        self._lock = threading.Lock()

    @property
    def write_id(self) -> str | None:
        """This run's write id, once the pipeline began its write."""
        return self._write_id

    def look(self, *, finished: bool = False) -> None:
        """Count this run's files now and record what is new."""
        with self._lock:
            if self._counter is None and not self._find_write():
                return
            assert self._counter is not None
            figures = self._counter()
            assert isinstance(figures, WriteFigures)
            self._add(figures)
            self._set_gauges(finished)
            restarts = self._restarts()
            if restarts is not None:
                self._record(m.ENGINE_RESTARTS, restarts - self._restarted)
                self._restarted = max(self._restarted, restarts)

    def stop_loss_stopped(self) -> None:
        """The stop-loss stopped the run."""
        with self._lock:
            self._stopped = True  # recorded by the look that follows

    def exported(self, sleep: Callable[[float], None] = time.sleep) -> None:
        """Return once Ray has exported the last counts: a process that ends sooner
        takes them with it (Ray hands a process's metrics to its node's agent every
        report interval, and not when it ends)."""
        if self.last_added is None:
            return
        wait = self.last_added + report_interval_s() + EXPORT_MARGIN_S - self._clock()
        if wait > 0:
            sleep(wait)

    def _find_write(self) -> bool:
        manifest = self._run_dir.read_manifest()
        new = [w for w in (manifest.write_ids if manifest is not None else ())
               if w not in self._earlier_writes]
        if not new:
            return False
        self._write_id = new[-1]
        self._counter = WrittenFigures(self._run_dir, self._format, self._write_id)
        if self._resumed:
            self._record(m.ROWS_RESUMED, self._resumed)
        return True

    def _add(self, now: WriteFigures) -> None:
        was = self._recorded
        self._record(m.ROWS_WRITTEN, now.rows - was.rows)
        self._record(m.ERROR_ROWS, now.errors - was.errors)
        self._record(m.ROWS_OK, (now.rows - now.failed_rows) - (was.rows - was.failed_rows))
        self._record(m.CHECK_FAILED_ROWS,
                     (now.failed_rows - now.errors) - (was.failed_rows - was.errors))
        self._record(m.INPUT_TOKENS, now.input_tokens - was.input_tokens)
        self._record(m.OUTPUT_TOKENS, now.output_tokens - was.output_tokens)
        for tag, counted, before in (("check", now.checks, was.checks),
                                     ("model", now.answered, was.answered)):
            metric = m.CHECK_FAILURES if tag == "check" else m.ANSWERED_ROWS
            earlier = dict(before)
            for name, count in counted:
                self._record(metric, count - earlier.get(name, 0), {tag: redact(name)})
        if self._big_model is not None:
            answered, earlier = dict(now.answered), dict(was.answered)
            self._record(m.ESCALATED_ROWS, answered.get(self._big_model, 0)
                         - earlier.get(self._big_model, 0))
        self._recorded = now

    def _set_gauges(self, finished: bool) -> None:
        progress = self._reporter.poll(finished=finished)
        rows = self._recorded.rows
        self._record(m.OUTPUT_ROWS, progress.rows_done)
        self._record(m.PLANNED_ROWS, progress.rows_total)
        self._record(m.ROWS_PER_SECOND, progress.rows_per_second)
        self._record(m.ETA_SECONDS, progress.eta_seconds)
        self._record(m.FAILING_SHARE, self._recorded.failed_rows / rows if rows else None)
        self._record(m.STOP_LOSS_STATE, int(self._stopped))
        if self._stopped and not self._stop_counted:
            self._record(m.STOP_LOSS_STOPS, 1)
            self._stop_counted = True

    def _record(self, definition: m.MetricDefinition, value: float | None,
                tags: dict[str, str] | None = None) -> None:
        if value is None or (definition.kind == "counter" and value <= 0):
            return  # a counter only grows; nothing new is nothing to add
        made = self._made.get(definition.name)
        if made is None:
            made = self._made[definition.name] = self._metric(definition)
        assert self._write_id is not None
        tags = {"job": self._job, "write_id": self._write_id, **(tags or {})}
        if definition.kind == "counter":
            made.inc(value, tags=tags)
            self.last_added = self._clock()
        else:
            made.set(value, tags=tags)


@contextlib.contextmanager
def recording_metrics(plan: RunPlan, total: Callable[[], int | None], *,
                      interval_s: float = METRICS_INTERVAL_S,
                      outlive: bool = True,
                      metric: Callable[[m.MetricDefinition], Any] = m.ray_metric,
                      ) -> Iterator[RunMetrics | None]:
    """Record ``plan``'s figures as Ray metrics while the block runs (Ray must be up),
    and once more as it ends, however it ends: a run stopped or failed part way keeps
    counters that hold what it wrote. A metric that can't be recorded never fails a run.

    Args:
        outlive: The metrics outlive this process (a cluster's Ray, not one started
            here and stopped with the run): the block ends once Ray exported the last
            counts, up to a report interval (10 s by default) after the run's end.
        metric: As :class:`RunMetrics`'s.
    """
    metrics: RunMetrics | None = None
    with contextlib.suppress(Exception):  # a folder it can't read: the run says so, not this
        # A Ray started here has no state API to ask (no dashboard), and no one after
        # the run to read its metrics.
        metrics = RunMetrics(plan, total, metric=metric,
                             **({} if outlive else {"restarts": lambda: None}))
    if metrics is None:
        yield None
        return
    stop = polling(metrics.look, interval_s)
    finished = False
    try:
        yield metrics
        finished = True
    except StopLossError:
        metrics.stop_loss_stopped()
        raise
    finally:
        stop()
        with contextlib.suppress(Exception):  # noqa: BLE001 - metrics never fail a run
            metrics.look(finished=finished)
            if outlive:
                metrics.exported()
