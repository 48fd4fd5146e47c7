"""``toolkit plan``: what a job will take (rows, tokens, workers, GPU-hours, cost) before it runs.

The logic is the cost estimate, :mod:`toolkit.cluster.estimate`; this module parses,
hands it what only the CLI may import (the samples' row counts and generators), and
prints.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import click

from toolkit.cli.spec_options import (
    load_spec_from_flags,
    pop_spec_flags,
    spec_options,
    spot_option,
)


def sample_rows() -> dict[str, int]:
    """Default rows of each ``sample:`` input (what a run of it without --rows makes)."""
    from toolkit.samples.provider import SAMPLES

    return dict(SAMPLES.default_rows)


def _sample_inputs() -> dict[str, Callable[[int, int], list[dict[str, Any]]]]:
    """Generators of ``sample:`` input rows, for measuring a job's prompts."""

    def customers(rows: int, seed: int) -> list[dict[str, Any]]:
        from toolkit.samples.customers import customers_batch

        return customers_batch(0, rows, seed).to_pylist()

    return {"customers": customers}


def _deadline(_ctx: click.Context, _param: click.Parameter, value: str | None) -> float | None:
    from toolkit.cluster.estimate.markets import parse_duration

    if value is None:
        return None
    try:
        return parse_duration(value)
    except ValueError as exc:
        raise click.BadParameter(str(exc)) from None


@click.command("plan")
@spec_options
@spot_option
@click.option("--deadline", metavar="DURATION", callback=_deadline,
              help="Finish within this long (6h, 90m, 1h30m): the fewest workers that do, "
                   "on demand and on spot, and what each costs (spot with the work redone "
                   "after interruptions).")
@click.option("--from-run", "from_run", metavar="DIR",
              help="Output directory of a finished pilot run of this job: its measured rows/s "
                   "per worker replaces the throughput table.")
@click.option("--price-per-hour", type=click.FloatRange(min=0), metavar="USD",
              help="On-demand price of one worker instance per hour (default: the toolkit's "
                   "table of AWS prices).")
@click.option("--tokens", "count_tokens", is_flag=True,
              help="Count every input row's prompt tokens with the job's own prompt and the "
                   "model's tokenizer (Ray Data on CPUs, no model weights): exact input "
                   "tokens, the rows over max_model_len by id, the output budget, and the "
                   "cost on each priced accelerator.")
@click.option("--calibrate", "labels", metavar="LABELS.csv",
              help="With --from-run (the small model alone, or a cascade): known answers "
                   "for some of its rows (the id column and the answer column), to show "
                   "at a few escalate_below thresholds how many rows go on to the big "
                   "model and how many of those the small model keeps are right.")
@click.option("--format", "output_format", type=click.Choice(["text", "json"]), default="text",
              show_default=True, help="text, or json for scripts (--output is the spec's "
                                      "output directory here).")
def plan_command(job: str, spec_file: Path | None, sets: tuple[str, ...], smoke: bool,
                 from_run: str | None, price_per_hour: float | None, count_tokens: bool,
                 labels: str | None, output_format: str, deadline: float | None,
                 **kwargs: Any) -> None:
    """Estimate JOB's wall time, GPU-hours and cost before running it.

    Every figure says where it came from: the spec, a measurement (the model's
    tokenizer over sample rows, every row with --tokens, a pilot run), an
    estimate, a table or a flag. --spot (or compute.market_type) and --deadline
    price the worker nodes on demand and on spot side by side.

    \b
    Examples:
      toolkit plan text-industry --rows 1M
      toolkit submit text-industry --rows 2000 --output s3://b/pilot --follow
      toolkit plan text-industry --rows 1M --from-run s3://b/pilot --price-per-hour 0.80
      toolkit plan text-industry --input customers.csv --rows 100k --tokens
      toolkit plan text-industry --from-run out/pilot --calibrate labels.csv
      toolkit plan text-industry --rows 1M --accelerator L4 --spot --deadline 6h
    """
    from toolkit.cluster.estimate.job_estimate import estimate_job

    if labels and not from_run:
        raise click.UsageError("--calibrate needs --from-run: the pilot whose answers "
                               "the labels are checked against.")
    job_def, spec = load_spec_from_flags(job, spec_file, sets, smoke, **pop_spec_flags(kwargs))
    tokens = None
    if count_tokens:
        from toolkit.run.prompt_tokens import count_prompt_tokens_on_ray
        from toolkit.samples.provider import SAMPLES

        tokens = count_prompt_tokens_on_ray(job_def, spec, samples=SAMPLES)
    estimate = estimate_job(job_def, spec, from_run=from_run, price_per_hour=price_per_hour,
                            sample_rows=sample_rows(), sample_inputs=_sample_inputs(),
                            tokens=tokens, deadline_s=deadline)
    calibration = None
    if labels and from_run:
        from toolkit.cluster.calibration import calibrate

        calibration = calibrate(from_run, labels, escalate_below=spec.cascade.escalate_below
                                if spec.cascade is not None else None)
    if output_format == "json":
        payload = estimate.as_json()
        if calibration is not None:
            payload["calibration"] = calibration.as_json()
        click.echo(json.dumps(payload, indent=2))
    else:
        click.echo(estimate.text())
        if calibration is not None:
            click.echo(calibration.text())


def quick_estimate(job_def: Any, spec: Any) -> str | None:
    """The cost estimate in one line, fast (no tokenizer, no counting files), or None on
    any problem: an estimate must never slow down or fail a submit."""
    try:
        from toolkit.cluster.estimate.job_estimate import estimate_job

        estimate = estimate_job(job_def, spec, sample_rows=sample_rows(), use_tokenizer=False,
                                count_rows=False)
        return estimate.one_line()
    except Exception:  # noqa: BLE001 - see the docstring
        return None
