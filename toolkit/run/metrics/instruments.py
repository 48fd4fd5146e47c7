"""Every metric the toolkit exports: its name, what it counts, and its tags.

One metric per figure, named for it with a ``toolkit_`` prefix (Ray's exporter adds
``ray_``, and ``_total`` to a counter: ``toolkit_rows_written`` is
``ray_toolkit_rows_written_total`` in Prometheus). Every metric is tagged with the
job's name (``job``) and the run's write id (``write_id``, the id in its result files'
names), a few also with a ``check`` or a ``model``; never an id or a row's text.

Counters are what a run wrote (they stay in Ray's metrics agent after the driver
ends, so Prometheus reads them after the run); gauges are how the run stands while it
goes (Ray drops a gauge two report intervals after its process ended).

A resumed run writes under a new write id, so its counters start at 0:
``toolkit_rows_resumed`` (rows already on disk when it started, from Ray Data's
checkpoint) plus its ``toolkit_rows_written`` is the folder's rows when it ends.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

#: Tags every metric carries.
RUN_TAGS: tuple[str, ...] = ("job", "write_id")

MetricKind = Literal["counter", "gauge"]


@dataclass(frozen=True)
class MetricDefinition:
    """One exported figure.

    Attributes:
        name: The metric's name as recorded (Prometheus: ``ray_`` + name, and
            ``_total`` after a counter's).
        kind: ``counter`` (what the run wrote; continues in the agent after the
            run) or ``gauge`` (how it stands now).
        description: What it counts, as Prometheus's HELP line shows it.
        extra_tags: Tags beyond :data:`RUN_TAGS`.
        summary_field: The ``_summary.json`` field the run's final value equals (for
            a run that did not resume), where there is one.
    """

    name: str
    kind: MetricKind
    description: str
    extra_tags: tuple[str, ...] = ()
    summary_field: str | None = None

    @property
    def prometheus_name(self) -> str:
        """The name Prometheus stores it under."""
        return f"ray_{self.name}" + ("_total" if self.kind == "counter" else "")

    @property
    def tags(self) -> tuple[str, ...]:
        return RUN_TAGS + self.extra_tags


ROWS_WRITTEN = MetricDefinition(
    "toolkit_rows_written", "counter",
    "Rows this run wrote (a result or an error), counted from its committed result files.",
    summary_field="rows_written")
ROWS_OK = MetricDefinition(
    "toolkit_rows_ok", "counter",
    "Rows this run wrote with a result, no error and no failed check.", summary_field="rows_ok")
ERROR_ROWS = MetricDefinition(
    "toolkit_error_rows", "counter", "Rows this run wrote with an error.",
    summary_field="error_rows")
CHECK_FAILED_ROWS = MetricDefinition(
    "toolkit_check_failed_rows", "counter",
    "Rows this run wrote with a result that failed a check.",
    summary_field="check_failed_rows")
CHECK_FAILURES = MetricDefinition(
    "toolkit_check_failures", "counter",
    "Rows this run wrote that failed the check named by the check tag (a row may fail "
    "several).", extra_tags=("check",), summary_field="checks")
INPUT_TOKENS = MetricDefinition(
    "toolkit_input_tokens", "counter", "Prompt tokens of the rows this run wrote, every model's.",
    summary_field="input_tokens")
OUTPUT_TOKENS = MetricDefinition(
    "toolkit_output_tokens", "counter",
    "Generated tokens of the rows this run wrote, every model's.", summary_field="output_tokens")
ANSWERED_ROWS = MetricDefinition(
    "toolkit_answered_rows", "counter",
    "A cascade's rows this run wrote, by the model (tag model) that answered them.",
    extra_tags=("model",))
ESCALATED_ROWS = MetricDefinition(
    "toolkit_escalated_rows", "counter",
    "A cascade's rows this run wrote that its small model sent on to the big one.")
ROWS_RESUMED = MetricDefinition(
    "toolkit_rows_resumed", "counter",
    "Rows already in the output folder when this run started (a resume's earlier rows); "
    "plus toolkit_rows_written, the folder's rows when it ends.")
ENGINE_RESTARTS = MetricDefinition(
    "toolkit_engine_restarts", "counter",
    "Times Ray restarted one of the run's model workers (Ray Data's actor-pool workers) "
    "that died.")
STOP_LOSS_STOPS = MetricDefinition(
    "toolkit_stop_loss_stops", "counter", "1 when the stop-loss stopped this run.")
OUTPUT_ROWS = MetricDefinition(
    "toolkit_output_rows", "gauge",
    "Rows in the output folder now, earlier runs' included (while the run goes).")
PLANNED_ROWS = MetricDefinition(
    "toolkit_planned_rows", "gauge", "Rows the run will write, where known in advance.")
ROWS_PER_SECOND = MetricDefinition(
    "toolkit_rows_per_second", "gauge", "Rows written per second by this run so far.")
ETA_SECONDS = MetricDefinition(
    "toolkit_eta_seconds", "gauge", "Seconds left at the run's rate, where the total is known.")
FAILING_SHARE = MetricDefinition(
    "toolkit_failing_share", "gauge",
    "Share of this run's rows with an error or a failed check: what the stop-loss judges.")
STOP_LOSS_STATE = MetricDefinition(
    "toolkit_stop_loss_state", "gauge",
    "0 while the rows pass the stop-loss, 1 once it stopped the run.")

#: Every metric, in the order the docs list them.
METRICS: tuple[MetricDefinition, ...] = (
    ROWS_WRITTEN, ROWS_OK, ERROR_ROWS, CHECK_FAILED_ROWS, CHECK_FAILURES, INPUT_TOKENS,
    OUTPUT_TOKENS, ANSWERED_ROWS, ESCALATED_ROWS, ROWS_RESUMED, ENGINE_RESTARTS, STOP_LOSS_STOPS,
    OUTPUT_ROWS, PLANNED_ROWS, ROWS_PER_SECOND, ETA_SECONDS, FAILING_SHARE, STOP_LOSS_STATE)


def ray_metric(definition: MetricDefinition) -> Any:
    """The ``ray.util.metrics`` object that records ``definition`` in this process."""
    from ray.util.metrics import Counter, Gauge

    made = Counter if definition.kind == "counter" else Gauge
    return made(definition.name, description=definition.description,
                tag_keys=definition.tags)
