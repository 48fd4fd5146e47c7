"""Following a submitted job as a user does: what `logs --follow`, Ctrl-C and `status` show.

The first tests need no cluster: the toolkit's marked lines written and read back,
the ETA on a hand-driven clock, an ended job's results from a fake status. The
rest run the real `toolkit` command in a subprocess against the session's local
Ray head (smoke jobs) and assert what lands on the terminal: only the toolkit's
own lines by default, Ray's with --raw, the keeps-running message on Ctrl-C.
"""

from __future__ import annotations

import io
import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from watch_only_backend import WatchOnlyBackend

from toolkit.cluster.backends.base import JobInfo, JobStatus
from toolkit.cluster.backends.local_head import LocalHead
from toolkit.run.progress.job_log import (
    JobLogWriter,
    LogFilter,
    ToolkitLine,
    format_progress_line,
    parse_progress_line,
    parse_resources_line,
)
from toolkit.run.progress.watched_job import (
    RATE_WINDOW_S,
    JobObserver,
    ProgressWatcher,
    WatchOptions,
    watch_job,
)
from toolkit.cluster.job_results import job_results
from toolkit.run.progress.following import Clock, ctrl_c_noticed
from toolkit.run.output.summary import RunSummary
from toolkit.run.progress.model import Progress

TOOLKIT = str(Path(sys.executable).parent / "toolkit")

#: Lines of Ray Data's operator progress block and other Ray output, as the driver
#: log of a smoke job holds them.
RAY_OUTPUT = """\
2026-11-26 04:26:31,576\tINFO job_manager.py:581 -- Runtime env is setting up.
Running entrypoint for job raysubmit_x: python -m toolkit.cli.entrypoint --job j --spec s
Ray Dashboard: http://127.0.0.1:33079
2026-11-26 04:26:34,879\tINFO logging_progress.py:174 -- ======= Running Dataset: dataset_0 =======
2026-11-26 04:26:34,879\tINFO logging_progress.py:225 -- Total Progress: 0/?
2026-11-26 04:26:34,879\tINFO logging_progress.py:231 -- ReadSampleCustomers: 0/1
2026-11-26 04:26:34,879\tINFO logging_progress.py:233 --   Tasks: 1; Actors: 0; Queued blocks: 0
(MapWorker(Map(prepare_row)->MapBatches(TransformersChatEngine)) pid=11887) engine: model loaded
"""

#: What identifies Ray's output in what a follower shows (none of it may show by default).
RAY_SIGNS = ("logging_progress", "Running Dataset", "streaming_executor", "Tasks:",
             "MapWorker", "job_manager.py", "Runtime env", "[toolkit]")


# --- the toolkit's lines in a job's log ---------------------------------------------


def test_the_toolkits_lines_are_marked_and_a_follower_shows_only_them() -> None:
    out, err = io.StringIO(), io.StringIO()
    log = JobLogWriter(out, err)
    log.phase("starting")
    log.phase("loading the model")
    log.progress(format_progress_line(0, 200, 0.0, phase=log.phase_now))
    log.resources("waiting for 1 GPU (L4) for engine: no node has one.")
    log.progress(format_progress_line(64, 200, 6.4))
    log.summary("Job text-industry finished in 11.8 s (16.9 rows/s).\n"
                "  rows written:  200 (200 ok, 0 with an error)")
    log.error("The output holds files this toolkit did not write.", "Pass another --output.")
    assert out.getvalue().splitlines()[:3] == [
        "[toolkit] phase: starting",
        "[toolkit] phase: loading the model",
        "[toolkit] progress: rows_done=0 rows_total=200 rows_per_second=0.0 "
        "phase=loading the model",
    ]
    assert err.getvalue() == ("[toolkit] error: The output holds files this toolkit did not "
                              "write.\n[toolkit] hint: Pass another --output.\n")
    # Ray's lines and ours interleaved, cut into chunks mid-line as the log grows.
    ours = out.getvalue().splitlines(keepends=True)
    text = RAY_OUTPUT + "".join(ours[:3]) + RAY_OUTPUT + "".join(ours[3:]) + err.getvalue()
    follower = LogFilter()
    shown: list[ToolkitLine] = []
    phases = []
    for start in range(0, len(text), 37):
        shown += follower.feed(text[start:start + 37])
        phases.append(follower.phase)
    shown += follower.end()

    assert [line.shown() for line in shown] == [
        "Warning: waiting for 1 GPU (L4) for engine: no node has one.",
        "Job text-industry finished in 11.8 s (16.9 rows/s).",
        "  rows written:  200 (200 ok, 0 with an error)",
        "Error: The output holds files this toolkit did not write.",
        "Hint: Pass another --output.",
    ]
    assert "loading the model" in phases and follower.phase is None  # rows came: no phase
    assert follower.progress == Progress(64, 200, 6.4, round(136 / 6.4, 1), source="log")
    assert follower.saw_error
    assert follower.finished  # the summary is out: no progress line after it
    # `toolkit status` reads the same lines out of the whole log.
    assert parse_progress_line(text).rows_done == 64
    assert parse_resources_line(text).startswith("waiting for 1 GPU (L4)")


def test_logs_of_jobs_from_before_the_marker_still_parse() -> None:
    old = RAY_OUTPUT + "progress: rows_done=900 rows_total=3000 rows_per_second=30.0\n"
    assert parse_progress_line(old) == Progress(900, 3000, 30.0, 70.0, source="log")
    follower = LogFilter()
    assert follower.feed(old + "resources: waiting for 1 GPU\n") == [
        ToolkitLine("resources", "waiting for 1 GPU")]
    assert follower.progress.rows_done == 900


def test_ray_events_a_user_must_hear_about_are_said_once_in_our_words() -> None:
    follower = LogFilter()
    shown = follower.feed("(raylet) Task was killed due to memory pressure\n" * 3)
    assert [line.text for line in shown] == [
        "Ray killed a worker because this machine ran low on memory; Ray Data retries its "
        "rows, but if this repeats, lower --batch-size or --concurrency."]


class FailingBackend(WatchOnlyBackend):
    """A job that runs once, then FAILED with nothing of the toolkit's in its log."""

    def __init__(self) -> None:
        self.polls = 0

    def status(self, job_id: str) -> JobInfo:
        self.polls += 1
        status = JobStatus.RUNNING if self.polls == 1 else JobStatus.FAILED
        return JobInfo(backend=self.name, job_id=job_id, status=status)

    def logs(self, job_id: str) -> str:
        return RAY_OUTPUT + "pip: No matching distribution found for vllm==99\n"


def test_a_job_that_fails_without_an_error_of_its_own_shows_the_end_of_its_log() -> None:
    shown: list[ToolkitLine] = []
    now = [0.0]
    class Shown(JobObserver):
        reads_log = "lines"

        def line(self, line: ToolkitLine) -> None:
            shown.append(line)

    info = watch_job(FailingBackend(), "raysubmit_f", Shown(), WatchOptions(flags=" --address x"),
                     read=lambda: None,
                     clock=Clock(now=lambda: now[0], sleep=lambda s: now.__setitem__(0, now[0] + s)))
    assert info.status == JobStatus.FAILED
    assert shown[0].shown() == ("The job printed no error of its own; its log ends with "
                                "(`toolkit logs raysubmit_f --address x` shows all of it):")
    assert shown[-1].shown() == "pip: No matching distribution found for vllm==99"


class InterruptedWhileCollected:
    """Ctrl-C lands while the garbage collector finalizes this object."""

    def __del__(self) -> None:
        os.kill(os.getpid(), signal.SIGINT)


def test_a_ctrl_c_that_python_drops_in_a_finalizer_still_stops_the_follow(
        monkeypatch: pytest.MonkeyPatch) -> None:
    printed: list[object] = []  # what Python would print as "Exception ignored in ..."
    monkeypatch.setattr(sys, "unraisablehook", printed.append)
    before = signal.getsignal(signal.SIGINT)
    slept: list[float] = []
    with ctrl_c_noticed(Clock(now=time.monotonic, sleep=slept.append)) as clock:
        clock.sleep(1)
        InterruptedWhileCollected()  # dropped by Python: not printed, but noticed
        with pytest.raises(KeyboardInterrupt):
            clock.sleep(1)
    assert slept == [1]
    assert printed == []
    assert signal.getsignal(signal.SIGINT) is before
    assert sys.unraisablehook == printed.append


# --- the ETA follows the recent rate --------------------------------------------------


class HandClock:
    def __init__(self) -> None:
        self.now = 0.0

    def clock(self) -> Clock:
        return Clock(now=lambda: self.now, sleep=lambda s: None)


def test_the_eta_follows_the_recent_rate_not_the_average_since_the_start() -> None:
    """A job loads its model for 10 minutes, writes 10 rows/s for 10 minutes, then 40
    rows/s (more workers came up). The ETA is rows left at the rate of the last
    RATE_WINDOW_S, counted from the last look before rows came: right from the first
    rows, and again shortly after the rate changed."""
    total = 60_000
    rows = [0]
    phase = ["loading the model"]
    clock = HandClock()
    reports: list[tuple[float, Progress]] = []
    watcher = ProgressWatcher(
        "j", lambda: Progress(rows[0], total, source="output"),
        on_progress=lambda p: reports.append((clock.now, p)), on_stall=lambda m: None,
        report_interval_s=60, clock=clock.clock(), phase=lambda: phase[0])
    running = JobInfo(backend="fake", job_id="j", status=JobStatus.RUNNING)

    def run_until(t: float, rate: float) -> Progress:
        while clock.now < t:
            clock.now += 5
            rows[0] += int(rate * 5)
            watcher(running)
        assert watcher.latest is not None
        return watcher.latest

    watcher(running)
    loading = run_until(600, 0)
    assert (loading.rows_done, loading.phase, loading.eta_seconds) == (0, "loading the model",
                                                                       None)
    first = run_until(630, 10)  # 30 s after rows came: 300 rows
    assert first.phase is None
    assert first.rows_per_second == 10.0  # not 300 rows / 630 s = 0.5
    assert first.eta_seconds == (total - 300) / 10.0
    steady = run_until(1200, 10)
    assert (steady.rows_done, steady.rows_per_second) == (6000, 10.0)
    assert steady.eta_seconds == 5400.0
    faster = run_until(1200 + RATE_WINDOW_S, 40)  # one window at the new rate
    assert faster.rows_per_second == 40.0
    assert faster.eta_seconds == (total - faster.rows_done) / 40.0
    # An average since the job started (model loading included) would say 8.2 rows/s
    # here, and an ETA five times too long.
    average = faster.rows_done / clock.now
    assert (total - faster.rows_done) / average > 4 * faster.eta_seconds
    # The phase went out with the first report; the first rows at once, not a minute later.
    assert reports[0] == (0.0, Progress(0, total, None, None, source="output",
                                        phase="loading the model"))
    when, landed = next((when, p) for when, p in reports if p.phase is None)
    assert when == 605.0
    # The first file's 50 rows were computed over a time the follower can't see:
    # no rate (and no ETA) until more rows land.
    assert (landed.rows_done, landed.rows_per_second, landed.eta_seconds) == (50, None, None)


def test_rows_an_overwrite_clears_are_not_this_runs_and_bursts_are_no_rate() -> None:
    """--overwrite: the follower first sees the earlier run's 3,000 rows, then none
    while the model loads, then this run's. Its rate counts from this run's first rows
    and waits RATE_MIN_SPAN_S (files land in bursts)."""
    rows = [3000]
    clock = HandClock()
    watcher = ProgressWatcher("j", lambda: Progress(rows[0], 3000, source="output"),
                              on_progress=lambda p: None, on_stall=lambda m: None,
                              sample_interval_s=0, clock=clock.clock(),
                              phase=lambda: "loading the model")
    running = JobInfo(backend="fake", job_id="j", status=JobStatus.RUNNING)
    for when, count in [(0, 3000), (1, 0), (60, 0), (61, 400), (62, 1000), (63, 1000)]:
        clock.now, rows[0] = when, count
        watcher(running)
        if when == 60:
            assert watcher.latest.phase == "loading the model"  # not a rate: still loading
    assert (watcher.latest.rows_per_second, watcher.latest.eta_seconds) == (None, None)
    for when in range(64, 72):
        clock.now, rows[0] = when, rows[0] + 100
        watcher(running)
    # 1,400 rows from t=61 (400) to t=71 (1,800): 140 rows/s, not 1,800 over 71 s.
    assert (watcher.latest.rows_per_second, watcher.latest.eta_seconds) == (140.0, 8.6)


# --- an ended job's results -------------------------------------------------------------


def ended(output: str | None, status: JobStatus = JobStatus.SUCCEEDED) -> JobInfo:
    return JobInfo(backend="fake", job_id="j", status=status, output=output)


def test_results_that_cant_be_read_from_here_say_why_in_one_line(tmp_path: Path) -> None:
    def unreadable(output: str) -> RunSummary | None:
        raise OSError("AWS Error ACCESS_DENIED during HeadObject operation:\nno credentials")

    assert job_results(ended("out/industry")).as_json() == {
        "output": "out/industry", "summary": None, "report": None,
        "summary_note": "not readable from here: out/industry is relative to the job's "
                        "working dir on the cluster"}
    assert job_results(ended("/mnt/cluster_storage/x")).summary_note == (
        "not readable from here: /mnt/cluster_storage/x is not on this machine (a path on "
        "the cluster's nodes)")
    assert job_results(ended("s3://bucket/x"), read=unreadable).summary_note == (
        "not readable from here: AWS Error ACCESS_DENIED during HeadObject operation: "
        "no credentials")
    assert job_results(ended(str(tmp_path), JobStatus.FAILED)).summary_note == (
        "none: the run ended before writing it")
    running = JobInfo(backend="fake", job_id="j", status=JobStatus.RUNNING, output="/x")
    assert job_results(running).as_json() == {
        "output": "/x", "summary": None, "report": None, "summary_note": None}


# --- the real command against a local Ray head ----------------------------------------


def toolkit(*args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    done = subprocess.run([TOOLKIT, *args], capture_output=True, text=True, timeout=timeout,
                          check=False)
    print(done.stdout, done.stderr)  # shown when a test fails
    return done


def status_json(job_id: str) -> dict:
    done = toolkit("status", job_id, "--address", "local", "--output", "json")
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


@pytest.fixture(scope="module")
def followed(ray_head: LocalHead, tmp_path_factory: pytest.TempPathFactory):
    """`toolkit submit text-industry --smoke --rows 3000 --address local --follow`, in 30
    partitions so rows land file by file for several seconds while it is followed (200
    rows land in one file, too fast for a rate); progress reported at every sample."""
    output = tmp_path_factory.mktemp("followed") / "out"
    env = {**os.environ, "TOOLKIT_PROGRESS_INTERVAL": "1"}
    done = subprocess.run(
        [TOOLKIT, "submit", "text-industry", "--smoke", "--rows", "3000", "--partitions", "30",
         "--output", str(output), "--address", "local", "--follow"],
        capture_output=True, text=True, timeout=600, check=False, env=env)
    print(done.stdout, done.stderr)
    return done, done.stdout.splitlines()[0] if done.stdout else "", output


def test_follow_shows_the_toolkits_lines_in_one_format_and_none_of_rays(followed) -> None:
    done, job_id, output = followed
    assert done.returncode == 0, done.stderr
    assert job_id.startswith("raysubmit_")
    seen = done.stdout + done.stderr
    assert not [sign for sign in RAY_SIGNS if sign in seen], seen
    progress = [line for line in done.stderr.splitlines() if line.startswith("Progress: ")]
    # Before rows come, what the job is doing; then rows, rows/s and the ETA.
    assert any(re.fullmatch(r"Progress: 0/(\?|3,000) rows.*, (starting|reading the input|"
                            r"loading the model)(, 0 errors)?", line) for line in progress), progress
    assert any(re.match(r"Progress: [1-9][\d,]*/3,000 rows \(\d+%\), [\d.]+ rows/s, ETA \S+", line)
               for line in progress), progress
    assert not [line for line in done.stderr.splitlines() if line.startswith("progress:")]
    # The run's summary, from its log, as the run printed it.
    assert "Job text-industry finished in " in done.stdout
    assert "  rows written:  3,000 (3,000 ok, 0 with an error)\n" in done.stdout
    assert f"  output:        {output} (summary in _summary.json)\n" in done.stdout
    assert f"Job {job_id} SUCCEEDED in " in done.stderr


def test_raw_shows_the_whole_log_and_plain_logs_is_the_record(followed) -> None:
    _, job_id, _ = followed
    raw = toolkit("logs", job_id, "--address", "local", "--follow", "--raw")
    assert raw.returncode == 0, raw.stderr
    assert "logging_progress" in raw.stdout and "Running Dataset" in raw.stdout
    assert "[toolkit] summary:   rows written:  3,000 (3,000 ok, 0 with an error)" in raw.stdout
    assert toolkit("logs", job_id, "--address", "local", "-f", "-v").stdout == raw.stdout
    record = toolkit("logs", job_id, "--address", "local")
    assert record.stdout == raw.stdout  # without --follow: the whole log, as recorded

    again = toolkit("logs", job_id, "--address", "local", "--follow")
    assert again.returncode == 0
    assert not [sign for sign in RAY_SIGNS if sign in again.stdout + again.stderr]
    assert "  rows written:  3,000 (3,000 ok, 0 with an error)\n" in again.stdout


def test_status_shows_where_the_results_are_the_summary_and_the_report(followed) -> None:
    _, job_id, output = followed
    done = toolkit("status", job_id, "--address", "local")
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith(f"Job {job_id}: SUCCEEDED\n")
    assert f"  output:     {output}\n" in done.stdout
    assert f"  report:     {output}/_report.html\n" in done.stdout
    assert (output / "_report.html").is_file()
    assert "  rows in:       3,000\n" in done.stdout
    assert "  rows written:  3,000 (3,000 ok, 0 with an error)\n" in done.stdout
    assert "  checks:        truncated 0, empty 0, invalid 0" in done.stdout
    payload = status_json(job_id)
    assert payload["output"] == str(output)
    assert payload["report"] == f"{output}/_report.html"
    assert payload["summary"]["rows_in"] == payload["summary"]["rows_written"] == 3000
    assert payload["summary"]["error_rows"] == 0
    assert payload["summary_note"] is None


@pytest.mark.parametrize("interrupt_when", ["is RUNNING.", "Following its logs"])
def test_ctrl_c_stops_following_and_the_job_keeps_running(
        interrupt_when: str, ray_head: LocalHead, tmp_path: Path) -> None:
    """SIGINT, as Ctrl-C sends it, once the job runs, and as the follow begins (it was
    still importing its modules, and click said `Aborted!`)."""
    err_file = tmp_path / "stderr.txt"
    with err_file.open("w") as err:
        follower = subprocess.Popen(
            [TOOLKIT, "submit", "text-industry", "--smoke", "--rows", "200",
             "--output", str(tmp_path / "out"), "--address", "local", "--follow"],
            stdout=subprocess.PIPE, stderr=err, text=True)
    try:
        deadline = time.monotonic() + 120
        while interrupt_when not in err_file.read_text():
            assert follower.poll() is None, err_file.read_text()
            assert time.monotonic() < deadline, err_file.read_text()
            time.sleep(0.05)
        follower.send_signal(signal.SIGINT)
        stdout, _ = follower.communicate(timeout=60)
    finally:
        follower.kill()
    stderr = err_file.read_text()
    print(stderr)
    job_id = stdout.splitlines()[0]
    assert follower.returncode == 130
    assert stderr.endswith(
        f"Stopped following: job {job_id} keeps running on the cluster.\n"
        f"Watch it again: toolkit logs {job_id} --follow --address local\n"
        f"Stop it: toolkit stop {job_id} --address local\n")
    assert "Aborted!" not in stderr and "Traceback" not in stderr

    deadline = time.monotonic() + 240
    while (payload := status_json(job_id))["status"] in ("PENDING", "RUNNING"):
        assert time.monotonic() < deadline, payload
        time.sleep(2)
    assert payload["status"] == "SUCCEEDED"
    assert payload["summary"]["rows_written"] == 200
