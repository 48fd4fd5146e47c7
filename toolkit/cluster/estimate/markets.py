"""On demand beside spot: what the job's workers cost on each market, and with a
deadline (``toolkit plan --deadline 6h``) how many finish in time on each.

The head node stays on demand on both (it runs the driver; anyscale's head has no
market). Spot workers cost the on-demand price less the type's spot discount
(:mod:`toolkit.cluster.price_table`), and are taken back now and then. The model of
what that costs, kept simple so it can be checked by hand:

- **interruptions** come at a constant rate per instance-hour, the one that takes
  back the Spot Instance Advisor's monthly share of instances within a month
  (:attr:`~toolkit.cluster.price_table.SpotFigures.per_instance_hour`);
- **each one loses half a block** of every worker on that instance: the rows it had
  in flight, on average half of the block it was working through (rows already
  written stay written: the run's checkpoint skips them); a block is ``rows /
  data.partitions`` rows when ``data.partitions`` is set, else one engine batch;
- so a spot worker gets through ``rows/s - interruptions per second x rows lost
  per interruption``, and the run's redone rows are its expected interruptions
  times the rows each loses.

A replacement node's start-up and model load are not counted, as the estimate
counts no start-up. PREFER_SPOT is priced as spot: what it costs when spot is there.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from typing import Any

from toolkit.cluster.estimate.figures import Figure, StageEstimate, figure_lines, unknown
from toolkit.cluster.price_table import SPOT_AS_OF, instance_price
from toolkit.run.progress.model import format_duration
from toolkit.spec.models import JobSpec

ON_DEMAND, SPOT = "on demand", "spot"

_DURATION = re.compile(r"^(?:(\d+(?:\.\d+)?)d)?(?:(\d+(?:\.\d+)?)h)?(?:(\d+(?:\.\d+)?)m)?"
                       r"(?:(\d+(?:\.\d+)?)s)?$")


def parse_duration(text: str) -> float:
    """Seconds in ``6h``, ``90m``, ``1h30m``, ``2d``, ``45s``.

    Raises:
        ValueError: not such a duration, or zero.
    """
    match = _DURATION.match(text.strip().lower().replace(" ", ""))
    if not text.strip() or match is None or not any(match.groups()):
        raise ValueError(f"{text!r} is not a duration such as 6h, 90m or 1h30m")
    days, hours, minutes, seconds = (float(part or 0) for part in match.groups())
    total = ((days * 24 + hours) * 60 + minutes) * 60 + seconds
    if total <= 0:
        raise ValueError(f"{text!r}: a deadline must be more than zero")
    return total


@dataclass(frozen=True)
class MarketEstimate:
    """The job on one market: its workers, wall time and cost (and, on spot, what the
    interruptions take)."""

    market: str
    workers: Figure
    wall_seconds: Figure
    cost_usd: Figure
    #: Expected interruptions over the run, and the rows they redo (spot only).
    interruptions: Figure | None = None
    rows_redone: Figure | None = None
    #: With a deadline: whether these workers finish by it.
    in_time: bool | None = None

    def as_json(self) -> dict[str, Any]:
        payload: dict[str, Any] = {"market": self.market, "workers": self.workers.as_json(),
                                   "wall_seconds": self.wall_seconds.as_json(),
                                   "cost_usd": self.cost_usd.as_json()}
        if self.interruptions is not None and self.rows_redone is not None:
            payload["interruptions"] = self.interruptions.as_json()
            payload["rows_redone"] = self.rows_redone.as_json()
        if self.in_time is not None:
            payload["in_time"] = self.in_time
        return payload


@dataclass(frozen=True)
class SpotRate:
    """One worker instance type's spot price and interruption rate."""

    instance_type: str
    price_per_hour: Figure
    interruptions_per_hour: Figure

    def as_json(self) -> dict[str, Any]:
        return {"instance_type": self.instance_type,
                "price_per_hour": self.price_per_hour.as_json(),
                "interruptions_per_instance_hour": self.interruptions_per_hour.as_json()}


@dataclass(frozen=True)
class MarketComparison:
    """Both markets side by side, as ``toolkit plan --spot`` and ``--deadline`` print them."""

    #: The spec's ``compute.market_type`` (what a render or submit asks for).
    #: ``notes`` go to the estimate's own notes.
    market_type: str
    spot_rates: list[SpotRate]
    rows_lost_per_interruption: Figure
    on_demand: MarketEstimate
    spot: MarketEstimate
    deadline_seconds: float | None = None
    notes: list[str] = field(default_factory=list)

    def as_json(self) -> dict[str, Any]:
        return {"market_type": self.market_type, "deadline_seconds": self.deadline_seconds,
                "spot_rates": [rate.as_json() for rate in self.spot_rates],
                "rows_lost_per_interruption": self.rows_lost_per_interruption.as_json(),
                "on_demand": self.on_demand.as_json(), "spot": self.spot.as_json()}

    def text_lines(self) -> list[str]:
        """The markets block of the plan's text, in its figure style."""
        rows: list[tuple[str, str, Figure]] = []
        for rate in self.spot_rates:
            rows.append(("spot price/hour", f"${rate.price_per_hour.value:,.4f} per instance"
                         if rate.price_per_hour.known else "?", rate.price_per_hour))
            per_hour = rate.interruptions_per_hour
            rows.append(("interruptions", f"~{per_hour.value:.5f}/instance-hour"
                         if per_hour.known else "?", per_hour))
        lost = self.rows_lost_per_interruption
        rows.append(("lost/interruption", f"~{lost.value:,.0f} rows per worker"
                     if lost.known else "?", lost))
        if self.deadline_seconds is not None:
            rows.append(("deadline", format_duration(self.deadline_seconds),
                         Figure(self.deadline_seconds, "flag", "--deadline")))
        for estimate in (self.on_demand, self.spot):
            label = estimate.market + (" (yours)" if _is_chosen(estimate.market,
                                                                self.market_type) else "")
            rows.append((label, _shown(estimate), _detail(estimate)))
        head = "Markets: worker nodes on demand and on spot (the head node stays on demand)"
        if self.deadline_seconds is not None:
            head += f", the fewest workers that finish in {format_duration(self.deadline_seconds)}"
        return [head + ":", *figure_lines(rows, gap=True)]


def compare_markets(spec: JobSpec, stages: list[StageEstimate], rows: Figure,
                    head_price: Figure, deadline_s: float | None = None,
                    price_per_hour: float | None = None) -> MarketComparison:
    """Both markets for the job's stages (their workers, instances, rates and on-demand
    prices, as :func:`~toolkit.cluster.estimate.job_estimate.estimate_job` worked them
    out); with ``deadline_s``, each market's fewest workers that finish by it.

    ``price_per_hour`` (``--price-per-hour``) is the on-demand price; spot takes the
    table's discount off it.
    """
    notes: list[str] = []
    spot_rates = [_spot_rate(stage, price_per_hour) for stage in stages]
    lost = _rows_lost(spec, rows)
    estimates = []
    for market in (ON_DEMAND, SPOT):
        spot = market == SPOT
        rates = [_worker_rate(stage, rate if spot else None, lost)
                 for stage, rate in zip(stages, spot_rates)]
        workers = [stage.workers.value for stage in stages]
        if deadline_s is not None and rows.known and all(r is not None for r in rates):
            workers = _workers_by(deadline_s, rows.value, workers, rates)
            capped = _capped(spec, stages, workers)
            if capped != workers:
                notes.append(f"On {market}, finishing by the deadline takes "
                             f"{_worker_count(workers)} workers, more than "
                             f"compute.max_workers {spec.compute.max_workers} instances "
                             f"hold: planned with {_worker_count(capped)}.")
                workers = capped
        estimates.append(_market_estimate(market, spec, stages, spot_rates if spot else None,
                                          rows, head_price, workers, rates, lost, deadline_s))
    if any(rate.interruptions_per_hour.known for rate in spot_rates):
        notes.append("Spot: interruptions are the Spot Instance Advisor's monthly share as a "
                     "steady rate, each losing half a block per worker on the instance; a "
                     "replacement node's start-up and model load are not counted.")
    return MarketComparison(market_type=spec.compute.market_type, spot_rates=_distinct(spot_rates),
                            rows_lost_per_interruption=lost, on_demand=estimates[0],
                            spot=estimates[1], deadline_seconds=deadline_s, notes=notes)


def _spot_rate(stage: StageEstimate, price_per_hour: float | None) -> SpotRate:
    instance_type = stage.instance_type.value
    price = instance_price(instance_type)
    spot = price.spot if price is not None else None
    if spot is None:
        missing = unknown(f"no spot figures for {instance_type or 'this instance type'}")
        return SpotRate(instance_type or "?", missing, missing)
    on_demand = price_per_hour if price_per_hour is not None else price.usd_per_hour
    where = "--price-per-hour" if price_per_hour is not None else "on demand"
    return SpotRate(
        instance_type,
        Figure(round(on_demand * (1 - spot.discount), 4), "table",
               f"{instance_type}: {spot.discount:.0%} off {where}, {SPOT_AS_OF}"),
        Figure(round(spot.per_instance_hour, 6), "table",
               f"{instance_type}: {spot.interruptions} of spot instances taken back a month "
               f"(taken as {spot.monthly_share:.0%}"
               f"{', a lower bound' if spot.interruptions.startswith('>') else ''}), "
               f"{SPOT_AS_OF}"),
    )


def _rows_lost(spec: JobSpec, rows: Figure) -> Figure:
    """Rows one worker loses per interruption: half a block, on average."""
    partitions = spec.data.partitions
    if partitions and rows.known:
        block = math.ceil(rows.value / partitions)
        detail = f"half a block of rows / data.partitions ({block:,} rows)"
    else:
        block = spec.engine.batch_size
        detail = f"half a block, one engine batch (engine.batch_size {block:,})"
    return Figure(block / 2, "derived", detail + ": the rows in flight; written rows are kept")


def _worker_rate(stage: StageEstimate, spot: SpotRate | None, lost: Figure) -> float | None:
    """Rows/s one worker of ``stage`` gets through, less what interruptions redo on spot."""
    rate = stage.rows_per_second_per_worker.value
    if rate is None or rate <= 0:
        return None
    if spot is None or not spot.interruptions_per_hour.known:
        return rate
    return max(rate - spot.interruptions_per_hour.value / 3600 * lost.value, rate / 100)


def _workers_by(deadline_s: float, rows: int, workers: list[int],
                rates: list[float | None]) -> list[int]:
    """The fewest workers that finish ``rows`` in ``deadline_s``: the slowest stage's
    need, every stage scaled alike (rows stream through them all)."""
    factor = max(rows / deadline_s / (w * r) for w, r in zip(workers, rates) if r)
    return [max(1, math.ceil(w * factor - 1e-9)) for w in workers]


def _capped(spec: JobSpec, stages: list[StageEstimate], workers: list[int]) -> list[int]:
    capped = []
    for stage, count in zip(stages, workers):
        price = instance_price(stage.instance_type.value)
        per_instance = price.workers_per_instance(stage.gpus_per_worker.value or 0,
                                                  _cpus(spec, stage)) if price else 0
        capped.append(min(count, spec.compute.max_workers * per_instance)
                      if per_instance else count)
    return capped


def _cpus(spec: JobSpec, stage: StageEstimate) -> float:
    return dict(spec.model_stages)[stage.path].num_cpus


def _instances(spec: JobSpec, stage: StageEstimate, workers: int) -> int | None:
    price = instance_price(stage.instance_type.value)
    if price is None:
        return None
    per_instance = price.workers_per_instance(stage.gpus_per_worker.value or 0,
                                              _cpus(spec, stage))
    return math.ceil(workers / per_instance) if per_instance else None


def _market_estimate(market: str, spec: JobSpec, stages: list[StageEstimate],
                     spot_rates: list[SpotRate] | None, rows: Figure, head_price: Figure,
                     workers: list[int], rates: list[float | None], lost: Figure,
                     deadline_s: float | None) -> MarketEstimate:
    count = Figure(sum(workers), "derived",
                   "the fewest that finish by the deadline" if deadline_s is not None
                   else "as planned")
    rated = [w * r for w, r in zip(workers, rates) if r]
    if not rated or not rows.known:
        wall = unknown("needs rows and throughput")
        return MarketEstimate(market, count, wall, unknown("needs the wall time"))
    seconds = round(rows.value / min(rated), 1)
    wall = Figure(seconds, "derived", "rows / the slowest stage's rows/s"
                  + (", less the rows redone" if spot_rates else ""))
    prices = [rate.price_per_hour for rate in spot_rates] if spot_rates else \
        [stage.price_per_hour for stage in stages]
    instances = [_instances(spec, stage, w) for stage, w in zip(stages, workers)]
    if all(p.known for p in prices) and None not in instances:
        hourly = sum(n * p.value for n, p in zip(instances, prices)) + (head_price.value or 0)
        cost = Figure(round(seconds / 3600 * hourly, 2), "derived",
                      f"wall time x ({market} worker instances x price + head on demand)")
    else:
        cost = unknown(f"no {market} price for a stage's instances")
    in_time = seconds <= deadline_s if deadline_s is not None else None
    if spot_rates is None:
        return MarketEstimate(market, count, wall, cost, in_time=in_time)
    per_hour = [rate.interruptions_per_hour.value or 0 for rate in spot_rates]
    expected = sum(n * rate for n, rate in zip(instances, per_hour) if n) * seconds / 3600
    redone = sum(w * rate for w, rate in zip(workers, per_hour)) * seconds / 3600 * lost.value
    return MarketEstimate(
        market, count, wall, cost,
        interruptions=Figure(float(f"{expected:.2g}"), "derived",
                             "instances x interruptions per instance-hour x wall time"),
        rows_redone=Figure(round(redone), "derived",
                           "workers x interruptions per instance-hour x wall time x rows "
                           "lost per interruption"),
        in_time=in_time)


def _shown(estimate: MarketEstimate) -> str:
    if not estimate.wall_seconds.known:
        return f"{estimate.workers.value} workers, ?"
    shown = (f"{estimate.workers.value} workers, ~{format_duration(estimate.wall_seconds.value)}, "
             + (f"~${estimate.cost_usd.value:,.2f}" if estimate.cost_usd.known else "?"))
    if estimate.in_time is False:
        shown += " (late)"
    return shown


def _detail(estimate: MarketEstimate) -> Figure:
    """The figure a market's line names as its source: its cost, with the workers' origin
    and, on spot, the interruptions it expects."""
    parts = [f"workers: {estimate.workers.detail}", estimate.cost_usd.detail]
    if estimate.interruptions is not None and estimate.rows_redone is not None:
        parts.append(f"~{estimate.interruptions.value:g} interruptions, "
                     f"~{estimate.rows_redone.value:,} rows redone")
    return Figure(estimate.cost_usd.value, estimate.cost_usd.source, "; ".join(parts))


def _is_chosen(market: str, market_type: str) -> bool:
    return (market == SPOT) == (market_type != "ON_DEMAND")


def _worker_count(workers: list[int]) -> str:
    return f"{sum(workers):,}"


def _distinct(rates: list[SpotRate]) -> list[SpotRate]:
    """One spot rate per instance type, in stage order."""
    return list({rate.instance_type: rate for rate in rates}.values())
