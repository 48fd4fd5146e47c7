"""Progress of submitted jobs: rows done, rows/s, ETA and stalls, read from what the job writes.

The first tests need no cluster: a fake Backend, a real run directory on disk
whose row count the test controls, and a hand-driven clock (nothing sleeps).
The last one submits a real smoke job to the session's local Ray head.
"""

from __future__ import annotations

import json
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pyarrow as pa
import pyarrow.dataset as pads
import pyarrow.parquet as pq
import pytest
from watch_only_backend import WatchOnlyBackend
from click.testing import CliRunner, Result

from toolkit.cli.main import main
from toolkit.cluster.backends.base import Backend, JobInfo, JobStatus
from toolkit.run.progress.watched_job import (
    JobObserver,
    ProgressWatcher,
    WatchOptions,
    format_progress_line,
    job_progress,
    parse_progress_line,
    report_progress,
    watch_job,
)
from toolkit.run.progress.following import Clock
from toolkit.errors import JobStalledError
from toolkit.run.output.run_directory import RunDirectory
from toolkit.run.output.summary import RunSummary
from toolkit.run.progress.model import Progress
from toolkit.run.progress.sources import OutputRows
from toolkit.spec.jobs.catalog import load_job
from toolkit.spec.loading import load_job_spec

STARTED = datetime(2026, 1, 1, 12, 0, 0, tzinfo=timezone.utc)


class FakeClock:
    def __init__(self, on_sleep=None) -> None:
        self.now = 0.0
        self.on_sleep = on_sleep

    def clock(self) -> Clock:
        return Clock(now=lambda: self.now, sleep=self._sleep)

    def _sleep(self, seconds: float) -> None:
        self.now += seconds
        if self.on_sleep is not None:
            self.on_sleep(self.now)


class RunningBackend(WatchOnlyBackend):
    """A Backend whose one job keeps RUNNING, writing into ``output``."""

    def __init__(self, output: str | None, log: str = "") -> None:
        self.output = output
        self.log = log

    def status(self, job_id: str) -> JobInfo:
        return JobInfo(backend=self.name, job_id=job_id, status=JobStatus.RUNNING,
                       start_time=STARTED, output=self.output)

    def logs(self, job_id: str) -> str:
        return self.log


class GrowingRunDirectory:
    """A real run directory (manifest of a 5,000-row run) the test adds result files to."""

    def __init__(self, root: Path, **overrides: str) -> None:
        self.root = root
        job = load_job("text-industry")
        self.spec = load_job_spec(job, smoke=True, overrides={
            "data.output": str(root), "data.rows": "5000", **overrides})
        self.run_dir = RunDirectory(str(root))
        self.run_dir.prepare(self.spec, overwrite=False, resumable=True)
        self.write_id = self.run_dir.begin_write()
        self.files = 0

    def add(self, rows: int, errors: int = 0) -> None:
        table = pa.table({"Index": list(range(rows)),
                          "error": [None] * (rows - errors) + ["preprocess: empty"] * errors})
        pq.write_table(table, self.root / f"part-{self.write_id}_x_{self.files:06d}-0.parquet")
        self.files += 1

    def add_half_written(self) -> None:
        (self.root / f"part-{self.write_id}_x_{self.files:06d}-0.parquet").write_bytes(b"PAR1\x00")
        self.files += 1


def test_the_progress_line_is_stable_and_parses_back() -> None:
    line = format_progress_line(1200, 5000, 41.25)
    assert line == "progress: rows_done=1200 rows_total=5000 rows_per_second=41.2"
    log = "\n".join(["Ray Dashboard: http://x", format_progress_line(0, None, None), line, "..."])
    assert parse_progress_line(log) == Progress(1200, 5000, 41.2, round(3800 / 41.2, 1),
                                                source="log")
    assert parse_progress_line("no progress here\n") is None
    assert format_progress_line(7, None, None) == (
        "progress: rows_done=7 rows_total=unknown rows_per_second=unknown")


def test_rows_are_counted_from_complete_result_files_only(tmp_path: Path) -> None:
    out = GrowingRunDirectory(tmp_path / "out")
    counter = OutputRows(str(out.root))
    assert counter.read().rows_done == 0
    out.add(300)
    out.add_half_written()  # still being written: no footer yet, skipped
    out.add(200)
    (out.root / "notes.txt").write_text("not the toolkit's")
    written = counter.read()
    assert (written.rows_done, written.rows_total) == (500, 5000)
    assert OutputRows(str(tmp_path / "nothing-there")).read() is None


def test_the_entrypoint_prints_progress_lines_from_a_thread(tmp_path: Path) -> None:
    out = GrowingRunDirectory(tmp_path / "out")
    out.add(300)
    lines: list[str] = []
    stop = report_progress(str(out.root), 5000, interval_s=0.01, emit=lines.append)
    try:
        deadline = time.monotonic() + 10
        while not lines:
            assert time.monotonic() < deadline
            time.sleep(0.01)
    finally:
        stop()
    assert lines[0].startswith("progress: rows_done=300 rows_total=5000 rows_per_second=")
    assert parse_progress_line("\n".join(lines)).rows_done == 300


def test_status_of_a_running_job_reads_the_run_directory(tmp_path: Path) -> None:
    out = GrowingRunDirectory(tmp_path / "out")
    out.add(1000)
    info = RunningBackend(str(out.root)).status("j")
    progress = job_progress(info, now=STARTED + timedelta(seconds=50))
    # 1,000 rows in 50 s since the job started: 20 rows/s, 4,000 rows left.
    assert progress == Progress(1000, 5000, 20.0, 200.0, source="output", error_rows=0,
                                elapsed_seconds=50.0)
    assert progress.describe() == "1,000 / 5,000 rows (20%), 20.0 rows/s, ETA 3m 20s"


def test_status_shows_each_checks_failures_from_the_run_directory(tmp_path: Path) -> None:
    out = GrowingRunDirectory(tmp_path / "out")
    table = pa.table({"Index": list(range(400)),
                      "failed_checks": ["truncated"] * 300 + [None] * 100,
                      "error": ["truncated: ..."] * 300 + [None] * 100})
    pq.write_table(table, out.root / f"part-{out.write_id}_x_000000-0.parquet")
    info = RunningBackend(str(out.root)).status("j")

    progress = job_progress(info, now=STARTED + timedelta(seconds=20))

    assert progress.checks == (("truncated", 300),)
    assert progress.describe().endswith("failed checks: truncated 300 (75%)")
    assert progress.as_json()["checks"] == {"truncated": 300}


def test_status_falls_back_to_the_jobs_progress_lines(tmp_path: Path) -> None:
    # A relative output is relative to the job's working dir on the cluster: not read here.
    backend = RunningBackend("out/text-industry", log=format_progress_line(900, 3000, 30.0))
    progress = job_progress(backend.status("j"), logs=lambda: backend.logs("j"))
    assert progress == Progress(900, 3000, 30.0, 70.0, source="log")
    assert job_progress(RunningBackend(None).status("j"), logs=lambda: "") == Progress()


def test_finished_job_rows_done_are_the_rows_written() -> None:
    summary = RunSummary(job="text-industry", output="/o", rows_in=200, rows_written=200,
                         rows_ok=200, error_rows=0, seconds=10.0, rows_per_second=20.0,
                         smoke=True)
    info = JobInfo(backend="fake", job_id="j", status=JobStatus.SUCCEEDED, start_time=STARTED,
                   end_time=STARTED + timedelta(seconds=12), output="/o")
    assert job_progress(info, summary=summary).as_json() == {
        "rows_done": 200, "rows_total": 200, "rows_per_second": 20.0, "eta_seconds": 0.0,
        "source": "summary", "checks": {}}


def test_one_progress_model_from_a_run_directory_to_both_displays(tmp_path: Path) -> None:
    """A local run and a watched job read the same run directory into the same
    Progress, with the row total from the same function; every display takes it."""
    import toolkit.run.progress.watched_job as cluster_progress
    from toolkit.run.progress.display import format_progress
    from toolkit.run.progress.model import ProgressReporter
    from toolkit.run.progress.sources import WrittenRows, expected_rows

    assert cluster_progress.Progress is Progress  # one class, from the run layer
    out = GrowingRunDirectory(tmp_path / "out")
    now = [0.0]
    local = ProgressReporter(WrittenRows(out.run_dir, "parquet"),
                             total=lambda: expected_rows(out.spec), clock=lambda: now[0])
    local.poll()
    out.add(1000, errors=3)
    now[0] = 50.0
    run = local.poll()
    watched = job_progress(RunningBackend(str(out.root)).status("j"),
                           now=STARTED + timedelta(seconds=50))
    assert type(run) is type(watched) is Progress
    assert run == watched == Progress(
        1000, 5000, 20.0, 200.0, source="output", error_rows=3, elapsed_seconds=50.0)
    line = "Progress: 1,000/5,000 rows (20%), 20.0 rows/s, ETA 3m 20s, 3 errors, 50s elapsed"
    assert format_progress(run, interactive=False) == line  # toolkit run's plain line
    assert format_progress(watched, interactive=False) == line
    assert run.describe() == watched.describe() == (  # toolkit status / --follow
        "1,000 / 5,000 rows (20%), 20.0 rows/s, ETA 3m 20s")
    assert format_progress_line(watched.rows_done, watched.rows_total,
                                watched.rows_per_second) == (  # the entrypoint's log line
        "progress: rows_done=1000 rows_total=5000 rows_per_second=20.0")


def test_the_row_total_is_one_function_for_local_runs_and_watchers(tmp_path: Path) -> None:
    """expected_rows takes the spec or a manifest's JSON of it: a sample input's default
    (once known only to watchers) and a Parquet input's footers (once only to local runs)."""
    from toolkit.run.progress.sources import expected_rows
    from toolkit.samples.provider import SAMPLES

    sample = GrowingRunDirectory(tmp_path / "sample", **{"data.rows": "all"})
    assert expected_rows(sample.spec) is None  # sample defaults are injected, not known
    assert expected_rows(sample.spec, SAMPLES.default_rows) == 1000
    assert OutputRows(str(sample.root), SAMPLES.default_rows).read().rows_total == 1000

    pq.write_table(pa.table({"Index": list(range(30))}), tmp_path / "in.parquet")
    parquet = GrowingRunDirectory(tmp_path / "parquet", **{
        "data.rows": "all", "data.input": str(tmp_path / "in.parquet"), "data.format": "auto"})
    manifest = parquet.run_dir.read_manifest().spec
    assert expected_rows(parquet.spec) == expected_rows(manifest) == 30
    assert OutputRows(str(parquet.root)).read().rows_total == 30
    # A relative input is relative to the job's working dir on the cluster: not read here.
    relative = {**manifest, "data": {**manifest["data"], "input": "in.parquet"}}
    assert expected_rows(relative, inputs_here=False) is None


def follow_growing_then_stalled(tmp_path: Path, **kwargs):
    """Follow a job that writes 500 rows every 10 s until t=60 s (3,000 rows), then nothing.

    The fake backend is polled every 2 s; progress is sampled every 5 s (so at
    t=0, 6, 12, ...), reported once a minute, and the stall timeout is 120 s.
    """
    out = GrowingRunDirectory(tmp_path / "out")

    def write(now: float) -> None:
        if now <= 60 and now % 10 == 0:
            out.add(500)

    fake = FakeClock(on_sleep=write)
    reports: list[tuple[float, Progress]] = []
    warnings: list[tuple[float, str]] = []
    backend = RunningBackend(str(out.root))
    assert isinstance(backend, Backend)
    class Watched(JobObserver):
        def progress(self, progress: Progress) -> None:
            reports.append((fake.now, progress))

        def stall(self, message: str) -> None:
            warnings.append((fake.now, message))

    options = WatchOptions(timeout_s=300, stall_timeout_s=120, report_interval_s=60, **kwargs)
    return fake, reports, warnings, lambda: watch_job(backend, "job-9", Watched(), options,
                                                      clock=fake.clock())


def test_follow_reports_progress_once_a_minute_and_warns_on_a_stall(tmp_path: Path) -> None:
    from toolkit.errors import WaitTimeoutError

    fake, reports, warnings, run = follow_growing_then_stalled(tmp_path)
    with pytest.raises(WaitTimeoutError):
        run()
    # One line a minute, from the first poll until the follow times out at t=300.
    assert [when for when, _ in reports] == [0.0, 60.0, 120.0, 180.0, 240.0, 300.0]
    assert reports[0][1].rows_done == 0
    growing = reports[1][1]
    assert (growing.rows_done, growing.rows_total) == (3000, 5000)
    # Rows/s counts from the first rows seen (500 at t=12), not from when the follow
    # began: 2,500 more rows in 48 s.
    assert growing.rows_per_second == 52.08
    assert growing.eta_seconds == 38.4
    # Rows/s is over the last 2 minutes: at t=300 no row came since t=60, so 0 rows/s
    # and no ETA (not a 5-minute average that still says 10 rows/s).
    assert (reports[-1][1].rows_per_second, reports[-1][1].eta_seconds) == (0.0, None)
    # The last rows were seen at t=60; the warning comes once, 120 s later.
    assert warnings == [(180.0, "Job job-9 has written no row for 2m 00s "
                                "(--stall-timeout 120 s); 3,000 rows so far.")]


def test_fail_on_stall_stops_following_with_exit_code_7(tmp_path: Path) -> None:
    fake, _, warnings, run = follow_growing_then_stalled(tmp_path, fail_on_stall=True)
    with pytest.raises(JobStalledError) as caught:
        run()
    assert caught.value.exit_code == 7
    assert "Job job-9 has written no row for 2m" in caught.value.message
    assert caught.value.message.endswith("Stopped following; the job keeps running.")
    assert "ray#59986" in caught.value.hint and "toolkit stop job-9" in caught.value.hint
    assert fake.now == 180.0 and warnings == []


def test_a_job_whose_progress_cannot_be_read_is_never_called_stalled() -> None:
    fake = FakeClock()
    watcher = ProgressWatcher("j", lambda: None, on_progress=lambda p: None,
                              on_stall=lambda m: pytest.fail(m), stall_timeout_s=1,
                              fail_on_stall=True, clock=fake.clock())
    info = RunningBackend(None).status("j")
    for _ in range(10):
        watcher(info)
        fake.now += 5


# --- a real job on the local head ---------------------------------------------------


def invoke(*args: str) -> Result:
    result = CliRunner().invoke(main, list(args))
    print(result.output)
    return result


def status_json(job_id: str) -> dict:
    result = invoke("status", job_id, "--address", "local", "--output", "json")
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def test_status_of_a_running_job_shows_rows_growing_and_an_eta(ray_head, tmp_path: Path) -> None:
    output = tmp_path / "out"
    submitted = invoke("submit", "text-industry", "--smoke", "--rows", "20000",
                       "--partitions", "40", "--output", str(output), "--address", "local")
    assert submitted.exit_code == 0, submitted.output
    job_id = submitted.stdout.strip()
    try:
        # Before its first rows land (model loading), a follow with a short stall
        # timeout stops with exit 7 and leaves the job running.
        stalled = invoke("logs", job_id, "--address", "local", "--follow",
                         "--stall-timeout", "2", "--fail-on-stall")
        assert stalled.exit_code == 7, stalled.output
        assert f"Error: Job {job_id} has written no row for" in stalled.stderr
        assert "Stopped following; the job keeps running." in stalled.stderr
        assert status_json(job_id)["status"] == "RUNNING"

        # Polled until two different, non-zero row counts were seen.
        seen: list[dict] = []
        deadline = time.monotonic() + 240
        while len({p["rows_done"] for p in seen if p["rows_done"]}) < 2:
            assert time.monotonic() < deadline, seen
            payload = status_json(job_id)
            assert payload["status"] == "RUNNING", payload
            seen.append(payload["progress"])
            time.sleep(3)
        done = [p["rows_done"] for p in seen]
        assert done == sorted(done) and done[-1] > 0, seen
        latest = seen[-1]
        assert latest["rows_total"] == 20000 and latest["source"] == "output"
        assert latest["rows_per_second"] > 0 and latest["eta_seconds"] > 0
        text = invoke("status", job_id, "--address", "local").stdout
        assert "  progress:   " in text and "/ 20,000 rows (" in text and "ETA" in text
        # The job's own progress lines, the fallback for watchers that can't read the output.
        logged = parse_progress_line(invoke("logs", job_id, "--address", "local").stdout)
        assert logged is not None and logged.rows_total == 20000
    finally:
        invoke("stop", job_id, "--address", "local")
    final = status_json(job_id)
    assert final["status"] == "STOPPED"
    files = [str(p) for p in output.glob("part-*.parquet")]
    written = pads.dataset(files, format="parquet").count_rows() if files else 0
    assert final["progress"]["rows_done"] == written
    assert final["progress"]["eta_seconds"] is None
