"""Quality gates as a user meets them: a run that fails on most rows stops early (exit
8), `toolkit retry` redoes only what failed, in place, exactly once per id, also
after a kill; checks are counted in progress, status and the summary.

Everything goes through the `toolkit` command in its own process, from a folder
that is not the checkout, reading the files it writes.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path

import pandas as pd
import pyarrow.parquet as pq
import pytest

from tests.docs.test_docs_commands import CHECKOUT, SHELL, Command, blocks, in_terminal, missing
from toolkit.spec.jobs.catalog import load_job
from toolkit.spec.loading import load_job_spec

TEXT_INDUSTRY_CHOICES = set(load_job_spec(load_job("text-industry")).output.choice)


def toolkit(*args: str, cwd: Path, timeout: float = 600) -> subprocess.CompletedProcess:
    return subprocess.run(["toolkit", *args], cwd=cwd, capture_output=True, text=True,
                          timeout=timeout, env={**os.environ, "RAY_ADDRESS": "",
                                                "TOOLKIT_PROGRESS_INTERVAL": "1"})


def test_a_run_cut_off_at_max_tokens_stops_early_and_retry_fixes_it_in_place(tmp_path):
    """docs/quality.md's session on a terminal: each command prints what the page shows
    (the docs test leaves these blocks to this test), and the files hold what it says."""
    samples, run, retry = [command for block in blocks(CHECKOUT / "docs" / "quality.md")
                           if block.language in SHELL for command in block.commands()]
    out = tmp_path / "out" / "text-industry"

    def as_the_page_shows(command: Command) -> None:
        printed, code = in_terminal(command.text, tmp_path)
        fails = any(line.startswith("Error:") for line in command.shown)
        assert (code != 0) == fails, "\n".join(printed[-40:])
        assert missing(command.shown, printed) == [], "\n".join(printed)

    as_the_page_shows(samples)
    as_the_page_shows(run)  # stopped early, exit 8, with the retry command to run
    first = pd.read_parquet(out)
    # How many rows land before the stop takes hold depends on the machine's pace (on a
    # busy one, all of them): what it wrote is kept, and every one of them failed.
    assert 0 < len(first) <= 1000
    assert (first["finish_reason"] == "length").all()
    assert first["error"].str.startswith("truncated: the answer was cut off at max_tokens=1").all()

    as_the_page_shows(retry)
    rows = pd.read_parquet(out)
    assert len(rows) == 1000 and rows["Index"].nunique() == 1000
    assert rows["error"].isna().all()
    assert set(rows["inferred_industry"]) <= TEXT_INDUSTRY_CHOICES
    assert (rows["finish_reason"] == "stop").all()
    assert rows["inferred_industry_confidence"].between(0, 1).all()
    summary = json.loads((out / "_summary.json").read_text())
    assert summary["rows_written"] == 1000 and summary["error_rows"] == 0
    assert summary["checks"]["truncated"] == {"failed": 0, "rate": 0.0}
    assert [a["attempt"] for a in summary["attempts"]] == [1, 2]
    assert summary["attempts"][1]["changed"] == ["sampling.max_tokens"]
    # Every row: the failed ones, those never reached, and any in a file the stop cut off.
    assert [a["rows"] for a in summary["attempts"]] == [1000, 1000]

    again = toolkit("retry", "out/text-industry", cwd=tmp_path)
    assert again.returncode == 0 and "Nothing to retry" in again.stdout


def test_a_run_too_short_to_stop_early_fails_the_stop_loss_at_its_end(tmp_path):
    # All 300 rows must be in before the stop-loss judges, so it can only judge
    # once they are all written: whenever it looks, the run fails with exit 8.
    failed = toolkit("run", "text-industry", "--smoke", "--rows", "300", "--set",
                     "sampling.max_tokens=1", "--set", "stop_loss.min_rows=300",
                     "--output", "out", cwd=tmp_path)

    assert failed.returncode == 8, failed.stderr[-2000:]
    assert "300 rows failed (100%), past the stop-loss of 50% after 300 rows" in failed.stderr
    assert "toolkit retry out --set sampling.max_tokens=16" in failed.stderr
    assert len(pd.read_parquet(tmp_path / "out")) == 300, "every row is kept"
    assert not (tmp_path / "out" / "_summary.json").exists(), "nor marked finished"


def test_the_stop_loss_can_be_switched_off(tmp_path):
    done = toolkit("run", "text-industry", "--smoke", "--rows", "300", "--set",
                   "sampling.max_tokens=1", "--set", "stop_loss.failure_rate=null",
                   "--output", "out", cwd=tmp_path)

    assert done.returncode == 0, done.stderr[-2000:]
    summary = json.loads((tmp_path / "out" / "_summary.json").read_text())
    assert summary["error_rows"] == 300 and summary["checks"]["truncated"]["failed"] == 300
    assert summary["finish_reasons"] == {"length": 300}
    assert "checks:        truncated 300" in done.stdout


def test_a_users_own_check_in_a_yaml_jobs_python_file(tmp_path):
    toolkit("new", "review-sentiment", cwd=tmp_path)
    job = tmp_path / "review-sentiment.yaml"
    job.write_text(job.read_text() + "checks:\n  custom: my_checks.py:not_negative\n")
    (tmp_path / "my_checks.py").write_text(
        "def not_negative(row):\n"
        "    return 'needs a look' if row['sentiment'] == 'negative' else None\n")

    done = toolkit("run", "review-sentiment", "--smoke", cwd=tmp_path)

    assert done.returncode == 0, done.stderr[-2000:]
    rows = pd.read_parquet(tmp_path / "out" / "review-sentiment")
    flagged = rows["failed_checks"].fillna("").str.contains("not_negative")
    assert flagged.tolist() == (rows["sentiment"] == "negative").tolist()
    summary = json.loads((tmp_path / "out" / "review-sentiment" / "_summary.json").read_text())
    assert summary["checks"]["not_negative"]["failed"] == int(flagged.sum())

    only = toolkit("retry", "out/review-sentiment", "--only", "not_negative", cwd=tmp_path)
    assert only.returncode == 0, only.stderr[-2000:]
    assert f"redoing {int(flagged.sum())} failed rows" in only.stdout
    again = pd.read_parquet(tmp_path / "out" / "review-sentiment")
    assert sorted(again["review_id"]) == sorted(rows["review_id"])


def test_a_check_outside_the_project_is_refused_before_anything_runs(tmp_path):
    toolkit("new", "review-sentiment", cwd=tmp_path)
    job = tmp_path / "review-sentiment.yaml"
    job.write_text(job.read_text() + "checks:\n  custom: /usr/lib/python3/dist-packages/x.py:f\n")

    refused = toolkit("run", "review-sentiment", "--smoke", cwd=tmp_path)

    assert refused.returncode == 2
    assert "checks.custom" in refused.stderr and "Traceback" not in refused.stderr


def test_retry_refuses_what_it_cannot_do(tmp_path):
    nothing = toolkit("retry", "nowhere", cwd=tmp_path)
    assert nothing.returncode == 2 and "holds no toolkit run" in nothing.stderr

    toolkit("run", "text-industry", "--smoke", "--rows", "20", "--output", "out", cwd=tmp_path)
    unknown = toolkit("retry", "out", "--only", "hallucinated", cwd=tmp_path)
    assert unknown.returncode == 2
    assert "not a check of this run" in unknown.stderr and "truncated" in unknown.stderr


def _part_files(out: Path, write_ids: set[str]) -> list[Path]:
    return [p for p in out.glob("part-*.parquet")
            if p.name.split("_")[0].removeprefix("part-") not in write_ids]


def test_a_killed_retry_resumes_and_every_id_is_written_once(tmp_path):
    out = tmp_path / "out"
    stopped = toolkit("run", "text-industry", "--smoke", "--rows", "2000", "--partitions", "40",
                      "--batch-size", "32", "--set", "sampling.max_tokens=1",
                      "--output", "out", cwd=tmp_path)
    assert stopped.returncode == 8, stopped.stderr[-2000:]
    before = set(json.loads((out / "_manifest.json").read_text())["write_ids"])

    retry = subprocess.Popen(
        ["toolkit", "retry", "out", "--set", "sampling.max_tokens=16"], cwd=tmp_path,
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        env={**os.environ, "RAY_ADDRESS": ""}, start_new_session=True)
    deadline = time.monotonic() + 240
    try:  # killed once the retry's own pipeline has written a few files
        while len(_part_files(out, before | _setup_write_ids(out))) < 3:
            assert retry.poll() is None, "the retry ended before it could be killed"
            assert time.monotonic() < deadline, "the retry wrote nothing in time"
            time.sleep(0.2)
    finally:
        os.killpg(retry.pid, signal.SIGKILL)
        retry.wait(timeout=30)
    time.sleep(3)  # a write task of the killed run may still be finishing its file

    resumed = toolkit("retry", "out", "--set", "sampling.max_tokens=16", cwd=tmp_path)

    assert resumed.returncode == 0, resumed.stderr[-2000:]
    assert "Resuming retry attempt 2" in resumed.stdout
    ids = pq.read_table(out, columns=["Index"])["Index"].to_pylist()
    assert len(ids) == 2000 and set(ids) == set(range(1, 2001))
    assert pd.read_parquet(out, columns=["error"])["error"].isna().all()


def _setup_write_ids(out: Path) -> set[str]:
    """The write id a retry's setup rewrites pruned files under (not the pipeline's)."""
    attempts = json.loads((out / "_manifest.json").read_text()).get("attempts", [])
    return {a["write_id"] for a in attempts if a.get("write_id")}


def test_a_retry_cut_short_while_it_rewrites_files_loses_no_row(tmp_path, monkeypatch):
    import toolkit.run.retry as retry

    done = toolkit("run", "text-industry", "--smoke", "--rows", "300", "--partitions", "6",
                   "--set", "sampling.max_tokens=1", "--set", "stop_loss.failure_rate=null",
                   "--output", "out", cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]
    monkeypatch.chdir(tmp_path)
    pruned = []
    real_prune = retry._prune

    def prune_then_die(*args, **kwargs):  # as a kill between two files would leave it
        if pruned:
            raise KeyboardInterrupt
        pruned.append(args[1])
        real_prune(*args, **kwargs)

    monkeypatch.setattr(retry, "_prune", prune_then_die)
    with pytest.raises(KeyboardInterrupt):
        retry.prepare_retry("out", ["sampling.max_tokens=16"])
    monkeypatch.setattr(retry, "_prune", real_prune)

    resumed = toolkit("retry", "out", "--set", "sampling.max_tokens=16", cwd=tmp_path)

    assert resumed.returncode == 0, resumed.stderr[-2000:]
    rows = pd.read_parquet(tmp_path / "out", columns=["Index", "error"])
    assert sorted(rows["Index"].astype(int)) == list(range(1, 301))
    assert rows["error"].isna().all()
