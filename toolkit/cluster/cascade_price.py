"""What a cascade costs against its big model alone, from a pilot's tokens per model.

A cascade pilot (``toolkit run ... --cascade-model SMALL``) writes, per model, the
tokens it read and generated and how many rows went on to the big model
(``_summary.json``'s ``cascade``). For a full run of ``rows`` rows, the small model
takes every row at the pilot's tokens per row, and the big one the pilot's share of
rows at its tokens per escalated row; alone, the big model would take every row at
that same rate. Each model's tokens are priced at the throughput table's tokens/s per
GPU for its size on its accelerator and that accelerator's instance price: GPU time
only, rough, as ``plan --tokens`` prices a job. A model whose size the table doesn't
know (no ``8B`` in its name) leaves the comparison unknown.

Example:
    >>> compare_cascade(spec, pilot_summary, rows=1_000_000).text()  # doctest: +SKIP
    'Cascade: ~$22.83 (~26.6 GPU-hours) against ~$27.49 (~28.1 GPU-hours) for ...'
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from toolkit.cluster.compute_table import worker_instance_type
from toolkit.cluster.price_table import instance_price
from toolkit.cluster.throughput_table import tokens_per_second_per_gpu
from toolkit.errors import SpecError
from toolkit.spec.cascade import CASCADE_FIELD
from toolkit.spec.engine_settings import EngineSettings
from toolkit.spec.models import JobSpec


@dataclass(frozen=True)
class GpuCost:
    """Tokens priced on one model's accelerator."""

    gpu_hours: float
    usd: float


@dataclass(frozen=True)
class CascadeComparison:
    """A full run's cascade against its big model alone (``plan --from-run`` a cascade pilot)."""

    rows: int
    escalation_rate: float
    big_model: str
    cascade: GpuCost | None
    alone: GpuCost | None
    #: Why a figure is unknown, or where the known ones come from.
    detail: str

    def as_json(self) -> dict[str, Any]:
        def cost(figure: GpuCost | None) -> dict[str, float] | None:
            return (None if figure is None else
                    {"gpu_hours": figure.gpu_hours, "cost_usd": figure.usd})

        return {"rows": self.rows, "escalation_rate": self.escalation_rate,
                "big_model": self.big_model, "cascade": cost(self.cascade),
                "big_model_alone": cost(self.alone), "source": "derived",
                "detail": self.detail}

    def text(self) -> str:
        """``Cascade: ~$X (~H GPU-hours) against ~$Y (...) for BIG alone: N% less ...``"""
        if self.cascade is None or self.alone is None:
            return f"Cascade against {self.big_model} alone: ? ({self.detail})"
        saved = 1 - self.cascade.usd / self.alone.usd if self.alone.usd else 0.0
        return (f"Cascade: ~${self.cascade.usd:,.2f} (~{self.cascade.gpu_hours:,.1f} "
                f"GPU-hours) against ~${self.alone.usd:,.2f} (~{self.alone.gpu_hours:,.1f} "
                f"GPU-hours) for {self.big_model} alone: {abs(saved):.0%} "
                f"{'less' if saved >= 0 else 'more'} for {self.rows:,} rows ({self.detail})")


def compare_cascade(spec: JobSpec, pilot: Any, rows: int | None) -> CascadeComparison | None:
    """The comparison for ``spec`` (a cascade) at ``rows`` rows from a pilot's summary;
    None when the spec has no cascade or the pilot was no cascade with token counts."""
    summary = getattr(pilot, "cascade", None)
    small_settings = spec.cascade_engine
    if (summary is None or small_settings is None or not rows
            or summary.input_tokens is None):
        return None
    small, big = summary.small_model, summary.big_model
    reached = sum(summary.answered_by.values())
    escalated = summary.answered_by.get(big, 0)
    rate = summary.escalation_rate

    def tokens(model: str) -> int:
        generated = (summary.output_tokens or {}).get(model, 0)
        return summary.input_tokens.get(model, 0) + generated

    base = (f"the pilot's {rate:.1%} escalated and its tokens per row of each model, at "
            "the table's tokens/s per GPU; GPU time only, rough")
    if not reached or not escalated:
        return CascadeComparison(rows, rate, spec.engine.model, None, None,
                                 "the pilot escalated no row, so the big model's tokens "
                                 "per row are unknown; pilot a threshold that escalates some")
    small_per_row = tokens(small) / reached
    big_per_row = tokens(big) / escalated
    priced_small = _price(small_settings, rows * small_per_row, CASCADE_FIELD)
    priced_big = _price(spec.engine, rows * rate * big_per_row, "engine")
    priced_alone = _price(spec.engine, rows * big_per_row, "engine")
    unknown = next((cost for cost in (priced_small, priced_big) if isinstance(cost, str)), None)
    if unknown is not None or isinstance(priced_alone, str):
        return CascadeComparison(rows, rate, spec.engine.model, None, None,
                                 str(unknown or priced_alone))
    assert isinstance(priced_small, GpuCost) and isinstance(priced_big, GpuCost)
    assert isinstance(priced_alone, GpuCost)
    both = GpuCost(round(priced_small.gpu_hours + priced_big.gpu_hours, 4),
                   round(priced_small.usd + priced_big.usd, 4))
    return CascadeComparison(rows, rate, spec.engine.model, both, priced_alone, base)


def _price(settings: EngineSettings, tokens: float, path: str) -> GpuCost | str:
    """``tokens`` on ``settings``' model and accelerator, or why they can't be priced."""
    rate = tokens_per_second_per_gpu(settings.model, settings.accelerator_type)
    if rate is None:
        return (f"{path}: the throughput table has no tokens/s for {settings.model} on "
                f"{settings.accelerator_type or 'CPUs'} (its size must be in its name, "
                "e.g. 8B, on a GPU)")
    _, per_gpu = rate
    try:
        instance_type = worker_instance_type(settings.accelerator_type, None,
                                             gpus=max(1, settings.gpus_per_worker))
    except SpecError as exc:
        return f"{path}: {exc}"
    price = instance_price(instance_type)
    if price is None or not price.gpus:
        return f"{path}: no price for {instance_type}"
    gpu_hours = tokens / per_gpu / 3600
    return GpuCost(round(gpu_hours, 4), round(gpu_hours * price.usd_per_hour / price.gpus, 4))
