"""`toolkit render`: job.yaml files that anyscale's own models accept, rendered the same
every time, with no secrets, without importing Ray, torch or transformers."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from toolkit.cli.main import main
from toolkit.cluster.backends.base import check_no_secrets, secret_env
from toolkit.cluster.compute_table import ACCELERATOR_INSTANCE_TYPES, worker_instance_type
from toolkit.cluster.render import (
    default_image_uri,
    job_requirements,
    prepare_submission,
    render_job_yaml,
)
from toolkit.cluster.upload import measure_upload, upload_size_warning
from toolkit.errors import SpecError
from toolkit.run.output.location import output_location_warning
from toolkit.spec.jobs.catalog import builtin_jobs, load_job
from toolkit.spec.loading import load_job_spec, read_spec_file

REPO_ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = REPO_ROOT / "job.yaml.example"
EXAMPLE_ARGS = ["render", "text-industry", "--rows", "1M"]


def anyscale_job_config(path: Path):
    from anyscale.job.models import JobConfig

    return JobConfig.from_yaml(str(path))


def spec(job: str = "text-industry", **overrides: object):
    return load_job_spec(load_job(job), overrides=overrides)


def render(job_spec, working_dir: Path, **kwargs: object):
    return render_job_yaml(load_job(job_spec.job), job_spec, working_dir=working_dir, **kwargs)


@pytest.fixture(autouse=True)
def _in_a_project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Render as a user does: from their own project folder, never the toolkit's checkout."""
    project = tmp_path / "project"
    project.mkdir()
    monkeypatch.chdir(project)


def test_job_yaml_example_is_the_exact_render_output(tmp_path: Path) -> None:
    """Regenerate from an empty folder: toolkit render text-industry --rows 1M -o job.yaml"""
    result = CliRunner().invoke(main, [*EXAMPLE_ARGS, "-o", str(tmp_path / "job.yaml")])
    assert result.exit_code == 0, result.output
    assert (tmp_path / "job.yaml").read_text() == EXAMPLE.read_text(), (
        "job.yaml.example is stale; regenerate it from an empty folder with: "
        "toolkit render text-industry --rows 1M -o job.yaml"
    )
    # A relative output lands in the cloud's durable artifact storage, not the head's disk.
    assert result.stderr.startswith(
        "Results go to $ANYSCALE_ARTIFACT_STORAGE/batch-llm-toolkit/out/text-industry "
        "(the cloud's artifact storage")


def test_job_yaml_example_loads_with_anyscale_and_points_at_its_staged_job() -> None:
    assert CliRunner().invoke(main, [*EXAMPLE_ARGS, "-o", "job.yaml"]).exit_code == 0
    config = anyscale_job_config(EXAMPLE)
    assert config.name == "text-industry"
    assert config.image_uri == default_image_uri()
    assert config.working_dir == "."
    assert config.max_retries == 2
    assert config.compute_config.head_node.instance_type == "m5.2xlarge"
    [workers] = config.compute_config.worker_nodes
    assert (workers.instance_type, workers.min_nodes, workers.max_nodes) == ("g6.2xlarge", 0, 10)
    module, job_flag, job_path, spec_flag, spec_path = config.entrypoint.split()[2:7]
    assert (module, job_flag, spec_flag) == ("toolkit.cli.entrypoint", "--job", "--spec")
    # The staged files it names are in the project it was rendered in.
    loaded = read_spec_file(load_job(job_path), Path(spec_path))
    assert loaded.data.rows == 1_000_000
    assert config.py_modules == [".toolkit/py_modules/toolkit"]
    assert Path(".toolkit/py_modules/toolkit/cli/entrypoint.py").is_file()
    assert not any(spec_path.startswith(e) for e in config.excludes)


@pytest.mark.parametrize("job", [job.name for job in builtin_jobs()])
def test_every_builtin_job_renders_to_a_valid_anyscale_job(job: str, tmp_path: Path) -> None:
    job_spec = spec(job)
    result = render(job_spec, tmp_path)
    path = tmp_path / "job.yaml"
    path.write_text(result.text)
    config = anyscale_job_config(path)
    staged = result.spec_path.parent.as_posix()
    assert config.entrypoint == (
        f"python -m toolkit.cli.entrypoint --job {staged}/job.yaml --spec {staged}/spec.json")
    assert (tmp_path / result.spec_path).is_file()
    # The staged job loads on its own, as the entrypoint will load it on the cluster.
    staged_job = load_job(str(tmp_path / staged / "job.yaml"))
    staged_spec = read_spec_file(staged_job, tmp_path / result.spec_path)
    # As the cluster sees it: a relative output goes under Anyscale's artifact storage.
    expected = job_spec.model_copy(deep=True)
    expected.data.output = f"$ANYSCALE_ARTIFACT_STORAGE/batch-llm-toolkit/{job_spec.data.output}"
    assert staged_spec.model_dump() == expected.model_dump()
    # One worker group per accelerator the model stages name (a multi-stage job may
    # name two), the main engine's first.
    workers = config.compute_config.worker_nodes
    assert workers[0].instance_type == worker_instance_type(job_spec.engine.accelerator_type)
    accelerators = {e.accelerator_type for e in (job_spec.engine, *job_spec.stages.values())}
    assert len(workers) == len(accelerators)
    assert config.env_vars == {"PYTHONUNBUFFERED": "1"}
    for exclude in (".git", ".venv", "out", "outputs", "__pycache__", "*.egg-info"):
        assert exclude in config.excludes


def test_rendering_is_deterministic_and_named_by_the_spec_hash(tmp_path: Path) -> None:
    first = render(spec(**{"data.rows": "10k"}), tmp_path)
    second = render(spec(**{"data.rows": "10k"}), tmp_path)
    other = render(spec(**{"data.rows": "20k"}), tmp_path)
    assert first.text == second.text
    assert first.spec_path == second.spec_path != other.spec_path
    assert first.spec_path.parent.name.startswith("text-industry-")


def test_secrets_never_reach_a_rendered_file(tmp_path: Path,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_TOKEN", "hf_secret_do_not_write")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "aws_secret_do_not_write")
    result = render(spec(), tmp_path)
    config = yaml.safe_load(result.text)
    assert set(config["env_vars"]) == {"PYTHONUNBUFFERED"}
    assert "do_not_write" not in result.text
    assert "do_not_write" not in (tmp_path / result.spec_path).read_text()
    # ...while submit would pass them, by name, from the environment.
    assert secret_env() == {"AWS_SECRET_ACCESS_KEY": "aws_secret_do_not_write",
                            "HF_TOKEN": "hf_secret_do_not_write"}
    with pytest.raises(SpecError, match="Refusing to put HF_TOKEN into a rendered job.yaml"):
        check_no_secrets({"HF_TOKEN": "x", "PYTHONUNBUFFERED": "1"}, "a rendered job.yaml")


def test_local_file_aws_variables_are_not_forwarded() -> None:
    environ = {"AWS_PROFILE": "dev", "AWS_CA_BUNDLE": "/etc/ca.pem", "AWS_REGION": "us-west-2",
               "HF_TOKEN": ""}
    assert secret_env(environ) == {"AWS_REGION": "us-west-2"}


def test_render_prints_to_stdout_without_o() -> None:
    result = CliRunner().invoke(main, EXAMPLE_ARGS)
    assert result.exit_code == 0
    assert result.stdout == EXAMPLE.read_text()


def test_output_location_warnings() -> None:
    assert output_location_warning("s3://bucket/out", "anyscale") is None
    assert output_location_warning("/mnt/cluster_storage/out", "anyscale") is None
    assert "a local path" in output_location_warning("/tmp/out", "anyscale")
    assert "inside the job's temporary working dir" in output_location_warning("out", "ray")
    assert output_location_warning("gs://bucket/out", "ray") is None


def test_local_submissions_resolve_a_relative_output(tmp_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    submission = prepare_submission(load_job("text-industry"), spec(), target="ray", local=True,
                                    working_dir=tmp_path)
    assert submission.spec.data.output == str(tmp_path / "out" / "text-industry")
    assert submission.warnings == []
    written = json.loads((tmp_path / submission.request.spec_path).read_text())
    assert written["data"]["output"] == str(tmp_path / "out" / "text-industry")


def test_overwrite_reaches_the_entrypoint(tmp_path: Path) -> None:
    request = prepare_submission(load_job("text-industry"), spec(), overwrite=True,
                                 working_dir=tmp_path).request
    assert request.entrypoint.endswith(" --overwrite")


def test_worker_instance_types_come_from_the_table(monkeypatch: pytest.MonkeyPatch) -> None:
    assert ACCELERATOR_INSTANCE_TYPES == {
        "L4": "g6.2xlarge", "A10G": "g5.2xlarge", "T4": "g4dn.2xlarge",
        "L40S": "g6e.2xlarge", "A100": "p4d.24xlarge", "H100": "p5.48xlarge",
    }
    assert worker_instance_type("l4") == "g6.2xlarge"
    assert worker_instance_type(None) == "m5.2xlarge"  # CPU engine
    assert worker_instance_type("L4", override="g6.12xlarge") == "g6.12xlarge"
    assert worker_instance_type("L4", table={"L4": "g2-standard-8"}) == "g2-standard-8"
    monkeypatch.setenv("TOOLKIT_INSTANCE_TYPES", "L4=g6.4xlarge, B200=p6-b200.48xlarge")
    assert worker_instance_type("L4") == "g6.4xlarge"
    assert worker_instance_type("B200") == "p6-b200.48xlarge"


def test_unknown_accelerator_is_a_spec_error_with_a_way_out(tmp_path: Path) -> None:
    result = CliRunner().invoke(main, [*EXAMPLE_ARGS, "--accelerator", "TPU-v9"])
    assert result.exit_code == 2
    assert result.stderr.startswith(
        "Error: No worker instance type is known for accelerator 'TPU-v9' (known: A100, ")
    assert "--set compute.worker_instance_type=<instance type>" in result.stderr
    assert not Path(".toolkit").exists()  # refused before anything was written
    override = render(
        spec(**{"engine.accelerator_type": "TPU-v9", "compute.worker_instance_type": "ct9.big"}),
        tmp_path)
    assert "instance_type: ct9.big" in override.text


def test_min_workers_above_max_is_refused(tmp_path: Path) -> None:
    with pytest.raises(SpecError, match=r"compute.min_workers \(5\) is more than"):
        render(spec(**{"compute.min_workers": 5, "compute.max_workers": 2}), tmp_path)


def test_image_and_requirements(tmp_path: Path) -> None:
    assert default_image_uri("2.60.0") == "anyscale/ray-llm:2.60.0-py311-cu128"
    ray_llm = default_image_uri("2.60.0")
    assert job_requirements(spec(), ray_llm) == []  # vLLM is in the image
    assert job_requirements(spec(), "myorg/custom:1") == [
        "jinja2>=3.1", "pydantic<3,>=2.7", "pyyaml>=6", "ray[llm]<2.61,>=2.60"]
    # A Ray cluster's image is unknown: the toolkit's own packages, checked on arrival.
    assert job_requirements(spec(), None) == ["jinja2>=3.1", "pydantic<3,>=2.7", "pyyaml>=6"]
    assert job_requirements(spec(**{"data.input": "hf://org/dataset"}), ray_llm) == [
        "datasets>=3"]
    custom = render(spec(**{"compute.image_uri": "anyscale/image/mine:3"}), tmp_path)
    config = yaml.safe_load(custom.text)
    assert config["image_uri"] == "anyscale/image/mine:3"
    assert "ray[llm]<2.61,>=2.60" in config["requirements"]


def test_upload_size_warning_names_what_to_exclude(tmp_path: Path) -> None:
    (tmp_path / "data").mkdir()
    with open(tmp_path / "data" / "big.bin", "wb") as handle:
        handle.truncate(101 * 2**20)  # sparse: no disk used
    (tmp_path / ".git").mkdir()
    with open(tmp_path / ".git" / "pack", "wb") as handle:
        handle.truncate(500 * 2**20)
    warning = upload_size_warning(measure_upload(tmp_path, [".git"]))
    assert warning is not None
    assert "is about 101 MiB, over 100 MiB" in warning
    assert "data/ (101 MiB)" in warning and ".git" not in warning.split("Biggest")[1]
    assert upload_size_warning(measure_upload(tmp_path, [".git", "data"])) is None


def test_render_from_a_users_folder_leaves_the_checkout_untouched(tmp_path: Path,
                                                                  git_status) -> None:
    before = git_status()
    done = subprocess.run(["toolkit", *EXAMPLE_ARGS, "-o", "job.yaml"], cwd=tmp_path / "project",
                          capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "project" / ".toolkit" / "specs").is_dir()
    assert git_status() == before


def test_render_does_not_import_ray_torch_or_transformers(tmp_path: Path) -> None:
    code = textwrap.dedent(f"""
        import json, sys
        from click.testing import CliRunner
        from toolkit.cli.main import main
        result = CliRunner().invoke(main, {[*EXAMPLE_ARGS, "-o", str(tmp_path / "job.yaml")]!r})
        assert result.exit_code == 0, result.output
        heavy = ("ray", "torch", "transformers", "vllm")
        print(json.dumps([name for name in heavy if name in sys.modules]))
    """)
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          cwd=tmp_path / "project", timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout.strip().splitlines()[-1]) == []
    assert (tmp_path / "job.yaml").read_text() == EXAMPLE.read_text()


@pytest.mark.parametrize(("accelerator", "tp", "pp", "instance_type"), [
    ("L4", 4, 1, "g6.12xlarge"), ("L4", 4, 2, "g6.48xlarge"), ("L4", 2, 1, "g6.12xlarge"),
    ("A10G", 4, 1, "g5.12xlarge"), ("A10G", 8, 1, "g5.48xlarge"),
    ("H100", 8, 1, "p5.48xlarge"), ("A100", 2, 4, "p4d.24xlarge"),
])
def test_a_worker_spanning_several_gpus_gets_an_instance_holding_them(
        accelerator: str, tp: int, pp: int, instance_type: str, tmp_path: Path) -> None:
    job_spec = spec(**{"engine.accelerator_type": accelerator,
                       "engine.engine_kwargs.tensor_parallel_size": tp,
                       "engine.engine_kwargs.pipeline_parallel_size": pp})
    assert f"instance_type: {instance_type}" in render(job_spec, tmp_path).text


def test_a_worker_no_instance_can_hold_is_refused_naming_the_fields(tmp_path: Path) -> None:
    result = CliRunner().invoke(main, [*EXAMPLE_ARGS, "--set",
                                       "engine.engine_kwargs.tensor_parallel_size=16"])
    assert result.exit_code == 2
    assert result.stderr.startswith(
        "Error: One engine worker needs 16 L4 GPUs on one node "
        "(engine.engine_kwargs.tensor_parallel_size x pipeline_parallel_size), and the "
        "largest known L4 instance, g6.48xlarge, has 8.")
    assert not Path(".toolkit").exists()  # refused before anything was written
    override = spec(**{"engine.engine_kwargs.tensor_parallel_size": 16,
                       "compute.worker_instance_type": "big.metal"})
    assert "instance_type: big.metal" in render(override, tmp_path).text


def test_vllm_on_cpu_renders_cpu_workers(tmp_path: Path) -> None:
    job_spec = spec(**{"engine.accelerator_type": "none"})
    assert (job_spec.engine.kind, job_spec.engine.gpus_per_worker) == ("vllm", 0)
    (tmp_path / "job.yaml").write_text(render(job_spec, tmp_path).text)
    [workers] = anyscale_job_config(tmp_path / "job.yaml").compute_config.worker_nodes
    assert workers.instance_type == "m5.2xlarge"


OUT = {"data.output": "s3://bucket/out"}


def test_a_local_answer_cache_is_refused_for_a_cluster_elsewhere(tmp_path: Path) -> None:
    project = Path.cwd()
    """Each node would keep its own answers: refused before anything is written or sent,
    unless the folder is shared (object storage, cache.shared, Anyscale's storage)."""
    job = load_job("text-industry")
    with pytest.raises(SpecError) as refused:
        prepare_submission(job, spec(**{"cache.dir": "answers", **OUT}), target="ray",
                           working_dir=project)
    assert str(refused.value).startswith("cache.dir 'answers' is a relative path: on a "
                                         "cluster that is not on this machine each node")
    assert "--set cache.shared=true" in refused.value.hint
    assert list(project.iterdir()) == []  # nothing staged
    for shared in ({"cache.dir": "s3://bucket/answers"},
                   {"cache.dir": "/nfs/answers", "cache.shared": True}):
        submission = prepare_submission(job, spec(**shared, **OUT), target="ray", working_dir=project)
        assert submission.spec.cache.dir == shared["cache.dir"]
    prepare_submission(job, spec(**{"cache.dir": "/mnt/cluster_storage/answers"}),
                       target="anyscale", working_dir=project)
    # On this machine a local folder is every node's.
    prepare_submission(job, spec(**{"cache.dir": "answers"}), target="ray", local=True,
                       working_dir=project)

    rendered = CliRunner().invoke(main, [*EXAMPLE_ARGS, "--cache", "/data/answers", "-o",
                                         str(tmp_path / "job.yaml")])
    assert rendered.exit_code == 2
    assert rendered.stderr.startswith("Error: cache.dir '/data/answers' is a local path")
    assert not (tmp_path / "job.yaml").exists()
