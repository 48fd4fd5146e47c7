"""The stop-loss: a run whose first rows mostly fail stops early (exit 8).

A wrong setting (``max_tokens`` too small, a prompt the model can't follow, a server
that ignores the output shape) fails nearly every row, and a batch job would
otherwise spend its whole budget writing error rows. The rows this run writes are
counted as they land (error rows and rows that failed a check, see
:mod:`toolkit.run.row_checks`); once ``stop_loss.min_rows`` are in and more than
``stop_loss.failure_rate`` of them failed, the run stops, keeping what it wrote,
and says which check failed, how often, and what to do.

The rows are looked at every :data:`STOP_LOSS_INTERVAL_S` while the run goes, and
once more when it ends: a short run can write all its rows between two looks, and
whether it fails the stop-loss must depend on its rows, not on that timing.
"""

from __future__ import annotations

from collections.abc import Callable

from toolkit.errors import StopLossError
from toolkit.redaction import redact
from toolkit.run.progress.model import RowCounts, checks_text, row_counts
from toolkit.spec.quality import BUILTIN_CHECKS
from toolkit.spec.run_settings import StopLossRules

#: Seconds between looks at the rows written (a listing of the output, and the
#: footers of files new since the last look).
STOP_LOSS_INTERVAL_S = 1.0


def judge_rows(rules: StopLossRules, counts: RowCounts, output: str,
               first_error: Callable[[], str | None] = lambda: None, *,
               finished: bool = False) -> StopLossError | None:
    """The error that stops the run, or None while the rows written pass the stop-loss.

    Args:
        rules: The run's plan (``stop_loss``; ``sampling.max_tokens`` for the advice),
            or a spec.
        counts: The rows this run wrote so far.
        output: Where they are (for the retry command in the message).
        first_error: Reads one error row's message, for a run failing with errors.
        finished: The run wrote all its rows (the look when it ends): the error then
            fails the run after the fact rather than stopping it early.
    """
    output = redact(output)
    limit = rules.stop_loss
    if limit.failure_rate is None or counts.rows < limit.min_rows:
        return None
    failing = counts.failed_rows
    if failing <= limit.failure_rate * counts.rows:
        return None
    share = 100 * failing / counts.rows
    checks = dict(counts.checks)
    worst = max(checks, key=checks.__getitem__) if checks else None
    if worst is not None and checks[worst] >= counts.errors / 2:
        what = BUILTIN_CHECKS.get(worst, f"your check {worst} failed them")
        if worst == "truncated":
            what = f"the answers were cut off at sampling.max_tokens={rules.sampling.max_tokens}"
        cause = f"mostly {worst}: {what} (failed checks: {checks_text(counts.checks, counts.rows)})"
    else:
        example = first_error()
        cause = (f"{counts.errors:,} are error rows"
                 + (f", e.g. {example!r}" if example else ""))
    fix = _advice(worst)
    share_text = (f"{failing:,} of the {'' if finished else 'first '}{counts.rows:,} rows "
                  f"failed ({share:.0f}%), past the stop-loss of {limit.failure_rate:.0%} "
                  f"after {limit.min_rows:,} rows; {cause}.")
    retry = f"toolkit retry {output}{_retry_sets(rules, worst)}"
    if finished:
        return StopLossError(
            f"Failed at its end: {share_text} The run wrote its last row before the "
            f"stop-loss could stop it: all {counts.rows:,} rows are kept in {output}, and "
            "the run is not marked finished.",
            hint=f"{fix} Then redo only the failed rows: {retry}. To accept such a run, "
            "pass --set stop_loss.failure_rate=null.",
        )
    return StopLossError(
        f"Stopped early: {share_text} The rows written so far are kept in {output}.",
        hint=f"{fix} Then redo only the failed rows and the ones not reached: {retry}. "
        "To let the run go on anyway, pass --set stop_loss.failure_rate=null.",
    )


def _advice(worst: str | None) -> str:
    if worst == "truncated":
        return "Give the answers room: raise sampling.max_tokens."
    if worst == "invalid":
        return ("The answers break the job's output shape: use an engine that enforces it "
                "(vllm, transformers) or say the shape in the prompt.")
    if worst == "empty":
        return "The model answers nothing: check the prompt and the model."
    return "Look at the error and failed_checks columns of the rows written."


def _retry_sets(rules: StopLossRules, worst: str | None) -> str:
    if worst == "truncated":
        return f" --set sampling.max_tokens={max(16, 4 * rules.sampling.max_tokens)}"
    return ""


class StopLossWatch:
    """Counts the rows this run writes and judges them (``judge`` for
    :func:`~toolkit.run.run_stop.stopping_when`)."""

    def __init__(self, rules: StopLossRules, output: str,
                 count: Callable[[], RowCounts | tuple[int, int]],
                 first_error: Callable[[], str | None] = lambda: None) -> None:
        self.rules, self.output, self.count, self.first_error = rules, output, count, first_error

    def __call__(self, *, finished: bool = False) -> StopLossError | None:
        if self.rules.stop_loss.failure_rate is None:
            return None
        return judge_rows(self.rules, row_counts(self.count()), self.output,
                          self.first_error, finished=finished)
