"""Progress of a run: counted from the files it wrote, rendered as one line, without sleeping."""

from __future__ import annotations

import io
import os
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.fs
import pyarrow.csv as pacsv
import pyarrow.parquet as pq
import pytest

from toolkit.run.output.run_directory import RUN_LOG_FILE, RunDirectory, RunState
from toolkit.run.progress.display import (
    LogWatcher,
    ProgressDisplay,
    format_progress,
    plain_interval,
    reporting,
)
from toolkit.run.progress.model import Progress, ProgressReporter, RowCounts, format_duration
from toolkit.run.progress.sources import WrittenRows, expected_rows
from toolkit.spec.jobs.catalog import load_job
from toolkit.spec.loading import load_job_spec

JOB = load_job("text-industry")


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class Counts:
    """A row counter the test moves by hand."""

    def __init__(self, rows: int = 0, errors: int = 0) -> None:
        self.rows, self.errors = rows, errors

    def __call__(self) -> tuple[int, int]:
        return self.rows, self.errors


def spec(output: Path, **overrides):
    return load_job_spec(JOB, smoke=True, overrides={"data.output": str(output), **overrides})


# -- formatting ------------------------------------------------------------------------

def progress(**fields) -> Progress:
    values = dict(rows_done=150, rows_total=300, error_rows=2, elapsed_seconds=21.4,
                  rows_per_second=12.34, eta_seconds=12.2)
    return Progress(**{**values, **fields})


def test_plain_line_says_rows_of_total_rate_eta_and_errors():
    assert format_progress(progress(), interactive=False) == (
        "Progress: 150/300 rows (50%), 12.3 rows/s, ETA 12s, 2 errors, 21s elapsed")
    assert format_progress(progress(rows_total=None, eta_seconds=None, error_rows=1),
                           interactive=False) == (
        "Progress: 150/? rows, 12.3 rows/s, 1 error, 21s elapsed")
    assert format_progress(progress(rows_done=300, eta_seconds=0.0, finished=True),
                           interactive=False) == (
        "Done: 300/300 rows (100%), 12.3 rows/s, 2 errors, 21s elapsed")
    assert format_progress(progress(rows_done=0, rows_per_second=0.0, eta_seconds=None),
                           interactive=False) == (
        "Progress: 0/300 rows (0%), 0.0 rows/s, ETA ?, 2 errors, 21s elapsed")


def test_before_the_first_row_the_line_says_what_the_run_is_doing():
    waiting = progress(rows_done=0, rows_per_second=0.0, eta_seconds=None, error_rows=0,
                       elapsed_seconds=3, phase="starting Ray")
    assert format_progress(waiting, interactive=False) == (
        "Progress: 0/300 rows (0%), starting Ray, 0 errors, 3s elapsed")
    assert format_progress(waiting, interactive=True, width=100) == (
        "[------------------------------]  0/300 rows  0%  starting Ray  0 errors  0:03")


def test_the_reporter_shows_the_phase_until_this_run_writes_a_row():
    clock, counts = FakeClock(), Counts(rows=40)  # a resumed run: 40 rows from before
    reporter = ProgressReporter(counts, total=100, clock=clock)
    reporter.phase = "starting Ray"
    assert reporter.poll().phase == "starting Ray"
    reporter.phase = "loading the model"
    clock.now += 5
    assert reporter.poll().phase == "loading the model"
    counts.rows = 48
    clock.now += 5
    assert reporter.poll().phase is None
    assert reporter.poll(finished=True).phase is None


def test_rows_per_second_count_from_when_rows_began_to_come():
    clock, counts = FakeClock(), Counts()
    reporter = ProgressReporter(counts, total=1000, clock=clock)
    reporter.phase = "starting Ray"
    reporter.poll()
    clock.now += 10  # still starting: no row yet
    reporter.poll()
    clock.now += 10
    counts.rows = 100
    later = reporter.poll()
    assert later.rows_per_second == 10.0 and later.elapsed_seconds == 20


def test_live_line_has_a_bar_and_fits_the_terminal():
    line = format_progress(progress(rows_done=1_500, rows_total=3_000, error_rows=0,
                                    elapsed_seconds=3725, eta_seconds=3725), interactive=True, width=100)
    assert line == ("[###############---------------]  1,500/3,000 rows  50%  12.3 rows/s  "
                    "ETA 1h 02m  0 errors  1:02:05")
    narrow = format_progress(progress(), interactive=True, width=40)
    assert len(narrow) <= 39 and narrow.startswith("150/300 rows")
    unknown = format_progress(progress(rows_total=None, eta_seconds=None), interactive=True, width=100)
    assert unknown.startswith("[??????????????????????????????]  150/? rows  12.3 rows/s  2 errors")


def test_durations():
    assert [format_duration(s) for s in (0, 42.4, 185, 7620)] == ["0s", "42s", "3m 05s", "2h 07m"]


def test_plain_interval_comes_from_the_environment():
    assert plain_interval({}) == 10.0
    assert plain_interval({"TOOLKIT_PROGRESS_INTERVAL": "0.5"}) == 0.5
    assert plain_interval({"TOOLKIT_PROGRESS_INTERVAL": "soon"}) == 10.0


# -- the reporter ----------------------------------------------------------------------

def test_reporter_measures_rate_and_eta_on_its_clock():
    clock, counts = FakeClock(), Counts()
    reporter = ProgressReporter(counts, total=1000, clock=clock)
    first = reporter.poll()
    assert (first.rows_done, first.rows_total, first.rows_per_second, first.eta_seconds) == (0, 1000, 0.0, None)

    clock.now += 20
    counts.rows, counts.errors = 250, 3
    later = reporter.poll()
    assert (later.rows_done, later.error_rows, later.elapsed_seconds) == (250, 3, 20)
    assert later.rows_per_second == 12.5 and later.eta_seconds == 60.0

    clock.now += 40
    counts.rows = 990  # the input had fewer rows than --rows: the end says what was written
    done = reporter.poll(finished=True)
    assert (done.rows_done, done.rows_total, done.eta_seconds, done.finished) == (990, 990, 0.0, True)


def test_a_resumed_run_counts_its_rate_from_the_rows_it_wrote():
    clock, counts = FakeClock(), Counts(rows=600)
    reporter = ProgressReporter(counts, total=1000, clock=clock)
    assert reporter.poll().rows_done == 600
    clock.now += 10
    counts.rows = 700
    assert reporter.poll().rows_per_second == 10.0


def test_total_is_computed_once_and_dropped_when_exceeded():
    calls = []
    counts = Counts()
    reporter = ProgressReporter(counts, total=lambda: calls.append(1) or 100, clock=FakeClock())
    reporter.poll()
    reporter.poll()
    assert calls == [1]
    counts.rows = 120  # more rows than expected: the estimate was wrong, not the files
    assert reporter.poll().rows_total is None


def test_an_unknown_total_is_asked_again_until_known():
    # An OpenAI batch file's requests are counted once staged, after progress began.
    staged: list[int] = []
    reporter = ProgressReporter(Counts(), total=lambda: staged[0] if staged else None,
                                clock=FakeClock())
    assert reporter.poll().rows_total is None
    staged.append(7)
    assert reporter.poll().rows_total == 7


def test_reporting_polls_in_the_background_and_ends_with_a_finished_look():
    seen: list[Progress] = []
    reporter = ProgressReporter(Counts(rows=5), total=5, clock=FakeClock())
    with reporting(reporter, seen.append, interval_s=3600):
        pass
    assert seen[-1].finished and seen[-1].rows_done == 5
    assert not any(p.finished for p in seen[:-1])

    seen.clear()
    with pytest.raises(RuntimeError), reporting(reporter, seen.append, interval_s=3600):
        raise RuntimeError("the run failed")
    assert not any(p.finished for p in seen)


# -- counting written files ------------------------------------------------------------

def result_table(rows: int, errors: int) -> pa.Table:
    return pa.table({
        "Index": [str(i) for i in range(rows)],
        "inferred_industry": ["Finance"] * (rows - errors) + [None] * errors,
        "error": [None] * (rows - errors) + ["preprocess: column 'Company' is empty"] * errors,
    })


def test_written_rows_come_from_parquet_footers_of_this_run_directory(tmp_path):
    run_dir = RunDirectory(str(tmp_path / "out"))
    assert run_dir.prepare(spec(tmp_path / "out"), overwrite=False, resumable=True) is RunState.EMPTY
    count = WrittenRows(run_dir, "parquet")
    assert count() == RowCounts(0, 0, 0)
    write_id = run_dir.begin_write()
    pq.write_table(result_table(40, 3), tmp_path / "out" / f"part-{write_id}_a_000000-0.parquet")
    pq.write_table(result_table(10, 0), tmp_path / "out" / f"part-{write_id}_a_000001-0.parquet")
    assert count() == RowCounts(50, 3, 3)
    # A file Ray is still writing has no footer yet: skipped until it is complete.
    partial = tmp_path / "out" / f"part-{write_id}_a_000002-0.parquet"
    partial.write_bytes(b"PAR1" + b"\0" * 100)
    assert count() == RowCounts(50, 3, 3)
    pq.write_table(result_table(7, 7), partial)
    assert count() == RowCounts(57, 10, 10)


def test_written_rows_of_csv_output(tmp_path):
    run_dir = RunDirectory(str(tmp_path / "out"))
    run_dir.prepare(spec(tmp_path / "out", **{"data.output_format": "csv"}),
                    overwrite=False, resumable=True)
    write_id = run_dir.begin_write()
    pacsv.write_csv(result_table(12, 5), tmp_path / "out" / f"part-{write_id}_a_000000-0.csv")
    assert WrittenRows(run_dir, "csv")() == RowCounts(12, 5, 5)


def test_expected_rows(tmp_path):
    assert expected_rows(spec(tmp_path / "o", **{"data.rows": 300})) == 300
    assert expected_rows(spec(tmp_path / "o")) is None  # samples without --rows
    pq.write_table(result_table(30, 0), tmp_path / "in.parquet")
    parquet = {"data.input": str(tmp_path / "in.parquet"), "data.format": "auto"}
    assert expected_rows(spec(tmp_path / "o", **parquet)) == 30  # from the footer
    (tmp_path / "in.csv").write_text("Index,Company\n1,Acme\n")
    csv = {"data.input": str(tmp_path / "in.csv"), "data.format": "auto"}
    assert expected_rows(spec(tmp_path / "o", **csv)) is None  # would need a full read


def test_the_log_file_belongs_to_the_run_directory(tmp_path):
    out = tmp_path / "out"
    run_dir = RunDirectory(str(out))
    assert run_dir.log_file == f"{out}/{RUN_LOG_FILE}"
    run_dir.prepare(spec(out), overwrite=False, resumable=True)
    run_dir.claim(RUN_LOG_FILE)  # as toolkit run records it, before Ray writes to it
    (out / "_logs").mkdir()
    (out / RUN_LOG_FILE).write_text("ray said things\n")
    assert run_dir.foreign_files(run_dir.read_manifest()) == []
    run_dir.prepare(spec(out), overwrite=True, resumable=True)
    assert not (out / RUN_LOG_FILE).exists()
    assert RunDirectory("s3://bucket/out", filesystem=pa.fs.LocalFileSystem()).log_file is None


# -- the display and the log watcher ---------------------------------------------------

def test_live_display_redraws_one_line_and_prints_messages_above_it():
    stream = io.StringIO()
    display = ProgressDisplay(stream, interactive=True, width=lambda: 200)
    display.show(progress(rows_done=0, eta_seconds=None))
    display.show(progress())
    display.message("Warning: something")
    display.show(progress(rows_done=300, eta_seconds=0.0, finished=True))
    text = stream.getvalue()
    assert text.count("\n") == 2  # the message and the end of the finished line
    assert "\r\x1b[KWarning: something\n" in text
    assert text.endswith("300/300 rows  100%  12.3 rows/s  2 errors  0:21\x1b[K\n")


def test_plain_display_prints_at_its_interval_and_always_the_end():
    stream, clock = io.StringIO(), FakeClock()
    display = ProgressDisplay(stream, interactive=False, plain_interval_s=10, clock=clock)
    for _ in range(5):  # 0, 3, 6, 9, 12 s
        display.show(progress())
        clock.now += 3
    display.show(progress(rows_done=300, finished=True))
    lines = stream.getvalue().splitlines()
    assert [line.split(":")[0] for line in lines] == ["Progress", "Done"]


def test_log_watcher_says_each_kind_of_trouble_once_in_our_words(tmp_path):
    log = tmp_path / "run.log"
    log.write_text("(raylet) 1 worker(s) were killed due to the node running low on memory.\n")
    watcher = LogWatcher(str(log))  # what an earlier run wrote is not news
    assert watcher.new_notices() == []
    with log.open("a") as f:
        f.write("INFO all is well\n(raylet) 2 worker(s) were killed due to the node running low"
                " on memory. More\nA worker died or was killed while executing a task")
    notices = watcher.new_notices()
    assert len(notices) == 1 and "ran low on memory" in notices[0]
    with log.open("a") as f:  # the line above is complete only now
        f.write(" by an unexpected system error.\n1 worker(s) were killed due to the node "
                "running low on memory.\n")
    assert watcher.new_notices() == ["a Ray worker process died; Ray restarts it and retries "
                                     "its rows."]


def test_a_run_says_what_it_does_from_the_first_second(tmp_path):
    """Through the CLI, as a user sees it in a log (stderr not a terminal)."""
    env = {**os.environ, "TOOLKIT_PROGRESS_INTERVAL": "0.5"}
    env.pop("RAY_ADDRESS", None)
    result = subprocess.run(
        [str(Path(sys.executable).parent / "toolkit"), "run", "text-industry", "--smoke",
         "--rows", "50", "--output", str(tmp_path / "out")],
        capture_output=True, text=True, env=env, cwd=tmp_path, timeout=300)
    assert result.returncode == 0, result.stderr
    lines = [line for line in result.stderr.splitlines() if line.startswith("Progress: ")]
    phases = [line.split(", ")[1] for line in lines if line.startswith("Progress: 0/50 rows")]
    assert phases[0] == "starting Ray"
    assert "loading the model" in phases
    # In the order the run goes through them, and never back.
    order = ["starting Ray", "reading the input", "loading the model"]
    seen = [order.index(phase) for phase in phases]
    assert seen == sorted(seen)
    assert "Done: 50/50 rows (100%)" in result.stderr
