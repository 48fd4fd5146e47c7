"""Checks on each answer, the stop-loss's judgement and the counts behind them, called
directly (the CLI runs of the same are in test_quality_gates.py)."""

from __future__ import annotations

import pyarrow as pa
import pytest

from toolkit.run.progress.watched_job import format_progress_line, parse_progress_line
from toolkit.engines.http.chat_stage import read_response
from toolkit.run.row_steps import finish_row
from toolkit.run.progress.display import format_progress
from toolkit.run.progress.model import Progress, RowCounts
from toolkit.run.progress.sources import table_counts
from toolkit.run.row_checks import RowChecks
from toolkit.run.stop_loss import judge_rows
from toolkit.spec.jobs.catalog import load_job
from toolkit.spec.jobs.prompt_job import PromptJobOptions, postprocess
from toolkit.spec.loading import load_job_spec
from toolkit.spec.quality import ChecksConfig

CHOICES = ["Retail", "Real Estate", "Other"]
OPTIONS = PromptJobOptions.model_validate({
    "prompt": {"user": "{{ company }}"},
    "output": {"column": "industry", "choice": CHOICES}})
RESULTS = ["industry", "industry_confidence"]


def answered(text, finish_reason=None, tokens=3, **row):
    return {"generated_text": text, "finish_reason": finish_reason, "num_generated_tokens": tokens,
            "generated_logprob": -0.5, "error": None, **row}


def finish(row, checks=None):
    return finish_row(row, postprocess, OPTIONS, RESULTS,
                      checks=checks or RowChecks.from_config(ChecksConfig(), max_tokens=8))


def test_an_answer_cut_off_at_max_tokens_is_reported_as_truncated_not_as_off_the_choices():
    row = finish(answered("Real", "length", tokens=1, sampling_params={"max_tokens": 1}))

    assert row["error"] == ("truncated: the answer was cut off at max_tokens=1 ('Real'); "
                            "raise sampling.max_tokens")
    assert row["finish_reason"] == "length" and row["failed_checks"] == "truncated"


def test_a_good_answer_passes_with_its_confidence():
    row = finish(answered("Retail", "stop"))

    assert row["industry"] == "Retail" and row["error"] is None
    assert row["industry_confidence"] == pytest.approx(0.6065, abs=1e-4)
    assert (row["finish_reason"], row["failed_checks"]) == ("stop", None)


def test_vllm_rows_get_their_finish_reason_from_the_token_count():
    # Ray Data LLM's vLLM stage reports no finish reason: max_tokens reached is "length".
    checks = RowChecks.from_config(ChecksConfig(), max_tokens=4)
    assert finish(answered("Retail", None, tokens=4), checks)["finish_reason"] == "length"
    assert finish(answered("Retail", None, tokens=2), checks)["finish_reason"] == "stop"
    per_row = answered("Retail", None, tokens=4, sampling_params={"max_tokens": 16})
    assert finish(per_row, checks)["finish_reason"] == "stop"


def test_empty_invalid_refusal_and_low_confidence_answers_fail_their_checks():
    checks = RowChecks.from_config(ChecksConfig(refusal=["can(no|')t help"], min_confidence=0.9),
                                   max_tokens=8)
    assert finish(answered("  ", "stop"), checks)["failed_checks"] == "empty,invalid"
    off = finish(answered("Banking", "stop"), checks)
    assert off["failed_checks"] == "invalid" and "not one of the choices" in off["error"]
    assert finish(answered("I CAN'T HELP", "stop"), checks)["failed_checks"] == "invalid,refusal"
    unsure = finish(answered("Other", "stop"), checks)  # probability 0.61 < 0.9
    assert unsure["error"] is None and unsure["failed_checks"] == "low_confidence"


def test_a_users_check_fails_rows_it_returns_a_reason_for_and_those_it_raises_on():
    def plausible(row):
        if row["industry"] == "Other":
            return "too vague"
        return row["nonexistent"] if row["industry"] == "Retail" else None

    config = ChecksConfig(custom="checks.py:plausible")
    checks = RowChecks.from_config(config, max_tokens=8, custom=plausible)
    assert finish(answered("Other", "stop"), checks)["failed_checks"] == "plausible"
    assert finish(answered("Retail", "stop"), checks)["failed_checks"] == "plausible"
    assert finish(answered("Real Estate", "stop"), checks)["failed_checks"] is None


def test_rows_that_failed_before_the_engine_have_no_checks():
    row = finish({"generated_text": None, "error": "preprocess: column 'company' is empty"})
    assert row["finish_reason"] == "error" and row["failed_checks"] is None


def test_the_stop_loss_waits_for_enough_rows_then_names_the_check_and_the_fix():
    spec = load_job_spec(load_job("text-industry"), smoke=True,
                         sets=["sampling.max_tokens=2"])
    truncated = RowCounts(199, 199, 199, (("truncated", 199),))
    assert judge_rows(spec, truncated, "out") is None  # not enough rows to judge yet

    error = judge_rows(spec, RowCounts(200, 200, 200, (("truncated", 200),)), "out")

    assert error is not None and error.exit_code == 8
    assert "200 of the first 200 rows failed (100%)" in error.message
    assert "cut off at sampling.max_tokens=2" in error.message
    assert "toolkit retry out --set sampling.max_tokens=16" in error.hint
    assert judge_rows(spec, RowCounts(200, 100, 100), "out") is None  # half is not past half


def test_a_run_that_ended_before_the_stop_loss_looked_fails_it_all_the_same():
    spec = load_job_spec(load_job("text-industry"), smoke=True,
                         sets=["sampling.max_tokens=2"])
    every_row = RowCounts(300, 300, 300, (("truncated", 300),))

    error = judge_rows(spec, every_row, "out", finished=True)

    assert error is not None and error.exit_code == 8
    assert error.message.startswith("Failed at its end: 300 of the 300 rows failed (100%)")
    assert "all 300 rows are kept in out, and the run is not marked finished" in error.message
    assert "redo only the failed rows: toolkit retry out --set sampling.max_tokens=16" \
        in error.hint
    assert judge_rows(spec, RowCounts(300, 150, 150), "out", finished=True) is None


def test_the_stop_loss_quotes_an_error_when_errors_are_what_fails():
    spec = load_job_spec(load_job("text-industry"), smoke=True)
    error = judge_rows(spec, RowCounts(300, 290, 290), "s3://key:secret@bucket/out",
                       first_error=lambda: "preprocess: column 'Company' is empty")
    assert "290 are error rows, e.g. \"preprocess: column 'Company' is empty\"" in error.message
    assert "secret" not in error.message + error.hint


def test_rows_and_checks_are_counted_from_the_written_columns():
    table = pa.table({"error": ["truncated: ...", None, None, None],
                      "failed_checks": ["truncated", "truncated,refusal", None, None]})
    assert table_counts(table) == RowCounts(4, 1, 2, (("refusal", 1), ("truncated", 2)))


def test_progress_shows_each_checks_rate_locally_and_in_a_jobs_log():
    progress = Progress(rows_done=200, rows_total=1000, rows_per_second=20.0, eta_seconds=40.0,
                        error_rows=150, elapsed_seconds=10, checks=(("truncated", 150),))
    assert "150 errors (failed checks: truncated 150 (75%))" in format_progress(progress, False)
    assert progress.describe().endswith("failed checks: truncated 150 (75%)")

    line = format_progress_line(200, 1000, 20.0, (("truncated", 150), ("empty", 0)))
    assert line.endswith("failed_checks=truncated:150")
    assert parse_progress_line(line).checks == (("truncated", 150),)
    assert parse_progress_line(format_progress_line(5, None, None)).checks is None


def test_an_http_servers_finish_reason_and_logprobs_reach_the_row():
    response = {"choices": [{"message": {"content": "Retail"}, "finish_reason": "length",
                             "logprobs": {"content": [{"logprob": -0.25}, {"logprob": -0.5}]}}],
                "usage": {"prompt_tokens": 10, "completion_tokens": 2}}
    row = read_response({"payload": {}, "http_response": response})
    assert (row["finish_reason"], row["generated_logprob"]) == ("length", -0.75)
    bare = read_response({"payload": {}, "http_response": {
        "choices": [{"message": {"content": "x"}, "finish_reason": "stop"}]}})
    assert bare["generated_logprob"] is None


def test_a_smoke_run_of_free_text_answers_has_no_stop_loss_unless_asked():
    # The random-weight model never ends a free-text answer: all would be "truncated".
    assert load_job_spec(load_job("vlm-caption"), smoke=True).stop_loss.failure_rate is None
    assert load_job_spec(load_job("vlm-caption"), smoke=True,
                         sets=["stop_loss.failure_rate=0.5"]).stop_loss.failure_rate == 0.5
    assert load_job_spec(load_job("vlm-caption")).stop_loss.failure_rate == 0.5
    # Choices end: a smoke run of text-industry keeps its stop-loss.
    assert load_job_spec(load_job("text-industry"), smoke=True).stop_loss.failure_rate == 0.5
