"""`toolkit submit/status/logs/list/stop` against a real Ray head (no mocks).

The smoke job runs once (module fixture) and the status/logs/list tests read it
back. Exit codes are the contract: 0 SUCCEEDED, 2 unknown job, 3 unreachable,
4 FAILED, 5 STOPPED, 6 timed out.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner, Result

from toolkit.cli.main import main
from toolkit.cluster.backends.base import JobStatus, SubmitRequest
from toolkit.cluster.backends.local_head import LocalHead
from toolkit.cluster.backends.ray_jobs import RayJobsBackend

SECRET = "hf_test_secret_value_42"
TOOLKIT = str(Path(sys.executable).parent / "toolkit")


def invoke(*args: str) -> Result:
    result = CliRunner().invoke(main, list(args))
    print(result.output)  # shown when a test fails
    return result


def wait_for_status(backend: RayJobsBackend, job_id: str, wanted: JobStatus,
                    timeout_s: float = 60) -> None:
    deadline = time.monotonic() + timeout_s
    while backend.status(job_id).status != wanted:
        assert time.monotonic() < deadline, f"{job_id} never reached {wanted}"
        time.sleep(0.5)


@pytest.fixture(scope="module")
def smoke_job(ray_head: LocalHead, tmp_path_factory: pytest.TempPathFactory):
    """`toolkit submit text-industry --smoke --rows 200 --address local --follow`."""
    output = tmp_path_factory.mktemp("smoke") / "out"
    os.environ["HF_TOKEN"] = SECRET
    try:
        result = invoke("submit", "text-industry", "--smoke", "--rows", "200",
                        "--output", str(output), "--address", "local", "--follow")
    finally:
        del os.environ["HF_TOKEN"]
    job_id = result.stdout.splitlines()[0] if result.stdout else ""
    return result, job_id, output


def test_submit_follow_succeeds_and_writes_rows(smoke_job, ray_head: LocalHead) -> None:
    result, job_id, output = smoke_job
    assert result.exit_code == 0, result.output
    assert job_id.startswith("raysubmit_")
    # --address local reused the session's head instead of starting another.
    assert "Started a local Ray head" not in result.stderr
    assert f"Submitting text-industry to {ray_head.dashboard_url}" in result.stderr
    assert f"Submitted job {job_id}; watch it at {ray_head.dashboard_url}/#/jobs/{job_id}" \
        in result.stderr
    assert f"Job {job_id} SUCCEEDED in " in result.stderr
    # The job's own log, streamed to stdout.
    assert "rows written:  200 (200 ok, 0 with an error)" in result.stdout
    table = pq.read_table(output)
    assert table.num_rows == 200
    assert {"Index", "inferred_industry", "error"} <= set(table.column_names)


def test_secrets_are_passed_by_name_never_shown(smoke_job) -> None:
    result, _, _ = smoke_job
    assert "Passing from your environment: HF_TOKEN" in result.stderr
    assert SECRET not in result.output


def test_submitting_from_a_users_folder_leaves_the_checkout_untouched(
        ray_head: LocalHead, tmp_path: Path, git_status) -> None:
    before = git_status()
    done = subprocess.run(
        ["toolkit", "submit", "text-industry", "--smoke", "--rows", "20", "--output", "out",
         "--address", "local", "--follow"],
        cwd=tmp_path, capture_output=True, text=True, timeout=600, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    assert (tmp_path / ".toolkit" / "py_modules" / "toolkit").is_dir()
    assert git_status() == before


def test_status_shows_the_finished_job(smoke_job) -> None:
    _, job_id, _ = smoke_job
    result = invoke("status", job_id, "--address", "local")
    assert result.exit_code == 0
    assert result.stdout.startswith(f"Job {job_id}: SUCCEEDED\n")
    assert "  name:       text-industry\n" in result.stdout
    assert "python -m toolkit.cli.entrypoint --job .toolkit/specs/text-industry-" in result.stdout
    # The run's own summary, read back from its output directory.
    assert "  rows in:       200\n" in result.stdout
    assert "  rows written:  200 (200 ok, 0 with an error)\n" in result.stdout

    as_json = json.loads(invoke("status", job_id, "--address", "local", "--output", "json").stdout)
    assert as_json["status"] == "SUCCEEDED"
    assert as_json["job_id"] == job_id
    assert as_json["summary"]["rows_written"] == 200
    assert SECRET not in json.dumps(as_json)


def test_logs_and_list_show_the_job(smoke_job, ray_head: LocalHead) -> None:
    _, job_id, output = smoke_job
    logs = invoke("logs", job_id, "--address", ray_head.dashboard_url)
    assert logs.exit_code == 0
    assert f"output:        {output}" in logs.stdout
    assert "Job text-industry finished in" in logs.stdout

    listed = invoke("list", "--address", ray_head.dashboard_url)
    assert listed.exit_code == 0
    assert listed.stdout.startswith("JOB ID")
    line = next(line for line in listed.stdout.splitlines() if line.startswith(job_id))
    assert "SUCCEEDED" in line and line.endswith("text-industry")
    as_json = json.loads(invoke("list", "--address", "local", "--output", "json").stdout)
    assert job_id in [job["job_id"] for job in as_json]


def test_long_job_is_stopped_and_follow_exits_5(ray_head: LocalHead, tmp_path: Path) -> None:
    submitted = invoke("submit", "text-industry", "--smoke", "--rows", "200000",
                       "--output", str(tmp_path / "out"), "--address", "local")
    assert submitted.exit_code == 0, submitted.output
    job_id = submitted.stdout.strip()
    assert f"toolkit stop {job_id} --address local" in submitted.stderr
    backend = RayJobsBackend.connect(ray_head.dashboard_url)
    wait_for_status(backend, job_id, JobStatus.RUNNING)

    # A bounded follow gives up with exit 6 and leaves the job running.
    started = time.monotonic()
    timed_out = invoke("logs", job_id, "--address", "local", "--follow", "--timeout", "1")
    assert timed_out.exit_code == 6
    assert time.monotonic() - started < 15
    assert f"Error: Job {job_id} is still RUNNING after 1 s; it keeps running." \
        in timed_out.stderr
    assert f"Hint: Watch it again with `toolkit logs {job_id} --address local --follow`" \
        in timed_out.stderr

    follower = subprocess.Popen(
        [TOOLKIT, "logs", job_id, "--address", ray_head.dashboard_url, "--follow"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    try:
        stopped = invoke("stop", job_id, "--address", "local")
        assert stopped.exit_code == 0
        assert f"Job {job_id} is STOPPED." in stopped.stderr
        _, stderr = follower.communicate(timeout=90)
    finally:
        follower.kill()
    assert follower.returncode == 5, stderr
    assert f"Error: Job {job_id} was STOPPED: Job was intentionally stopped." in stderr
    assert invoke("status", job_id, "--address", "local").stdout.startswith(
        f"Job {job_id}: STOPPED")
    # Stopping again is not an error.
    again = invoke("stop", job_id, "--address", "local")
    assert again.exit_code == 0
    assert f"Job {job_id} had already ended (STOPPED)." in again.stderr


def test_failed_job_exits_4(ray_head: LocalHead, tmp_path: Path) -> None:
    output = tmp_path / "out"
    output.mkdir()
    (output / "part-0.parquet").write_bytes(b"results of another tool")
    result = invoke("submit", "text-industry", "--smoke", "--rows", "10",
                    "--output", str(output), "--address", "local", "--follow")
    assert result.exit_code == 4, result.output
    job_id = result.stdout.splitlines()[0]
    # The job's own error (from toolkit.run.output.run_directory), streamed with its logs.
    assert "1 file(s) this toolkit did not write (part-0.parquet)" in result.stdout
    assert (output / "part-0.parquet").read_bytes() == b"results of another tool"
    assert (f"Error: Job {job_id} FAILED: Job entrypoint command failed with exit code 2"
            in result.stderr)
    assert f"Hint: See why with `toolkit logs {job_id}`" in result.stderr


def test_unknown_job_id_exits_2(ray_head: LocalHead) -> None:
    result = invoke("status", "raysubmit_nope", "--address", "local")
    assert result.exit_code == 2
    assert f"Error: No job 'raysubmit_nope' on the Ray cluster at {ray_head.dashboard_url}." \
        in result.stderr
    assert "Hint: List its jobs with: toolkit list --address local" in result.stderr


def test_secrets_reach_the_job_through_the_runtime_env(ray_head: LocalHead,
                                                       tmp_path: Path) -> None:
    (tmp_path / "show.py").write_text(
        "import os\nprint('HF_TOKEN ok' if os.environ.get('HF_TOKEN') == 'x-1' else 'missing')\n"
    )
    request = SubmitRequest(
        job="probe", name="probe", entrypoint="python show.py", working_dir=tmp_path,
        spec_path=Path("show.py"), excludes=[], requirements=["not-installed-anywhere"],
        env_vars={"PYTHONUNBUFFERED": "1"}, image_uri="unused", compute_config={},
        max_retries=0,
    )
    backend = RayJobsBackend.connect("local")
    assert backend.local
    # pip is skipped for a local head (it shares this environment and has no internet).
    assert "pip" not in backend.runtime_env(request, {})
    handle = backend.submit(request, {"HF_TOKEN": "x-1"})
    wait_for_status(backend, handle.job_id, JobStatus.SUCCEEDED)
    assert "HF_TOKEN ok" in backend.logs(handle.job_id)


def test_unreachable_address_fails_fast_with_exit_3() -> None:
    started = time.monotonic()
    result = invoke("status", "anything", "--address", "http://127.0.0.1:1")
    assert result.exit_code == 3
    assert time.monotonic() - started < 5
    assert result.stderr.startswith(
        "Error: Cannot reach the Ray cluster at http://127.0.0.1:1 (Connection refused).\n"
        "Hint: Pass --address http://HEAD:8265")

    submit = invoke("submit", "text-industry", "--smoke", "--address", "http://127.0.0.1:1")
    assert submit.exit_code == 3
    assert "Cannot reach the Ray cluster" in submit.stderr


def test_no_address_anywhere_is_a_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    monkeypatch.delenv("RAY_API_SERVER_ADDRESS", raising=False)
    result = invoke("list")
    assert result.exit_code == 3
    assert "Error: No Ray cluster given." in result.stderr
    assert "--address local" in result.stderr


def test_explicit_address_wins_over_ray_address(ray_head: LocalHead,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RAY_ADDRESS", "http://127.0.0.1:1")
    assert invoke("list", "--address", ray_head.dashboard_url).exit_code == 0
    assert os.environ["RAY_ADDRESS"] == "http://127.0.0.1:1"
    assert invoke("list").exit_code == 3  # and RAY_ADDRESS is the default


def test_missing_token_is_explained(ray_head: LocalHead, tmp_path: Path) -> None:
    import urllib.error
    import urllib.request

    try:
        urllib.request.urlopen(f"{ray_head.dashboard_url}/api/version", timeout=5)
        pytest.skip("this head runs without token auth (no ~/.ray/auth_token here)")
    except urllib.error.HTTPError as exc:
        assert exc.code == 401

    # A user's shell without the token: its own process (Ray, once told to send a token
    # in a process, keeps doing so), no RAY_AUTH_* and a home with no ~/.ray/auth_token.
    env = {name: value for name, value in os.environ.items()
           if not name.startswith(("RAY_AUTH", "RAY_ADDRESS"))}
    refused = subprocess.run(["toolkit", "list", "--address", ray_head.dashboard_url],
                             capture_output=True, text=True, timeout=120,
                             env={**env, "HOME": str(tmp_path)})

    assert refused.returncode == 3, refused.stdout + refused.stderr
    assert "refused this client's credentials" in refused.stderr
    assert "RAY_AUTH_MODE=token" in refused.stderr
    assert "Traceback" not in refused.stderr


@pytest.mark.parametrize("job, rows, result_column", [
    ("date-reformat", "100", "matches_reference"),
    ("vlm-caption", "20", "generated_caption"),
    ("tabular-predict", "100", "prediction"),
    ("text-classify", "50", "label"),
    ("embed", "50", "embedding"),
    ("image-classify", "20", "label"),
])
def test_every_job_submits_and_succeeds(job: str, rows: str, result_column: str,
                                         ray_head: LocalHead, tmp_path: Path) -> None:
    output = tmp_path / "out"
    result = invoke("submit", job, "--smoke", "--rows", rows, "--output", str(output),
                    "--address", "local", "--follow")
    assert result.exit_code == 0, result.output
    assert f"Job {job} finished in" in result.stdout
    table = pq.read_table(output)
    assert table.num_rows == int(rows)
    assert {result_column, "error"} <= set(table.column_names)
