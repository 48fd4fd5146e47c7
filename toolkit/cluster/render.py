"""Turn a validated spec into a job that runs elsewhere: the spec file, the entrypoint,
the upload, and the Anyscale ``job.yaml``.

The same :class:`~toolkit.cluster.backends.base.SubmitRequest` feeds the rendered file, the Ray
Jobs backend and the Anyscale backend, so the three can't drift apart. Rendering is
deterministic: the spec file is named by the hash of its content, and the job.yaml
holds no timestamps, so rendering the same spec twice gives the same bytes.

This module must stay light: it imports neither Ray nor torch nor transformers (a
test checks ``sys.modules``), so ``toolkit render`` runs in about a second.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import os
import shlex
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from toolkit.cluster.backends.base import (
    SubmitRequest,
    check_no_secrets,
    upload_size_warning,
)
from toolkit.cluster.compute_table import worker_instance_type
from toolkit.errors import SpecError
from toolkit.spec.job_definition import REPO_ROOT, module_name_for
from toolkit.spec.models import JobSpec
from toolkit.spec.loading import write_spec_json

#: Where spec files go, relative to the working dir. Not excluded from uploads
#: (and must not be listed in .gitignore: Ray's upload honours .gitignore).
SPEC_DIR = Path(".toolkit") / "specs"

#: Left out of every upload: VCS data, environments, caches, build and run outputs.
DEFAULT_EXCLUDES: list[str] = [
    ".git",
    ".venv",
    "venv",
    "out",
    "outputs",
    "__pycache__",
    "*.egg-info",
    ".pytest_cache",
    ".mypy_cache",
    ".ruff_cache",
    ".cache",
    "build",
    "dist",
]

#: Non-secret env vars every job gets. Unbuffered stdout makes followed logs live.
DEFAULT_ENV_VARS: dict[str, str] = {"PYTHONUNBUFFERED": "1"}

#: Env vars worth forwarding to a Ray head on this machine (paths valid here only).
LOCAL_ENV_VARS: tuple[str, ...] = ("TOOLKIT_CACHE_DIR", "HF_HOME", "TOOLKIT_DEBUG")

#: The ray-llm images are built for one Python and CUDA pair.
RAY_LLM_IMAGE = "anyscale/ray-llm:{ray_version}-py311-cu128"

#: The package extra each engine needs when the image does not already have it.
ENGINE_EXTRAS: dict[str, str] = {"vllm": "vllm", "transformers": "local"}

#: Storage every node of an Anyscale cluster shares.
SHARED_STORAGE_PREFIXES: tuple[str, ...] = (
    "/mnt/cluster_storage",
    "/mnt/shared_storage",
    "/mnt/user_storage",
)


def installed_ray_version() -> str:
    """The installed Ray's version, read from package metadata (Ray is not imported)."""
    try:
        return importlib.metadata.version("ray")
    except importlib.metadata.PackageNotFoundError:
        raise SpecError(
            "Ray is not installed, so the matching anyscale/ray-llm image can't be chosen.",
            hint="Install the toolkit's dependencies, or set compute.image_uri.",
        ) from None


def default_image_uri(ray_version: str | None = None) -> str:
    """``anyscale/ray-llm:<ray version>-py311-cu128``, matching the installed Ray."""
    return RAY_LLM_IMAGE.format(ray_version=ray_version or installed_ray_version())


def is_ray_llm_image(image_uri: str) -> bool:
    return image_uri.split(":", 1)[0].rstrip("/").endswith("anyscale/ray-llm")


def _package_requirements(extra: str | None) -> list[str]:
    """This package's requirements for ``extra`` (``None``: the base ones), no markers."""
    try:
        requires = importlib.metadata.requires("batch-llm-toolkit") or []
    except importlib.metadata.PackageNotFoundError:
        return []
    picked = []
    for requirement in requires:
        spec, _, marker = requirement.partition(";")
        in_extra = f'extra == "{extra}"' in marker if extra else "extra ==" not in marker
        if in_extra:
            picked.append(spec.strip())
    return picked


def job_requirements(spec: JobSpec, image_uri: str) -> list[str]:
    """pip requirements the job needs on top of ``image_uri``, kept minimal.

    The ray-llm images already ship vLLM, transformers, torch and xgrammar, so no
    engine packages are added there; on another image the engine's extra of this
    package is (``vllm`` -> ``ray[llm]``, ``transformers`` -> the ``local`` extra).
    Reading ``hf://`` datasets needs ``datasets``, which the images lack.
    """
    wanted: list[str] = []
    if not is_ray_llm_image(image_uri):
        wanted += _package_requirements(ENGINE_EXTRAS[spec.engine.kind])
    if spec.data.input.startswith("hf://"):
        wanted += [r for r in _package_requirements(None) if r.startswith("datasets")] or [
            "datasets"
        ]
    return sorted(set(wanted))


def spec_file_name(spec: JobSpec) -> str:
    """``<job>-<first 10 hex of sha256(spec JSON)>.json``."""
    digest = hashlib.sha256(spec_json(spec).encode("utf-8")).hexdigest()[:10]
    return f"{spec.job}-{digest}.json"


def spec_json(spec: JobSpec) -> str:
    """The serialised spec, exactly as :func:`write_spec_json` writes it."""
    return spec.model_dump_json(indent=2)


def write_job_spec(spec: JobSpec, working_dir: Path) -> Path:
    """Write the spec under ``working_dir/.toolkit/specs/``; return the relative path."""
    relative = SPEC_DIR / spec_file_name(spec)
    target = Path(working_dir) / relative
    if not target.exists() or target.read_text(encoding="utf-8") != spec_json(spec):
        write_spec_json(spec, target)
    return relative


def is_remote_path(output: str) -> bool:
    return "://" in output


def output_location_warning(output: str, target: str) -> str | None:
    """Warn when results would land on one node's disk.

    Args:
        output: ``data.output``.
        target: ``"anyscale"`` (rendered file or Anyscale backend) or ``"ray"``
            (a Ray cluster that is not on this machine).
    """
    if is_remote_path(output):
        return None
    if target == "anyscale" and output.startswith(SHARED_STORAGE_PREFIXES):
        return None
    kind = "a relative path" if not os.path.isabs(output) else "a local path"
    if target == "anyscale":
        where = (
            "on Anyscale it would be written to the head node's disk, which worker "
            "nodes can't see and which is lost when the cluster shuts down"
        )
        suggestion = "--output /mnt/cluster_storage/<dir> (shared by every node) or s3://<bucket>/<dir>"
    else:
        where = (
            "on a remote Ray cluster it is written on the cluster's nodes"
            + (" inside the job's temporary working dir" if kind == "a relative path" else "")
            + ", not on this machine"
        )
        suggestion = "--output s3://<bucket>/<dir> or a path on storage every node shares"
    return f"data.output {output!r} is {kind}: {where}. Use {suggestion}."


def anyscale_compute_config(spec: JobSpec) -> dict[str, Any]:
    """The inline Anyscale compute config: head node plus one autoscaling worker group."""
    compute = spec.compute
    if compute.min_workers > compute.max_workers:
        raise SpecError(
            f"compute.min_workers ({compute.min_workers}) is more than compute.max_workers "
            f"({compute.max_workers}).",
            hint="Lower min_workers or raise max_workers.",
        )
    return {
        "head_node": {"instance_type": compute.head_instance_type},
        "worker_nodes": [
            {
                "instance_type": worker_instance_type(
                    spec.engine.accelerator_type, override=compute.worker_instance_type
                ),
                "min_nodes": compute.min_workers,
                "max_nodes": compute.max_workers,
            }
        ],
    }


@dataclass(frozen=True)
class Submission:
    """A prepared job and the warnings to show before sending it."""

    request: SubmitRequest
    spec: JobSpec
    warnings: list[str] = field(default_factory=list)


def prepare_submission(
    spec: JobSpec,
    *,
    target: str = "anyscale",
    local: bool = False,
    overwrite: bool = False,
    working_dir: Path = REPO_ROOT,
    environ: Mapping[str, str] | None = None,
) -> Submission:
    """Write the spec file and build the request every backend and the job.yaml use.

    Args:
        spec: The validated spec.
        target: ``"anyscale"`` or ``"ray"``; only changes the warnings.
        local: The job runs on a Ray head on this machine: a relative
            ``data.output`` is made absolute here (so results land where
            ``toolkit run`` would put them) and local cache paths are forwarded.
        overwrite: Let the job replace earlier results in ``data.output``.
        working_dir: The directory uploaded with the job; it must hold ``jobs/``
            and ``toolkit/``. Defaults to this repository.
        environ: Where local env vars are read from (default ``os.environ``).

    Raises:
        SpecError: the compute section can't be turned into instance types.
    """
    environ = os.environ if environ is None else environ
    working_dir = Path(working_dir).resolve()
    warnings: list[str] = []
    if local and not is_remote_path(spec.data.output) and not os.path.isabs(spec.data.output):
        spec = spec.model_copy(deep=True)
        spec.data.output = os.path.abspath(os.path.expanduser(spec.data.output))
    if not local:
        warning = output_location_warning(spec.data.output, target)
        if warning:
            warnings.append(warning)
    compute_config = anyscale_compute_config(spec)  # may refuse: before writing anything
    image_uri = spec.compute.image_uri or default_image_uri()
    spec_path = write_job_spec(spec, working_dir)
    env_vars = dict(DEFAULT_ENV_VARS)
    if local:
        env_vars.update({k: environ[k] for k in LOCAL_ENV_VARS if environ.get(k)})
    check_no_secrets(env_vars, "the job's env_vars")
    entrypoint = shlex.join(
        ["python", "-m", module_name_for(spec.job), "--spec", spec_path.as_posix()]
        + (["--overwrite"] if overwrite else [])
    )
    request = SubmitRequest(
        job=spec.job,
        name=spec.job,
        entrypoint=entrypoint,
        working_dir=working_dir,
        spec_path=spec_path,
        excludes=list(DEFAULT_EXCLUDES),
        requirements=job_requirements(spec, image_uri),
        env_vars=env_vars,
        image_uri=image_uri,
        compute_config=compute_config,
        max_retries=spec.compute.max_retries,
        cloud=spec.compute.cloud,
        output=spec.data.output,
    )
    size_warning = upload_size_warning(working_dir, request.excludes)
    if size_warning:
        warnings.append(size_warning)
    return Submission(request=request, spec=spec, warnings=warnings)


def anyscale_job_config(
    request: SubmitRequest,
    *,
    working_dir: str = ".",
    extra_env: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """The Anyscale ``JobConfig`` mapping, in job.yaml key order.

    Args:
        working_dir: ``"."`` for a file submitted from the repository root; the
            Anyscale backend passes the absolute path.
        extra_env: Added to ``env_vars`` (the backend's secrets; never rendered).
    """
    config: dict[str, Any] = {
        "name": request.name,
        "entrypoint": request.entrypoint,
        "image_uri": request.image_uri,
        "compute_config": request.compute_config,
    }
    if request.cloud:
        config["cloud"] = request.cloud
    config["working_dir"] = working_dir
    config["excludes"] = list(request.excludes)
    if request.requirements:
        config["requirements"] = list(request.requirements)
    env_vars = {**request.env_vars, **(extra_env or {})}
    if env_vars:
        config["env_vars"] = env_vars
    config["max_retries"] = request.max_retries
    return config


def anyscale_job_config_class() -> Any:
    """anyscale's ``JobConfig`` class, imported without loading Ray.

    ``import anyscale`` pulls in Ray only for its legacy Ray Client support
    (``anyscale.utils.connect_helpers`` does ``try: from ray.client_builder import
    ...`` and falls back when that fails). Blocking ``ray`` during that first
    import keeps render light; Ray imports normally afterwards, and nothing the
    toolkit uses depends on the fallback.
    """
    if "anyscale" not in sys.modules and "ray" not in sys.modules:
        sys.modules["ray"] = None  # type: ignore[assignment]
        try:
            import anyscale.job.models  # noqa: F401
        finally:
            if "ray" in sys.modules and sys.modules["ray"] is None:
                del sys.modules["ray"]
    from anyscale.job.models import JobConfig

    return JobConfig


def validate_job_config(config: Mapping[str, Any]) -> Any:
    """Validate with anyscale's own ``JobConfig`` (and so its ``ComputeConfig``).

    Returns:
        The ``anyscale.job.models.JobConfig``.

    Raises:
        SpecError: anyscale rejects it; its message is kept.
    """
    job_config_class = anyscale_job_config_class()
    try:
        return job_config_class.from_dict(dict(config))
    except (TypeError, ValueError) as exc:
        raise SpecError(
            f"The rendered job config is not valid for Anyscale: {exc}",
            hint="Check the compute section (instance types, min/max workers) and "
            "compute.image_uri.",
        ) from None


def job_yaml_text(request: SubmitRequest) -> str:
    """The job.yaml file: a comment header, then the validated config."""
    config = anyscale_job_config(request)
    check_no_secrets(config.get("env_vars", {}), "a rendered job.yaml")
    validate_job_config(config)
    header = [
        f"# Anyscale job for {request.job}, rendered by `toolkit render` from the spec in",
        f"# {request.spec_path.as_posix()} (keep the two together).",
        "# To change it, change the spec (template, -f FILE, flags, --set) and render again.",
        "#",
        '# Submit from the repository root (working_dir "." must hold jobs/ and toolkit/):',
        "#   anyscale job submit -f <this file> --env HF_TOKEN=$HF_TOKEN",
        f"# or let the toolkit do it: toolkit submit {request.job} <same flags> --backend anyscale",
        "# Secrets (HF_TOKEN, AWS_*, WANDB_API_KEY) are never written here; pass them at",
        "# submit time as above (toolkit submit forwards them from your environment).",
    ]
    if not request.requirements:
        header.append(
            f"# requirements: none beyond the image ({request.image_uri.split(':')[0]} ships "
            "vLLM, transformers and torch)."
        )
    body = yaml.safe_dump(config, sort_keys=False, default_flow_style=False, width=100)
    return "\n".join(header) + "\n" + body


@dataclass(frozen=True)
class RenderResult:
    text: str
    spec_path: Path
    warnings: list[str]


def render_job_yaml(
    spec: JobSpec, *, overwrite: bool = False, working_dir: Path = REPO_ROOT
) -> RenderResult:
    """Render ``spec`` to an Anyscale job.yaml (validated with anyscale's models).

    Writes the spec file into ``working_dir/.toolkit/specs/``; the caller writes
    the returned text wherever it likes.

    Raises:
        SpecError: the spec can't be rendered or anyscale rejects the result.
    """
    submission = prepare_submission(
        spec, target="anyscale", overwrite=overwrite, working_dir=working_dir
    )
    return RenderResult(
        text=job_yaml_text(submission.request),
        spec_path=submission.request.spec_path,
        warnings=submission.warnings,
    )
