"""Turn a validated spec into a job that runs elsewhere: the staged job, the entrypoint,
the upload, and the Anyscale ``job.yaml``.

What travels to the cluster:

- the **working dir** is the user's project (the current directory unless
  ``--working-dir`` says otherwise), so their data, job code and helper modules
  are there, as they are when they run locally;
- the **job**, staged inside it under ``.toolkit/specs/<job>-<hash>/``: the
  validated ``spec.json`` and a ``job.yaml`` naming the job's code (a copy of its
  Python file, or nothing for a prompt job);
- the **toolkit**, as a ``py_modules`` entry: a copy of this package staged under
  ``.toolkit/py_modules/<hash>/toolkit``, so neither an install on the cluster
  nor the toolkit's own checkout or site-packages is needed.

The same :class:`~toolkit.cluster.backends.base.SubmitRequest` feeds the rendered file, the Ray
Jobs backend and the Anyscale backend, so the three can't drift apart. Rendering is
deterministic: the spec file is named by the hash of its content, and the job.yaml
holds no timestamps, so rendering the same spec twice gives the same bytes.

This module must stay light: it imports neither Ray nor torch nor transformers (a
test checks ``sys.modules``), so ``toolkit render`` runs in about a second.
"""

from __future__ import annotations

import importlib.metadata
import os
import shlex
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from toolkit.cluster.backends.base import SubmitRequest, check_no_secrets
from toolkit.cluster.compute_table import worker_instance_type
from toolkit.cluster.data_placement import local_input, place_for_remote, place_for_this_machine
from toolkit.cluster.staging import PY_MODULES_DIR, shadowing_toolkit, stage_job, stage_toolkit
from toolkit.cluster.upload import (
    IGNORE_FILES,
    check_upload,
    measure_upload,
    rayignore_lines,
    upload_size_warning,
)
from toolkit.engines.registry import capabilities
from toolkit.errors import SpecError
from toolkit.redaction import redact
from toolkit.run.output.fingerprint import results_fingerprint
from toolkit.spec.job_definition import JobDefinition
from toolkit.spec.models import JobSpec

#: Left out of every upload: credentials, VCS data, environments, caches, build and
#: run outputs. Ray matches them as .gitignore lines (a name matches at any depth).
DEFAULT_EXCLUDES: list[str] = [
    # credentials: secrets come from the environment at submit time, never in files
    ".env*",
    ".netrc",
    ".git-credentials",
    ".aws",
    ".ssh",
    "*.pem",
    "*.key",
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
    # Uploaded on its own as py_modules; Ray matches excludes per upload, so this
    # only keeps it out of the working dir's copy.
    PY_MODULES_DIR.as_posix(),
]

#: Non-secret env vars every job gets. Unbuffered stdout makes followed logs live.
DEFAULT_ENV_VARS: dict[str, str] = {"PYTHONUNBUFFERED": "1"}

#: Env vars worth forwarding to a Ray head on this machine (paths valid here only).
LOCAL_ENV_VARS: tuple[str, ...] = ("TOOLKIT_CACHE_DIR", "HF_HOME", "TOOLKIT_DEBUG")

#: The ray-llm images are built for one Python and CUDA pair.
RAY_LLM_IMAGE = "anyscale/ray-llm:{ray_version}-py311-cu128"

#: What the toolkit itself needs on any cluster whose image isn't ray-llm (Ray and
#: pyarrow come with the cluster); the entrypoint checks them first thing.
RUNTIME_REQUIREMENTS: tuple[str, ...] = ("pydantic", "pyyaml", "jinja2")


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


def job_requirements(spec: JobSpec, image_uri: str | None) -> list[str]:
    """pip requirements the job needs on top of ``image_uri``, kept minimal.

    The ray-llm images already ship vLLM (with xgrammar and llguidance), transformers,
    torch, pydantic, pyyaml and jinja2, so only ``datasets`` (for ``hf://`` inputs) is added there.
    On another Anyscale image, the toolkit's own runtime packages and the engine's
    extra of this package (``vllm`` -> ``ray[llm]``, ``transformers`` -> the
    ``local`` extra). ``image_uri=None`` is a Ray cluster whose image we don't
    know: the runtime packages only, since engines come with GPU images and a pip
    install of torch per job would take minutes (the entrypoint names what's missing).
    """
    wanted: list[str] = []
    if image_uri is None or not is_ray_llm_image(image_uri):
        base = _package_requirements(None)
        wanted += [r for r in base if r.split(">")[0].split("<")[0].split("=")[0].strip()
                   in RUNTIME_REQUIREMENTS] or list(RUNTIME_REQUIREMENTS)
    if image_uri is not None and not is_ray_llm_image(image_uri):
        for _, engine in spec.model_stages:  # each kind's extra of this package
            extra = capabilities(engine).install_extra
            if extra is not None:
                wanted += _package_requirements(extra)
    if spec.data.input.startswith("hf://"):
        wanted += [r for r in _package_requirements(None) if r.startswith("datasets")] or [
            "datasets"
        ]
    return sorted(set(wanted))


def anyscale_compute_config(spec: JobSpec) -> dict[str, Any]:
    """The inline Anyscale compute config: head node plus one autoscaling worker group."""
    compute = spec.compute
    if compute.min_workers > compute.max_workers:
        raise SpecError(
            f"compute.min_workers ({compute.min_workers}) is more than compute.max_workers "
            f"({compute.max_workers}).",
            hint="Lower min_workers or raise max_workers.",
        )
    # The head runs the driver, whose loss ends the job: it stays on demand (anyscale's
    # HeadNodeConfig has no market). Workers name theirs only when it isn't the default,
    # so a job.yaml rendered before market_type existed renders the same.
    market = {} if compute.market_type == "ON_DEMAND" else {"market_type": compute.market_type}
    return {
        "head_node": {"instance_type": compute.head_instance_type},
        "worker_nodes": [
            {"instance_type": instance_type, "min_nodes": compute.min_workers,
             "max_nodes": compute.max_workers, **market}
            for instance_type in worker_instance_types(spec)
        ],
    }


def market_type_notice(spec: JobSpec, target: str) -> str | None:
    """What a submit to a Ray cluster says of ``compute.market_type``, which it can't send:
    the Ray Jobs API runs a job on the nodes the cluster has, and whether those are spot
    is the cluster's own configuration (its autoscaler's node types, KubeRay's groups)."""
    market = spec.compute.market_type
    if target != "ray" or market == "ON_DEMAND":
        return None
    return (f"compute.market_type {market} is for Anyscale's worker groups; a Ray cluster "
            "runs the job on the nodes it has (spot or not is set where the cluster is "
            "configured), so it is not sent.")


def worker_instance_types(spec: JobSpec) -> list[str]:
    """One worker instance type per accelerator the model stages ask for, the main
    engine's first: a multi-stage job (or a cascade's small model) on other GPUs gets a
    worker group for each; stages on the same GPU share one, sized for the most GPUs
    any of them needs on one node."""
    gpus: dict[str | None, tuple[str | None, int]] = {}
    for engine in (spec.engine, *(engine for _, engine in spec.model_stages)):
        accelerator = engine.accelerator_type
        key = accelerator.upper() if accelerator else None
        gpus[key] = (accelerator, max(gpus.get(key, (None, 0))[1], engine.gpus_per_worker))
    return list(dict.fromkeys(
        worker_instance_type(accelerator, override=spec.compute.worker_instance_type,
                             gpus=count)
        for accelerator, count in gpus.values()
    ))


def check_no_url_credentials(spec: JobSpec) -> None:
    """Refuse a spec whose URLs carry credentials (``s3://KEY:SECRET@bucket/x``, a
    presigned URL's signature): a submitted job's spec travels in files (``spec.json``
    in the upload, the job's metadata), and the cluster reads data with its own
    credentials, passed from the environment at submit time.

    Raises:
        SpecError: naming the fields, their URLs redacted.
    """
    found = _fields_with_credentials(spec.model_dump(mode="json"))
    if not found:
        return
    shown = "; ".join(f"{path} {redact(value)}" for path, value in found)
    raise SpecError(
        f"{shown}: a URL holding credentials can't be sent to a cluster: the job's spec "
        "travels as a file (the staged spec.json), and nothing secret is ever written.",
        hint="Remove them from the URL and let the cluster use its cloud's credentials: "
        "its instance role, or AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY / "
        "AWS_SESSION_TOKEN (HF_TOKEN, ...) in your environment, which toolkit submit "
        "passes to the job without writing them (anyscale job submit --env NAME=...). "
        "For a presigned URL, copy the file to storage the cluster can read.",
    )


def _fields_with_credentials(node: Any, path: str = "") -> list[tuple[str, str]]:
    if isinstance(node, dict):
        return [found for key, value in node.items()
                for found in _fields_with_credentials(value, f"{path}.{key}" if path else key)]
    if isinstance(node, list):
        return [found for i, value in enumerate(node)
                for found in _fields_with_credentials(value, f"{path}[{i}]")]
    if isinstance(node, str) and redact(node) != node:
        return [(path, node)]
    return []


@dataclass(frozen=True)
class Submission:
    """A prepared job and the warnings to show before sending it."""

    request: SubmitRequest
    spec: JobSpec
    warnings: list[str] = field(default_factory=list)
    #: What the user should know before it goes (where results land).
    notes: list[str] = field(default_factory=list)


def prepare_submission(
    job: JobDefinition[Any],
    spec: JobSpec,
    *,
    target: str = "anyscale",
    local: bool = False,
    overwrite: bool = False,
    working_dir: Path | None = None,
    environ: Mapping[str, str] | None = None,
    excludes: Sequence[str] = (),
    input_required: bool = True,
    check_tokens: bool = False,
    input_changed: str | None = None,
) -> Submission:
    """Stage the job in the working dir and build the request every backend and job.yaml use.

    What travels is measured first (see :mod:`toolkit.cluster.upload`), and the
    input and output are placed where the cluster reads and writes them (see
    :mod:`toolkit.cluster.data_placement`); both refuse up front, before anything
    is written or sent.

    Args:
        job: The job (its code is staged with the spec).
        spec: The validated spec.
        target: ``"anyscale"`` or ``"ray"``: the upload's limit and packer, where a
            relative output goes, and which requirements (an Anyscale image is
            known; a Ray cluster's is not).
        local: The cluster's nodes run on this machine and see its files at the same
            paths (a Ray head here): relative paths are made absolute, the input is
            read in place (not uploaded), and local cache paths are forwarded.
        overwrite: Let the job replace earlier results in ``data.output``.
        working_dir: The directory uploaded with the job: the user's project
            (default: the current directory). Only ``.toolkit/`` inside it is
            written to.
        environ: Where local env vars are read from (default ``os.environ``).
        excludes: More gitignore lines to leave out of the upload (``--exclude``).
        input_required: A local input must exist now (a submit); a rendered file
            goes later, so there a missing one is only a warning.
        check_tokens: The job counts every row's prompt tokens first and refuses to
            run if one can't fit the model (the entrypoint's ``--check-tokens``).
        input_changed: ``keep`` or ``redo``: what the job does where its input changed
            since the run in ``data.output`` wrote its rows (the entrypoint's
            ``--input-changed``); None: it refuses.

    Raises:
        SpecError: a URL in the spec carries credentials, the compute section
            can't be turned into instance types, the working dir isn't a directory,
            the upload is over the target's limit, the input can't reach the
            cluster, or (a remote Ray cluster) the output is a relative path.
    """
    check_no_url_credentials(spec)  # before anything is written
    environ = os.environ if environ is None else environ
    working_dir = Path.cwd() if working_dir is None else Path(working_dir).expanduser()
    if not working_dir.is_dir():
        raise SpecError(f"--working-dir: {working_dir} is not a directory.")
    working_dir = working_dir.resolve()
    warnings: list[str] = []
    shadowing = shadowing_toolkit(working_dir)
    left_out = [*DEFAULT_EXCLUDES, *shadowing, *excludes]
    if target == "anyscale":  # its packer reads .gitignore, not .rayignore
        left_out += rayignore_lines(working_dir)
    ignore_files = IGNORE_FILES if target == "ray" else (".gitignore",)
    if local:
        placement = place_for_this_machine(spec, working_dir)
        upload = measure_upload(working_dir, [*left_out, *placement.excludes], ignore_files)
    else:
        upload = measure_upload(working_dir, left_out, ignore_files)
        placement = place_for_remote(spec, upload, target, input_required)
    spec = placement.spec
    warnings += placement.warnings
    if target == "ray":
        check_upload(upload, input_path=local_input(spec) if not local else None)
    else:
        size_warning = upload_size_warning(upload)
        if size_warning:
            warnings.append(size_warning)
    compute_config = anyscale_compute_config(spec)  # may refuse: before writing anything
    image_uri = spec.compute.image_uri or default_image_uri()
    staged = stage_job(job, spec, working_dir)
    toolkit_copy = stage_toolkit(working_dir)
    env_vars = dict(DEFAULT_ENV_VARS)
    if local:
        env_vars.update({k: environ[k] for k in LOCAL_ENV_VARS if environ.get(k)})
    check_no_secrets(env_vars, "the job's env_vars")
    entrypoint = shlex.join(
        ["python", "-m", "toolkit.cli.entrypoint", "--job", staged.job_file.as_posix(),
         "--spec", staged.spec_file.as_posix()]
        + (["--overwrite"] if overwrite else [])
        + (["--check-tokens"] if check_tokens else [])
        + (["--input-changed", input_changed] if input_changed else [])
    )
    # What the job needs beyond the image; a Ray cluster installs only what it lacks
    # (RayJobsBackend.submit asks it first).
    requirements = job_requirements(spec, image_uri if target == "anyscale" else None)
    request = SubmitRequest(
        job=spec.job,
        name=spec.job,
        entrypoint=entrypoint,
        working_dir=working_dir,
        spec_path=staged.spec_file,
        py_modules=[toolkit_copy],
        excludes=[*left_out, *placement.excludes],
        requirements=requirements,
        env_vars=env_vars,
        image_uri=image_uri,
        compute_config=compute_config,
        max_retries=spec.compute.max_retries,
        cloud=spec.compute.cloud,
        output=spec.data.output,
        fingerprint=results_fingerprint(spec),
    )
    notice = market_type_notice(spec, target)
    notes = placement.notes + ([notice] if notice else [])
    if shadowing:
        notes.append(f"Leaving {' and '.join(p.strip('/') for p in shadowing)} out of the "
                     f"upload: on the cluster it would be imported instead of the toolkit "
                     f"staged in {PY_MODULES_DIR.as_posix()}/ (the working dir comes first on "
                     "the import path).")
    return Submission(request=request, spec=spec, warnings=warnings, notes=notes)


def anyscale_job_config(
    request: SubmitRequest,
    *,
    working_dir: str = ".",
    extra_env: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """The Anyscale ``JobConfig`` mapping, in job.yaml key order.

    Args:
        working_dir: ``"."`` for a file submitted from the project it was rendered
            in; the Anyscale backend passes the absolute path.
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
    # Relative to working_dir in a rendered file (submitted from there); absolute otherwise.
    config["py_modules"] = [
        path.as_posix() if working_dir == "." else str(request.working_dir / path)
        for path in request.py_modules
    ]
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
        f"# {request.spec_path.as_posix()} (keep .toolkit/ with this file).",
        "# To change it, change the spec (job file, -f FILE, flags, --set) and render again.",
        "#",
        "# Submit from the folder it was rendered in (working_dir \".\" is your project; the",
        "# toolkit travels as py_modules from .toolkit/py_modules):",
        "#   anyscale job submit -f <this file> --env HF_TOKEN=$HF_TOKEN",
        f"# or let the toolkit do it: toolkit submit {request.job} <same flags> --backend anyscale",
        "# Secrets (HF_TOKEN, AWS_*, WANDB_API_KEY) are never written here; pass them at",
        "# submit time as above (toolkit submit forwards them from your environment).",
        f"# Results: {request.output} (data.output).",
    ]
    if not request.requirements:
        header.append(
            f"# requirements: none beyond the image ({request.image_uri.split(':')[0]} ships "
            "vLLM, transformers, torch, pydantic, pyyaml and jinja2)."
        )
    body = yaml.safe_dump(config, sort_keys=False, default_flow_style=False, width=100)
    return "\n".join(header) + "\n" + body


@dataclass(frozen=True)
class RenderResult:
    text: str
    spec_path: Path
    warnings: list[str]
    notes: list[str] = field(default_factory=list)


def render_job_yaml(
    job: JobDefinition[Any],
    spec: JobSpec,
    *,
    overwrite: bool = False,
    working_dir: Path | None = None,
    excludes: Sequence[str] = (),
) -> RenderResult:
    """Render ``spec`` to an Anyscale job.yaml (validated with anyscale's models).

    Stages the job and the toolkit under ``working_dir/.toolkit/`` (default: the
    current directory, the user's project); the caller writes the returned text
    wherever it likes, normally into that same folder.

    Raises:
        SpecError: the spec can't be rendered or anyscale rejects the result.
    """
    submission = prepare_submission(
        job, spec, target="anyscale", overwrite=overwrite, working_dir=working_dir,
        excludes=excludes, input_required=False,
    )
    return RenderResult(
        text=job_yaml_text(submission.request),
        spec_path=submission.request.spec_path,
        warnings=submission.warnings,
        notes=submission.notes,
    )
