"""What a submitted job takes with it, staged in the user's project under ``.toolkit/``.

- ``.toolkit/specs/<job>-<hash>/``: ``spec.json`` (the validated spec), ``job.yaml``
  (the job: a prompt job's prompt and output, or ``python: job_code.py``) and, for
  a Python job loaded from a file, ``job_code.py`` (a copy of that file). The hash
  covers all three, so staging the same job twice gives the same bytes and path.
- ``.toolkit/py_modules/toolkit/``: a copy of this package as installed (every file
  its distribution records: sources, the report's template, the built-in jobs),
  uploaded as ``py_modules``; refreshed only when it differs.

Nothing is ever written into the toolkit's own checkout or install dir (unless
the user runs from inside it). ``.toolkit/`` must not be listed in ``.gitignore``:
Ray's upload honours ``.gitignore``.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from toolkit.spec.job_definition import JobDefinition
from toolkit.spec.jobs.catalog import USER_MODULE_PREFIX, package_dir
from toolkit.spec.jobs.prompt_job import PromptJobSpec
from toolkit.spec.models import JobSpec

STAGING_DIR = Path(".toolkit")
SPECS_DIR = STAGING_DIR / "specs"
PY_MODULES_DIR = STAGING_DIR / "py_modules"
SPEC_FILE = "spec.json"
JOB_FILE = "job.yaml"
JOB_CODE_FILE = "job_code.py"


@dataclass(frozen=True)
class StagedJob:
    """Paths relative to the working dir."""

    directory: Path
    spec_file: Path
    job_file: Path


def job_bundle(job: JobDefinition[Any], spec: JobSpec) -> dict[str, str]:
    """The files that let the entrypoint load ``job`` and run ``spec``: name -> text."""
    files = {SPEC_FILE: spec.model_dump_json(indent=2)}
    description = {"job": job.name, "description": job.description}
    module = sys.modules.get(job.main_stage.preprocess.__module__)
    if isinstance(spec, PromptJobSpec):
        dumped = spec.model_dump(mode="json")
        job_file: dict[str, Any] = {**description, "prompt": dumped["prompt"],
                                    "output": dumped["output"]}
    elif module is not None and module.__name__.startswith(USER_MODULE_PREFIX):
        files[JOB_CODE_FILE] = Path(str(module.__file__)).read_text(encoding="utf-8")
        job_file = {**description, "python": JOB_CODE_FILE}
    else:  # code importable by module name: from the working dir or an installed package
        job_file = {**description, "python": job.main_stage.preprocess.__module__}
    files[JOB_FILE] = yaml.safe_dump(job_file, sort_keys=False, allow_unicode=True)
    return files


def stage_job(job: JobDefinition[Any], spec: JobSpec, working_dir: Path) -> StagedJob:
    """Write the job's bundle under ``working_dir/.toolkit/specs/<job>-<hash>/``."""
    files = job_bundle(job, spec)
    digest = hashlib.sha256(json.dumps(files, sort_keys=True).encode()).hexdigest()[:10]
    relative = SPECS_DIR / f"{spec.job}-{digest}"
    _write_files(Path(working_dir) / relative, files)
    return StagedJob(relative, relative / SPEC_FILE, relative / JOB_FILE)


#: The distribution this package is installed from.
DISTRIBUTION = "batch-llm-toolkit"
#: In a source checkout, the top-level folders the wheel ships inside the package
#: (pyproject's ``package-dir``): checkout folder -> where the wheel puts it.
CHECKOUT_BUILTINS = {"templates": "builtin/templates", "jobs": "builtin/jobs"}


def toolkit_files() -> dict[str, bytes]:
    """This package's files, relative to the package: exactly what the installed
    package holds (its sources, the report's template, the built-in jobs), as the
    installer recorded them, so nothing a run needs is left behind.

    From a source checkout or an editable install (whose record lists no package
    files) it is every file of the package folder but caches, plus the checkout's
    built-in jobs where the wheel puts them.
    """
    root = package_dir()
    recorded = _installed_files(root)
    if recorded is not None:
        return {name: (root / name).read_bytes() for name in sorted(recorded)}
    found: dict[str, bytes] = {}
    for current, dirs, names in os.walk(root):
        dirs[:] = sorted(d for d in dirs if d != "__pycache__")
        for name in sorted(names):
            if not name.endswith((".pyc", ".pyo")):
                path = Path(current) / name
                found[path.relative_to(root).as_posix()] = path.read_bytes()
    for folder, shipped_as in CHECKOUT_BUILTINS.items():
        source = root.parent / folder
        if (root / shipped_as).is_dir() or not source.is_dir():
            continue
        for path in sorted(source.iterdir()):
            if path.is_file() and path.suffix in (".yaml", ".py"):
                found[f"{shipped_as}/{path.name}"] = path.read_bytes()
    return found


def _installed_files(root: Path) -> list[str] | None:
    """The package's files as its distribution's record lists them (relative to
    ``root``); None when this package was not installed from one (a checkout, an
    editable install) or the record doesn't describe this very folder."""
    import importlib.metadata

    try:
        distribution = importlib.metadata.distribution(DISTRIBUTION)
    except importlib.metadata.PackageNotFoundError:
        return None
    # Only an installer's RECORD says what was installed (a checkout's *.egg-info
    # lists its sources as they were when it was made).
    if distribution.read_text("RECORD") is None:
        return None
    names = []
    for file in distribution.files or []:
        if file.parts[0] != root.name or file.suffix in (".pyc", ".pyo") \
                or "__pycache__" in file.parts:
            continue
        located = Path(str(file.locate())).resolve()
        if root not in located.parents or not located.is_file():
            return None
        names.append(located.relative_to(root).as_posix())
    return names or None


def stage_toolkit(working_dir: Path) -> Path:
    """Copy this package to ``working_dir/.toolkit/py_modules/toolkit``; return that, relative.

    The copy is replaced only when its files differ, by renaming a complete new
    copy into place, so a job uploading the old one never sees half a package.
    """
    relative = PY_MODULES_DIR / "toolkit"
    target = Path(working_dir) / relative
    files = toolkit_files()
    if target.is_dir() and _same_files(target, files):
        return relative
    target.parent.mkdir(parents=True, exist_ok=True)
    fresh = Path(tempfile.mkdtemp(prefix=".toolkit-", dir=target.parent))
    for name, content in files.items():
        path = fresh / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(content)
    if target.exists():
        old = target.with_name(f".old-{fresh.name}")
        target.rename(old)
        fresh.rename(target)
        shutil.rmtree(old, ignore_errors=True)
    else:
        fresh.rename(target)
    return relative


def shadowing_toolkit(working_dir: Path) -> list[str]:
    """Upload excludes for a ``toolkit`` package or module at the top of ``working_dir``
    (the toolkit's own checkout, or a user's folder of that name); empty when none.

    On the cluster the working dir comes first on the import path (the job's current
    directory for ``python -m``, and first on ``PYTHONPATH`` for Ray's workers), so a
    ``toolkit`` there is imported instead of the staged copy: a checkout older or newer
    than the installed toolkit fails with ``No module named 'toolkit.…'``. Leaving it
    out of the upload lets the staged copy, the one this submit checked, win. A folder
    named ``toolkit`` without ``__init__.py`` hides nothing (a namespace portion gives
    way to a package later on the path) and travels.
    """
    name = package_dir().name
    root = Path(working_dir)
    found = []
    if (root / name / "__init__.py").is_file():
        found.append(f"/{name}/")
    if (root / f"{name}.py").is_file():
        found.append(f"/{name}.py")
    return found


def _same_files(directory: Path, files: dict[str, bytes]) -> bool:
    present = {
        p.relative_to(directory).as_posix() for p in directory.rglob("*")
        if p.is_file() and "__pycache__" not in p.parts
    }
    if present != set(files):
        return False
    return all((directory / name).read_bytes() == content for name, content in files.items())


def _write_files(directory: Path, files: dict[str, str]) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    for name, text in files.items():
        path = directory / name
        if not path.exists() or path.read_text(encoding="utf-8") != text:
            path.write_text(text, encoding="utf-8")
