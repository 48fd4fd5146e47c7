"""The Anyscale backend against the fake client anyscale ships.

``anyscale.job.JobSDK(client=FakeAnyscaleClient(), timer=FakeTimer())`` is the SDK's
public seam for tests: the real SDK code runs (JobConfig validation, compute config
creation, image registration, working-dir upload, state mapping) against an
in-memory Anyscale. Nothing is patched.

The fake's ``submit_job`` stores what was sent but can't answer ``status`` for that
job (it keeps the runtime env as a plain dict), and its ``terminate_job`` replaces
the job's state object with a bare string; so status/logs/list use jobs seeded as
``DecoratedProductionJob`` models through the fake's ``update_job``, and termination
is checked through the fake's ``get_job``.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from anyscale._private.anyscale_client.fake_anyscale_client import (
    OPENAPI_NO_VALIDATION,
    FakeAnyscaleClient,
)
from anyscale._private.sdk.timer import FakeTimer
from anyscale.client.openapi_client.models import (
    DecoratedProductionJob,
    HaJobGoalStates,
    HaJobStates,
    MiniProject,
    ProductionJobConfig,
    ProductionJobStateTransition,
)
from anyscale.client.openapi_client.models.ray_runtime_env_config import (
    RayRuntimeEnvConfig,
)
from anyscale.job import JobSDK
from click.testing import CliRunner

from toolkit.cli.main import main
from toolkit.cluster.backends.anyscale_backend import AnyscaleBackend, has_credentials
from toolkit.cluster.backends.base import JobNotFoundError, JobStatus
from toolkit.cluster.render import prepare_submission
from toolkit.run.progress.following import Clock, follow
from toolkit.errors import BackendUnavailableError
from toolkit.spec.jobs.catalog import load_job
from toolkit.spec.loading import load_job_spec


@pytest.fixture
def fake_client() -> FakeAnyscaleClient:
    return FakeAnyscaleClient()


@pytest.fixture
def backend(fake_client: FakeAnyscaleClient) -> AnyscaleBackend:
    return AnyscaleBackend(
        JobSDK(client=fake_client, timer=FakeTimer()),
        console_url=lambda job_id: f"https://console.example/jobs/{job_id}",
    )


def seed_job(client: FakeAnyscaleClient, job_id: str, state: str,
             run_id: str | None = None) -> None:
    project_id = client.get_project_id(parent_cloud_id=client.DEFAULT_CLOUD_ID, name=None)
    client.update_job(DecoratedProductionJob(
        id=job_id, name="text-industry", project_id=project_id,
        project=MiniProject(id=project_id, name="default",
                            local_vars_configuration=OPENAPI_NO_VALIDATION),
        config=ProductionJobConfig(
            entrypoint="python -m toolkit.cli.entrypoint --job .toolkit/specs/x/job.yaml --spec .toolkit/specs/x/spec.json",
            runtime_env=RayRuntimeEnvConfig(env_vars={"HF_TOKEN": "hf_seeded"},
                                            local_vars_configuration=OPENAPI_NO_VALIDATION),
            build_id=client.DEFAULT_CLUSTER_ENV_BUILD_ID,
            compute_config_id=client.DEFAULT_CLUSTER_COMPUTE_ID,
            local_vars_configuration=OPENAPI_NO_VALIDATION,
        ),
        state=ProductionJobStateTransition(
            current_state=state, goal_state=HaJobGoalStates.SUCCESS,
            local_vars_configuration=OPENAPI_NO_VALIDATION,
        ),
        last_job_run_id=run_id,
        local_vars_configuration=OPENAPI_NO_VALIDATION,
    ))


def test_submit_sends_the_rendered_config_with_secrets_in_memory(
    backend: AnyscaleBackend, fake_client: FakeAnyscaleClient, tmp_path: Path
) -> None:
    spec = load_job_spec(load_job("text-industry"),
                         overrides={"data.rows": "1M", "data.output": "s3://bucket/industry"})
    submission = prepare_submission(load_job("text-industry"), spec, target="anyscale",
                                    working_dir=tmp_path)
    assert submission.warnings == []
    handle = backend.submit(submission.request, {"HF_TOKEN": "hf_live_secret"})

    assert handle.backend == "anyscale"
    assert handle.url == f"https://console.example/jobs/{handle.job_id}"
    sent = fake_client.submitted_job
    assert sent.name == "text-industry"
    assert sent.config.entrypoint == submission.request.entrypoint
    assert sent.config.entrypoint.startswith(
        "python -m toolkit.cli.entrypoint --job .toolkit/specs/text-industry-")
    assert sent.config.max_retries == 2
    runtime_env = sent.config.runtime_env
    assert runtime_env["user_provided_working_dir"] == str(tmp_path)
    assert ".venv" in runtime_env["excludes"]
    assert runtime_env["env_vars"] == {"PYTHONUNBUFFERED": "1", "HF_TOKEN": "hf_live_secret"}
    assert fake_client.get_cluster_env_build_image_uri(sent.config.build_id).image_uri == \
        "anyscale/ray-llm:2.60.0-py311-cu128"
    compute = fake_client.get_compute_config(sent.config.compute_config_id).config
    assert compute.head_node_type.instance_type == "m5.2xlarge"
    assert [(w.instance_type, w.min_workers, w.max_workers)
            for w in compute.worker_node_types] == [("g6.2xlarge", 0, 10)]
    # The spec the entrypoint reads was written into the uploaded working dir.
    assert (tmp_path / submission.request.spec_path).is_file()
    # The request itself never holds the secret.
    assert "hf_live_secret" not in submission.request.model_dump_json()


@pytest.mark.parametrize(("state", "expected"), [
    (HaJobStates.PENDING, JobStatus.PENDING),
    (HaJobStates.AWAITING_CLUSTER_START, JobStatus.PENDING),
    (HaJobStates.RUNNING, JobStatus.RUNNING),
    (HaJobStates.ERRORED, JobStatus.RUNNING),  # a retry is coming
    (HaJobStates.SUCCESS, JobStatus.SUCCEEDED),
    (HaJobStates.OUT_OF_RETRIES, JobStatus.FAILED),
    (HaJobStates.TERMINATED, JobStatus.STOPPED),
])
def test_status_maps_anyscale_states(backend: AnyscaleBackend, fake_client: FakeAnyscaleClient,
                                     state: str, expected: JobStatus) -> None:
    seed_job(fake_client, "job-1", state)
    info = backend.status("job-1")
    assert info.status == expected
    assert info.name == "text-industry"
    assert info.entrypoint == "python -m toolkit.cli.entrypoint --job .toolkit/specs/x/job.yaml --spec .toolkit/specs/x/spec.json"
    assert info.url == "https://console.example/jobs/job-1"
    assert "hf_seeded" not in info.model_dump_json()


def test_logs_list_and_terminate(backend: AnyscaleBackend,
                                 fake_client: FakeAnyscaleClient) -> None:
    seed_job(fake_client, "job-1", HaJobStates.RUNNING, run_id="run-1")
    seed_job(fake_client, "job-2", HaJobStates.SUCCESS)
    fake_client.add_job_run_logs("run-1", "loading model\nrows written: 10")
    assert backend.logs("job-1") == "loading model\nrows written: 10"
    assert {(info.job_id, info.status) for info in backend.list()} == {
        ("job-1", JobStatus.RUNNING), ("job-2", JobStatus.SUCCEEDED)}

    assert backend.stop("job-2") is False  # already ended
    assert backend.stop("job-1") is True
    terminated = fake_client.get_job(name=None, job_id="job-1", cloud=None, project=None)
    assert terminated.state == HaJobStates.TERMINATED


def test_unknown_job_is_not_found(backend: AnyscaleBackend) -> None:
    with pytest.raises(JobNotFoundError) as caught:
        backend.status("job-missing")
    assert caught.value.exit_code == 2
    assert caught.value.message == "No Anyscale job 'job-missing'."


def test_follow_streams_logs_until_success_without_sleeping(
    backend: AnyscaleBackend, fake_client: FakeAnyscaleClient
) -> None:
    seed_job(fake_client, "job-1", HaJobStates.RUNNING, run_id="run-1")
    fake_client.add_job_run_logs("run-1", "step 1")
    now = [0.0]

    def sleep(seconds: float) -> None:  # the job advances while we "sleep"
        now[0] += seconds
        fake_client.add_job_run_logs("run-1", "step 1\nstep 2")
        seed_job(fake_client, "job-1", HaJobStates.SUCCESS, run_id="run-1")

    chunks: list[str] = []
    info = follow(backend, "job-1", timeout_s=600, on_log=chunks.append,
                  clock=Clock(now=lambda: now[0], sleep=sleep))
    assert info.status == JobStatus.SUCCEEDED
    assert chunks == ["step 1", "\nstep 2"]
    assert now[0] == backend.poll_interval_s


def test_missing_login_is_one_clear_error(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv("ANYSCALE_CLI_TOKEN", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    assert not has_credentials()
    with pytest.raises(BackendUnavailableError) as caught:
        AnyscaleBackend.connect()
    assert caught.value.exit_code == 3

    for args in (["status", "job-1"], ["list"], ["submit", "text-industry", "--smoke"]):
        result = CliRunner().invoke(main, [*args, "--backend", "anyscale"])
        assert result.exit_code == 3, result.output
        assert result.stderr == (
            "Error: Not logged in to Anyscale: ANYSCALE_CLI_TOKEN is not set and "
            "~/.anyscale/credentials.json does not exist.\n"
            "Hint: Run `anyscale login`, or set ANYSCALE_CLI_TOKEN to an API key created in "
            "the Anyscale console (https://console.anyscale.com/v2/api-keys).\n"
        )


def test_token_or_credentials_file_counts_as_logged_in(tmp_path: Path) -> None:
    assert has_credentials({"ANYSCALE_CLI_TOKEN": "aph0_x"}, home=tmp_path)
    (tmp_path / ".anyscale").mkdir()
    (tmp_path / ".anyscale" / "credentials.json").write_text('{"cli_token": "x"}')
    assert has_credentials({}, home=tmp_path)


def test_address_is_refused_for_anyscale() -> None:
    result = CliRunner().invoke(main, ["list", "--backend", "anyscale", "--address", "local"])
    assert result.exit_code == 2
    assert "--address applies to --backend ray only" in result.stderr


def test_a_project_goes_to_anyscale_with_its_rayignore_and_a_durable_output(
    backend: AnyscaleBackend, fake_client: FakeAnyscaleClient, tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from toolkit.cli.entrypoint import with_output_resolved

    (tmp_path / "customers.csv").write_text("Index,Company\n1,Acme\n")
    (tmp_path / "recordings").mkdir()
    (tmp_path / "recordings" / "call.wav").write_bytes(b"\0" * 1000)
    (tmp_path / ".rayignore").write_text("# raw audio stays here\nrecordings/\n")
    job = load_job("text-industry")
    spec = load_job_spec(job, overrides={"data.input": str(tmp_path / "customers.csv")})

    submission = prepare_submission(job, spec, target="anyscale", working_dir=tmp_path)
    backend.submit(submission.request, {})

    runtime_env = fake_client.submitted_job.config.runtime_env
    assert "recordings/" in runtime_env["excludes"]  # Anyscale's packer reads .gitignore only
    assert submission.spec.data.input == "customers.csv"  # it travels: relative to the upload
    # A relative output goes to the cloud's artifact storage, filled in on the cluster.
    assert submission.spec.data.output == \
        "$ANYSCALE_ARTIFACT_STORAGE/batch-llm-toolkit/out/text-industry"
    assert submission.notes == ["Results go to $ANYSCALE_ARTIFACT_STORAGE/batch-llm-toolkit/"
                                "out/text-industry (the cloud's artifact storage: durable; "
                                "the job's log names the place)."]
    monkeypatch.setenv("ANYSCALE_ARTIFACT_STORAGE", "s3://anyscale-artifacts/org/cld")
    resolved = with_output_resolved(submission.spec)
    assert resolved.data.output == "s3://anyscale-artifacts/org/cld/batch-llm-toolkit/out/text-industry"
