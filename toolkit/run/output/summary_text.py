"""Human-readable text for run summaries (the CLI and the cluster entrypoint print it)."""

from __future__ import annotations

from toolkit.redaction import redact
from toolkit.run.answer_cache.cache_counts import cache_lines
from toolkit.run.output.summary import RunSummary

SMOKE_WARNING = (
    "Smoke run: a tiny random-weight model produced these results. They prove the "
    "pipeline works end to end; they are NOT meaningful predictions."
)


def format_summary(summary: RunSummary, locations: bool = True) -> str:
    """The summary as the run prints it at its end.

    Args:
        locations: Include the ``output:`` and ``report:`` lines (``toolkit status``
            shows them with the job's other facts, above the summary).
    """
    lines = [
        f"Job {summary.job} finished in {summary.seconds:.1f} s "
        f"({summary.rows_per_second:,.1f} rows/s).",
        f"  rows in:       {summary.rows_in:,}",
        f"  rows written:  {summary.rows_written:,} "
        f"({summary.rows_ok:,} ok, "
        + (f"{summary.check_failed_rows:,} failed a check, " if summary.check_failed_rows
           else "")
        + f"{summary.error_rows:,} with an error)",
    ]
    if summary.rows_this_run is not None and summary.rows_this_run != summary.rows_in:
        lines.append(f"  this run:      {summary.rows_this_run:,} rows processed")
    lines += _accounting_lines(summary)
    lines += _quality_lines(summary)
    lines += _stage_lines(summary)
    for name, value in summary.figures.items():
        lines.append(f"  {name + ':':14} {value:,}")
    if locations:
        lines.append(f"  output:        {summary.output} (summary in _summary.json)")
        if summary.report:
            lines.append(f"  report:        {summary.report}")
    if summary.log_file:
        lines.append(f"  ray log:       {summary.log_file}")
    if summary.metrics is not None:
        lines.append(f"  metrics:       {summary.metrics.describe()}")
    if summary.samples:
        lines.append("  sample results:")
        lines += [f"    {_one_line(row)}" for row in summary.samples]
    if summary.first_errors:
        lines.append("  first errors:")
        lines += [f"    {_one_line(row)}" for row in summary.first_errors]
    lines += summary.notes
    if summary.smoke:
        lines.append(SMOKE_WARNING)
    return redact("\n".join(lines))


def _accounting_lines(summary: RunSummary) -> list[str]:
    """Workers, GPU-hours and tokens (summaries written before these fields have none)."""
    lines = []
    if summary.engine_workers is not None and summary.rows_per_second_per_worker is not None:
        per_worker = f"{summary.rows_per_second_per_worker:,.1f} rows/s per worker"
        if summary.gpus_per_worker:
            lines.append(f"  workers:       {summary.engine_workers} x {summary.gpus_per_worker} "
                         f"GPU, {per_worker}, {summary.gpu_hours or 0:,.2f} GPU-hours")
        else:
            lines.append(f"  workers:       {summary.engine_workers} on CPU, {per_worker} "
                         "(0 GPU-hours)")
    if summary.input_tokens is not None and summary.output_tokens is not None:
        rate = (f" ({summary.tokens_per_second:,.1f} tokens/s)"
                if summary.tokens_per_second is not None else "")
        lines.append(f"  tokens:        {summary.input_tokens:,} in, "
                     f"{summary.output_tokens:,} out{rate}")
    return lines


def _quality_lines(summary: RunSummary) -> list[str]:
    """Checks, finish reasons, confidences and retries (generate jobs)."""
    lines = []
    if summary.checks:
        counts = ", ".join(f"{name} {c.failed:,}" for name, c in summary.checks.items())
        lines.append(f"  checks:        {counts} ({summary.failing_rows or 0:,} rows failed "
                     "a check or errored)")
    if summary.finish_reasons:
        lines.append("  finish:        " + ", ".join(
            f"{reason} {count:,}" for reason, count in summary.finish_reasons.items()))
    for column, c in summary.confidence.items():
        lines.append(f"  confidence:    {column} median {c.median:.2f} "
                     f"(p10 {c.p10:.2f}, p90 {c.p90:.2f}, mean {c.mean:.2f})")
    cascade = summary.cascade
    if cascade is not None:
        lines.append(f"  cascade:       {cascade.escalated:,} of "
                     f"{sum(cascade.answered_by.values()):,} rows escalated "
                     f"({cascade.escalation_rate:.1%}"
                     + (f", confidence under {cascade.escalate_below:g}"
                        if cascade.escalate_below is not None else "") + ")")
        lines.append("  answered by:   " + ", ".join(
            f"{model} {rows:,}" for model, rows in cascade.answered_by.items()))
        if cascade.input_tokens is not None:
            generated = cascade.output_tokens or {}
            lines.append("  model tokens:  " + "; ".join(
                f"{model} {tokens:,} in"
                + (f", {generated[model]:,} out" if model in generated else "")
                for model, tokens in cascade.input_tokens.items()))
    lines += cache_lines(summary.cache)
    if len(summary.attempts) > 1:
        last = summary.attempts[-1]
        changed = f", changed {', '.join(last.changed)}" if last.changed else ""
        lines.append(f"  attempts:      {len(summary.attempts)} (the last redid "
                     f"{last.rows:,} rows{changed})")
    return lines


def _stage_lines(summary: RunSummary) -> list[str]:
    """A multi-stage job's stages, each with the workers its own section gave it."""
    lines = ["  model stages:"] if summary.stages else []
    for stage in summary.stages:
        pool = (f"{stage.min_workers}-{stage.workers}" if stage.min_workers != stage.workers
                else str(stage.workers))
        where = (f"{stage.gpus_per_worker} {stage.accelerator_type or 'GPU'} GPU"
                 if stage.gpus_per_worker else "CPU")
        lines.append(f"    {stage.name}: {stage.task} on {stage.kind} ({stage.model}), "
                     f"{pool} x {where}, {stage.num_cpus:g} CPU each, batch {stage.batch_size}")
    return lines


def _one_line(row: dict) -> str:
    text = ", ".join(f"{k}={round(v, 3) if isinstance(v, float) else v!r}"
                     for k, v in row.items())
    return text if len(text) <= 160 else text[:157] + "..."
