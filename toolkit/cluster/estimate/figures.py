"""A cost estimate's figures, each with where it came from, and how they print.

:class:`CostEstimate` is everything ``toolkit plan`` prints (its text, its one-line
summary on ``submit``, its JSON); :class:`StageEstimate` one model stage's share.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol

from toolkit.cluster.cascade_price import CascadeComparison
from toolkit.run.progress.model import format_duration
from toolkit.run.prompt_tokens import PromptTokens

class MarketFigures(Protocol):
    """What an estimate prints of its markets (:mod:`~toolkit.cluster.estimate.markets`
    builds them on this module's figures, so this module only names what it reads)."""

    def as_json(self) -> dict[str, Any]:
        """The markets in ``plan --format json``."""

    def text_lines(self) -> list[str]:
        """The ``Markets:`` block of the plan's text."""


@dataclass(frozen=True)
class Figure:
    """One number of an estimate and where it came from.

    ``source`` is ``measured``, ``table``, ``estimate``, ``flag``, ``spec``,
    ``derived`` (computed from the figures above it) or ``unknown``.
    """

    value: Any
    source: str
    detail: str = ""

    @property
    def known(self) -> bool:
        return self.value is not None

    def as_json(self) -> dict[str, Any]:
        return {"value": self.value, "source": self.source, "detail": self.detail}


def unknown(detail: str) -> Figure:
    """A figure that can't be worked out from here, and what it needs."""
    return Figure(None, "unknown", detail)


@dataclass(frozen=True)
class WorkerFigures:
    """The workers of a model stage (or of a whole job), their instances, how fast they
    go and what they cost: what a stage's estimate and a job's have alike."""

    workers: Figure
    gpus_per_worker: Figure
    instance_type: Figure
    instances: Figure
    rows_per_second_per_worker: Figure
    price_per_hour: Figure

    _FIGURES = ("workers", "gpus_per_worker", "instance_type", "instances",
                "rows_per_second_per_worker", "price_per_hour")

    def worker_rows(self, workers_label: str) -> list[tuple[str, str, Figure]]:
        """``(label, shown, figure)`` of the workers, instance type, rows/s per worker
        and price, as the text prints them."""
        return [
            (workers_label, _workers(self.workers.value, self.gpus_per_worker.value),
             self.workers),
            ("instance type", _instances(self.instances.value, self.instance_type.value),
             self.instance_type),
            ("rows/s/worker", _approx(self.rows_per_second_per_worker.value, 1),
             self.rows_per_second_per_worker),
            ("price/hour", _usd(self.price_per_hour.value, 4) + " per instance"
             if self.price_per_hour.known else "?", self.price_per_hour),
        ]


@dataclass(frozen=True)
class StageEstimate(WorkerFigures):
    """One model stage of an estimate: its workers, their instances and how fast they go.

    ``path`` is the stage's spec section: ``stages.NAME`` for an earlier stage,
    ``engine`` for the main (last) one.
    """

    path: str
    kind: str
    task: str
    model: str

    @property
    def rows_per_second(self) -> float | None:
        """What this stage's workers together get through (None: no rate for it)."""
        per_worker = self.rows_per_second_per_worker.value
        if per_worker is None or per_worker <= 0 or self.workers.value is None:
            return None
        return round(per_worker * self.workers.value, 2)

    def as_json(self, bottleneck: bool = False) -> dict[str, Any]:
        payload: dict[str, Any] = {"path": self.path, "kind": self.kind, "task": self.task,
                                   "model": self.model}
        payload.update({name: getattr(self, name).as_json() for name in self._FIGURES})
        payload["rows_per_second"] = self.rows_per_second
        payload["bottleneck"] = bottleneck
        return payload

    def text_lines(self) -> list[str]:
        lines = [f"  {self.path}: {self.kind} with {self.model} ({self.task})"]
        for label, shown, figure in self.worker_rows("workers"):
            lines.append(f"    {label + ':':17} {shown:22} {_where(figure)}")
        return lines


@dataclass(frozen=True)
class AcceleratorCost:
    """What the counted tokens cost on one accelerator, at the throughput table's rate."""

    accelerator: str
    instance_type: str
    gpu_hours: float
    usd: float
    detail: str

    def as_json(self) -> dict[str, Any]:
        return {"accelerator": self.accelerator, "instance_type": self.instance_type,
                "gpu_hours": self.gpu_hours, "cost_usd": self.usd, "source": "derived",
                "detail": self.detail}


@dataclass(frozen=True)
class CostEstimate(WorkerFigures):
    """Everything ``toolkit plan`` prints.

    The top-level figures describe the whole job: for a multi-stage job the
    workers and instances of every stage added up, rows/s per worker the slowest
    stage's, and ``stages`` each stage's own figures (one entry for a one-stage
    job, which prints and serializes as it always has, without them). ``model``
    and ``engine`` are the main stage's.
    """

    job: str
    model: str
    engine: str
    rows: Figure
    input_tokens_per_row: Figure
    output_tokens_per_row: Figure
    head_price_per_hour: Figure
    rows_per_second: Figure
    wall_seconds: Figure
    gpu_hours: Figure
    cost_usd: Figure
    notes: list[str] = field(default_factory=list)
    stages: list[StageEstimate] = field(default_factory=list)
    #: The slowest stage's path (None when no stage has a rate).
    bottleneck: str | None = None
    #: Stages without a rate, which the job's throughput assumes keep up.
    unrated: list[str] = field(default_factory=list)
    #: Every row's prompt tokens, counted (``--tokens``); None: not counted.
    prompt_tokens: PromptTokens | None = None
    #: The answers' token budget: every counted row's max_tokens (``--tokens``).
    output_token_budget: Figure | None = None
    #: What the job costs on each accelerator the tables price, from the counted tokens.
    accelerator_costs: list[AcceleratorCost] = field(default_factory=list)
    #: A cascade against its big model alone, from a cascade pilot (``--from-run``).
    cascade_comparison: CascadeComparison | None = None
    #: On demand beside spot, with a deadline's workers (``--spot``, ``--deadline``).
    markets: MarketFigures | None = None

    _FIGURES = ("rows", "input_tokens_per_row", "output_tokens_per_row", "workers",
                "gpus_per_worker", "instance_type", "instances", "rows_per_second_per_worker",
                "price_per_hour", "head_price_per_hour", "rows_per_second", "wall_seconds",
                "gpu_hours", "cost_usd")

    @property
    def multi_stage(self) -> bool:
        return len(self.stages) > 1

    def as_json(self) -> dict[str, Any]:
        payload: dict[str, Any] = {"job": self.job, "model": self.model, "engine": self.engine}
        payload.update({name: getattr(self, name).as_json() for name in self._FIGURES})
        if self.multi_stage:
            payload["stages"] = [stage.as_json(bottleneck=stage.path == self.bottleneck)
                                 for stage in self.stages]
        if self.prompt_tokens is not None:
            payload["prompt_tokens"] = self.prompt_tokens.as_json()
            payload["output_token_budget"] = (self.output_token_budget.as_json()
                                              if self.output_token_budget else None)
            payload["accelerator_costs"] = [cost.as_json() for cost in self.accelerator_costs]
        if self.cascade_comparison is not None:
            payload["cascade_comparison"] = self.cascade_comparison.as_json()
        if self.markets is not None:
            payload["markets"] = self.markets.as_json()
        payload["notes"] = list(self.notes)
        return payload

    def text(self) -> str:
        """The estimate as ``toolkit plan`` prints it: one figure a line, with its source."""
        tokens = [
            ("rows", _count(self.rows.value), self.rows),
            ("input tokens/row", _approx(self.input_tokens_per_row.value, 0),
             self.input_tokens_per_row),
            ("output tokens/row", _approx(self.output_tokens_per_row.value, 0),
             self.output_tokens_per_row),
        ]
        head = ("head node", _usd(self.head_price_per_hour.value, 4) + " per hour"
                if self.head_price_per_hour.known else "?", self.head_price_per_hour)
        totals = [
            ("throughput", _approx(self.rows_per_second.value, 1, " rows/s"), self.rows_per_second),
            ("wall time", "~" + format_duration(self.wall_seconds.value)
             if self.wall_seconds.known else "?", self.wall_seconds),
            ("GPU-hours", "0 (CPU workers)" if self.gpu_hours.value == 0 and
             not self._gpus() else _approx(self.gpu_hours.value, 1), self.gpu_hours),
            ("cost", "~" + _usd(self.cost_usd.value, 2) if self.cost_usd.known else "?",
             self.cost_usd),
        ]
        if self.multi_stage:
            lines = [f"Plan for {self.job}: {_count(self.rows.value)} rows through "
                     f"{len(self.stages)} model stages ({', '.join(s.path for s in self.stages)})"]
            lines += figure_lines(tokens)
            for stage in self.stages:
                lines += stage.text_lines()
            lines += figure_lines([
                ("workers", f"{self.workers.value} ({self._gpus()} GPUs)"
                 if self._gpus() else f"{self.workers.value} on CPU", self.workers),
                ("instances", self._instances_text(), self.instances),
                head, *totals], gap=True)
        else:
            lines = [f"Plan for {self.job}: {_count(self.rows.value)} rows, {self.engine} with "
                     f"{self.model}"]
            lines += figure_lines([*tokens, *self.worker_rows("engine workers"), head,
                                    *totals])
        if self.prompt_tokens is not None:
            lines += self._tokens_lines(self.prompt_tokens)
        if self.cascade_comparison is not None:
            lines.append(self.cascade_comparison.text())
        if self.markets is not None:
            lines += self.markets.text_lines()
        lines += [f"Note: {note}" for note in self.notes]
        return "\n".join(lines)

    def _tokens_lines(self, found: PromptTokens) -> list[str]:
        """The ``--tokens`` block: every row's prompt counted, what can't fit, the budget,
        and the cost on each priced accelerator."""
        measured = "measured"
        tokenizer = f"tokenizer of {found.model}, as {self.engine} counts them"
        if found.over_limit:
            more = (f" (+{found.over_limit - len(found.over_limit_ids):,} more)"
                    if found.over_limit > len(found.over_limit_ids) else "")
            over = (f"{_rows(found.over_limit)}: {'id' if found.over_limit == 1 else 'ids'} "
                    f"{', '.join(found.over_limit_ids)}{more}",
                    "each becomes an error row; --check-tokens refuses the run")
        else:
            over = ("0 rows", "every prompt fits")
        rows = [
            ("input tokens", f"{found.total:,}",
             Figure(found.total, measured, f"every row's prompt, {tokenizer}")),
            ("tokens/row", f"p50 {_count(found.p50)}, p99 {_count(found.p99)}, "
             f"max {_count(found.max)}",
             Figure(found.max, measured, f"longest: id {found.longest_id}"
                    if found.longest_id is not None else "")),
            ("max_model_len", _count(found.max_model_len),
             Figure(found.max_model_len, "spec" if "engine_kwargs" in found.max_model_len_from
                    else "measured", found.max_model_len_from)),
            ("over the limit", over[0], Figure(found.over_limit, measured, over[1])),
        ]
        if found.rejected:
            more = (f" (+{found.rejected - len(found.rejected_ids):,} more)"
                    if found.rejected > len(found.rejected_ids) else "")
            rows.append(("rejected by job", f"{_rows(found.rejected)}: ids "
                         f"{', '.join(found.rejected_ids)}{more}",
                         Figure(found.rejected, measured, f"first: {found.first_rejection}")))
        if self.output_token_budget is not None:
            rows.append(("output budget", f"{_count(self.output_token_budget.value)} tokens",
                         self.output_token_budget))
        streaming = (f"; {found.streaming_rows_per_second:,.0f} rows/s once the workers "
                     "were up" if found.streaming_rows_per_second else "")
        lines = [f"Every row's prompt, counted: {found.rows:,} rows of {found.input} in "
                 f"{found.seconds:,.1f} s ({found.rows_per_second:,.0f} rows/s{streaming})"]
        lines += figure_lines(rows, gap=True)
        if self.accelerator_costs:
            lines.append("Cost on each priced accelerator, from the counted tokens "
                         f"({self.accelerator_costs[0].detail}):")
            for cost in self.accelerator_costs:
                lines.append(f"  {cost.accelerator + ':':7} {cost.instance_type:14} "
                             f"~{cost.gpu_hours:,.2f} GPU-hours  ~{_usd(cost.usd, 2)}")
        return lines

    def _gpus(self) -> int:
        """GPUs of every stage's workers together (GPUs per worker for one stage)."""
        if not self.multi_stage:
            return self.gpus_per_worker.value or 0
        return sum((s.workers.value or 0) * (s.gpus_per_worker.value or 0) for s in self.stages)

    def _instances_text(self) -> str:
        """``1 x g4dn.2xlarge + 2 x g6.2xlarge``: every stage's instances, by type."""
        by_type: dict[str, int] = {}
        for stage in self.stages:
            if not (stage.instance_type.known and stage.instances.known):
                return "?"
            kind = stage.instance_type.value
            by_type[kind] = by_type.get(kind, 0) + stage.instances.value
        return " + ".join(f"{count} x {kind}" for kind, count in by_type.items())

    def one_line(self) -> str | None:
        """``Estimate: ~3h 08m on 4 x g6.2xlarge, ~12.5 GPU-hours, ~$13.50 (...)``, or None
        when the wall time can't be estimated."""
        if not self.wall_seconds.known:
            return None
        parts = [f"~{format_duration(self.wall_seconds.value)}"]
        if self.multi_stage:
            shown = self._instances_text()
            if shown != "?":
                parts[0] += f" on {shown}"
        elif self.instances.known and self.instance_type.known:
            parts[0] += f" on {self.instances.value} x {self.instance_type.value}"
        if self.gpu_hours.known and self.gpu_hours.value:
            parts.append(f"~{self.gpu_hours.value:,.1f} GPU-hours")
        if self.cost_usd.known:
            parts.append(f"~{_usd(self.cost_usd.value, 2)}")
        throughput = self.rows_per_second_per_worker.source
        if self.unrated:
            throughput += f", {' and '.join(self.unrated)} assumed to keep up"
        price = (joined_sources(s.price_per_hour for s in self.stages) if self.multi_stage
                 else self.price_per_hour.source)
        sources = f"throughput: {throughput}, price: {price}"
        return (f"Estimate for {_count(self.rows.value)} rows: {', '.join(parts)} ({sources}; "
                "rough, see `toolkit plan`).")


def _where(figure: Figure) -> str:
    return f"{figure.source}: {figure.detail}" if figure.detail else figure.source


def figure_lines(rows: list[tuple[str, str, Figure]], gap: bool = False) -> list[str]:
    """``  label:  shown  source: detail`` lines; ``gap`` keeps two spaces after a long value."""
    return [f"  {label + ':':19} {shown + ' ' if gap and len(shown) >= 22 else shown:22} "
            f"{_where(figure)}" for label, shown, figure in rows]


def joined_sources(figures: Any) -> str:
    """The distinct sources of some figures, in order: ``table``, ``table + flag``."""
    return " + ".join(dict.fromkeys(figure.source for figure in figures))


def _rows(count: int) -> str:
    return f"{count:,} row" if count == 1 else f"{count:,} rows"


def _count(value: Any) -> str:
    return f"{value:,}" if value is not None else "?"


def _approx(value: Any, digits: int, unit: str = "") -> str:
    return f"~{value:,.{digits}f}{unit}" if value is not None else "?"


def _usd(value: Any, digits: int) -> str:
    return f"${value:,.{digits}f}" if value is not None else "?"


def _workers(workers: Any, gpus: Any) -> str:
    if workers is None:
        return "?"
    return f"{workers} x {gpus} GPU" if gpus else f"{workers} on CPU"


def _instances(count: Any, instance_type: Any) -> str:
    if instance_type is None:
        return "?"
    return f"{count} x {instance_type}" if count is not None else str(instance_type)
