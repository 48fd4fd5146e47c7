"""Where jobs come from: the built-ins shipped with the toolkit, and the user's own files.

A job is named on the command line in one of three ways:

- a built-in's name (``text-industry``): its job file ships inside the package;
- a path to a job file (``./sentiment.yaml``, ``jobs/my_job.py``);
- a name of a job file in the current project (``sentiment`` finds
  ``./sentiment.yaml`` or ``./sentiment.py``), or an importable module
  (``my_project.jobs.sentiment``) that defines ``JOB``.

A **YAML job file** holds ``job`` (its name), ``description``, then either
``prompt`` + ``output`` (a prompt job: no Python at all, see
:mod:`toolkit.spec.jobs.prompt_job`) or ``python: FILE.py | module.name`` (code that
defines ``JOB = JobDefinition(...)``), plus any spec sections (``data``,
``engine``, ``sampling``, ``compute``, ``options``) as the job's defaults, and
``smoke`` (dotted keys ``--smoke`` sets). A **Python job file** defines ``JOB``
with its defaults inline. Built-ins are written the same way users write theirs.

Python job code is loaded by path under a private module name; the run layer
ships such modules to Ray workers by value (see
:func:`toolkit.run.driver.run_pipeline`), so they need not be installed anywhere.
"""

from __future__ import annotations

import importlib
import importlib.util
import re
import sys
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from toolkit.errors import SpecError
from toolkit.spec.job_definition import JobDefinition
from toolkit.spec.jobs.job_names import JOB_NAME_RULE, job_name_problem
from toolkit.spec.loading import deep_merge, read_yaml_file

#: Top-level keys of a YAML job file that are about the job, not spec defaults.
JOB_FILE_KEYS = ("job", "description", "python", "predictor", "smoke")
#: Where user job code is registered in ``sys.modules``.
USER_MODULE_PREFIX = "toolkit_user_jobs."


def package_dir() -> Path:
    return Path(__file__).resolve().parents[2]


def builtin_jobs_dir() -> Path:
    """The built-in job files: inside the installed package, or the checkout's ``templates/``.

    The wheel maps the repository's top-level ``templates/`` and ``jobs/`` to
    ``toolkit/builtin/templates`` and ``toolkit/builtin/jobs``; a source checkout
    keeps them beside ``toolkit/``. Relative ``python:`` paths work in both.
    """
    shipped = package_dir() / "builtin" / "templates"
    if shipped.is_dir():
        return shipped
    return package_dir().parent / "templates"


@dataclass(frozen=True)
class JobRef:
    """A job found on disk (or importable), before its code is loaded."""

    name: str
    path: Path | None = None
    module: str | None = None
    builtin: bool = False
    description: str = ""

    @property
    def shown_as(self) -> str:
        """How to name it on the command line."""
        if self.builtin:
            return self.name
        if self.path is not None:
            return _relative(self.path)
        return self.module or self.name


def _relative(path: Path) -> str:
    try:
        shown = path.resolve().relative_to(Path.cwd().resolve())
    except ValueError:
        return str(path)
    return f"./{shown.as_posix()}"


def builtin_jobs() -> list[JobRef]:
    return [_describe(path, builtin=True) for path in sorted(builtin_jobs_dir().glob("*.yaml"))]


def project_jobs(project: Path | None = None) -> list[JobRef]:
    """Job files at the top of ``project`` (default: the current directory).

    A YAML file counts when it has a ``job:`` key and ``prompt:`` or ``python:``; a
    Python file when it mentions ``JobDefinition(``. Others are left alone.
    """
    project = Path.cwd() if project is None else Path(project)
    found = []
    for path in sorted(project.glob("*.yaml")) + sorted(project.glob("*.yml")):
        data = _peek_yaml(path)
        if data is not None and "job" in data and any(
                key in data for key in ("prompt", "python", "predictor")):
            found.append(_describe(path, builtin=False, data=data))
    for path in sorted(project.glob("*.py")):
        try:
            text = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError):
            continue
        if "JobDefinition(" in text:
            found.append(JobRef(name=path.stem.replace("_", "-"), path=path.resolve(),
                                description=_docstring_line(text)))
    return found


def list_jobs(project: Path | None = None) -> list[JobRef]:
    """The built-ins, then the jobs found in ``project``."""
    return builtin_jobs() + project_jobs(project)


def find_job(reference: str, project: Path | None = None) -> JobRef:
    """What ``reference`` (a name, a file path or a module) names.

    Raises:
        SpecError: nothing by that name, naming what exists.
    """
    project = Path.cwd() if project is None else Path(project)
    as_path = Path(reference).expanduser()
    if reference.endswith((".yaml", ".yml", ".py")) or "/" in reference:
        if as_path.is_dir():
            inside = sorted(p.name for p in as_path.iterdir()
                            if p.suffix in (".yaml", ".yml", ".py"))[:3]
            raise SpecError(
                f"Job file {reference} is a directory, not a job file.",
                hint=(f"Name a job file inside it: {', '.join(str(as_path / n) for n in inside)}."
                      if inside else "Name a YAML or Python job file, or run 'toolkit jobs' "
                      "to list the jobs found here."),
            )
        if not as_path.is_file():
            raise SpecError(
                f"Job file {reference} does not exist.",
                hint="Check the path, or run 'toolkit jobs' to list the jobs found here.",
            )
        return _describe(as_path.resolve(), builtin=False)
    for candidate in (f"{reference}.yaml", f"{reference}.yml", f"{reference}.py",
                      f"{reference.replace('-', '_')}.py"):
        if (project / candidate).is_file():
            return _describe((project / candidate).resolve(), builtin=False)
    builtin = {job.name: job for job in builtin_jobs()}
    if reference in builtin:
        return builtin[reference]
    if "." in reference and importlib.util.find_spec(reference.split(".")[0]) is not None:
        return JobRef(name=reference.rsplit(".", 1)[-1].replace("_", "-"), module=reference)
    known = [job.shown_as for job in list_jobs(project)]
    raise SpecError(
        f"Unknown job {reference!r}. Available jobs: {', '.join(known) or 'none'}.",
        hint="Name a built-in job, a job file (./my-job.yaml), or create one with "
        "'toolkit new NAME'.",
    )


def find_job_named(name: str, project: Path | None = None) -> JobRef:
    """The job whose name is ``name``, as a run folder's manifest records it: a built-in,
    or a job file at the top of ``project`` (default: the current directory) whose
    ``job:`` (or file name) is ``name``. Never a path, a module, or anything else the
    name could be made to point at: a manifest is data, so it can't choose code to run.

    Raises:
        SpecError: ``name`` is not a job name, or no built-in or job file here has it.
    """
    problem = job_name_problem(name)
    if problem is not None:
        raise SpecError(f"The run's manifest names its job {problem}; a job name never "
                        "points at a file.",
                        hint="Name the job yourself with --job (a built-in, or ./my-job.yaml).")
    builtin = {job.name: job for job in builtin_jobs()}
    if name in builtin:
        return builtin[name]
    matches = [job for job in project_jobs(project) if job.name == name]
    if len(matches) == 1:
        return matches[0]
    where = Path.cwd() if project is None else Path(project)
    if matches:
        raise SpecError(
            f"Job {name!r} is defined by more than one file in {where}: "
            f"{', '.join(job.shown_as for job in matches)}.",
            hint=f"Name the one the run used with --job, e.g. --job {matches[0].shown_as}.",
        )
    raise SpecError(
        f"The run is of job {name!r}, which is neither a built-in nor a job file in {where} "
        f"(a YAML file with job: {name}, or a Python job file of that name).",
        hint="Run the command from the folder that holds the job file, or name it with "
        "--job ./my-job.yaml.",
    )


def load_job(reference: str | JobRef, project: Path | None = None) -> JobDefinition[Any]:
    """The job ``reference`` names, with the defaults its file declares.

    Raises:
        SpecError: unknown job, unreadable job file, or code without a ``JOB``.
    """
    ref = reference if isinstance(reference, JobRef) else find_job(reference, project)
    if ref.module is not None:
        return _job_from_module(importlib.import_module(ref.module), ref.module)
    assert ref.path is not None
    if ref.path.suffix == ".py":
        job = _job_from_module(import_job_file(ref.path), str(ref.path))
        return job if ref.builtin else replace(job, source_dir=ref.path.parent)
    job = _job_from_yaml(ref.path, builtin=ref.builtin)
    return job if ref.builtin else replace(job, source_dir=ref.path.parent)


def _job_from_yaml(path: Path, builtin: bool) -> JobDefinition[Any]:
    data = read_yaml_file(path, what="Job file")
    name = str(data.get("job") or path.stem)
    problem = job_name_problem(name)
    if problem is not None:
        raise SpecError(f"Job file {path}: job: {problem}. It names the output folder "
                        "(out/<job>) and the files rendered for a cluster.",
                        hint="Give the job a plain name, e.g. job: review-sentiment.")
    description = str(data.get("description") or "")
    smoke = data.get("smoke") or {}
    if not isinstance(smoke, dict):
        raise SpecError(f"Job file {path}: 'smoke' must map dotted keys to values.")
    defaults = {k: v for k, v in data.items() if k not in JOB_FILE_KEYS}
    defaults["job"] = name
    if data.get("predictor") is not None:  # the model stage is the user's own class
        from toolkit.spec.jobs.predictor_job import predictor_job_definition
        from toolkit.spec.jobs.user_classes import check_user_class

        predictor = str(data["predictor"])
        if not builtin:  # a class of the job's own folder, read (not imported) here
            predictor = check_user_class(predictor, "engine.model", base=path.parent,
                                         projects=[path.parent])
        return predictor_job_definition(name, description, predictor, defaults,
                                        smoke_overrides=smoke)
    python = data.get("python")
    if python is None:
        if "prompt" not in data:
            raise SpecError(
                f"Job file {path} has neither 'prompt' (a prompt job) nor 'python' "
                "(code that defines JOB).",
                hint="See 'toolkit new NAME' for a complete example.",
            )
        from toolkit.spec.jobs.prompt_job import prompt_job_definition

        return prompt_job_definition(
            name, description, defaults,
            smoke_overrides={"engine.model": "sample:tiny-chat", **smoke},
        )
    code = _job_code(path, str(python), builtin)
    if isinstance(code, Path):
        job = _job_from_module(import_job_file(code), str(code))
    else:
        try:
            module = importlib.import_module(code)
        except ModuleNotFoundError as exc:
            raise SpecError(f"Job file {path}: python: module {code!r} can't be imported "
                            f"({exc}).", hint="Name a .py file beside the job file "
                            "(python: my_job.py) or an installed module.") from None
        job = _job_from_module(module, code)
    return replace(
        job, name=name, description=description or job.description,
        defaults=deep_merge(dict(job.defaults), defaults),
        smoke_overrides={**job.smoke_overrides, **smoke},
    )


def _job_code(job_file: Path, python: str, builtin: bool) -> Path | str:
    """What a YAML job's ``python:`` names: a ``.py`` file in the job file's folder (or
    below it), or a dotted module name. Built-in job files keep their code in the
    package's ``jobs/``, beside their folder.

    Raises:
        SpecError: anything else (a path out of the folder, a file that is not .py).
    """
    folder = job_file.parent.resolve()
    if not python.endswith(".py"):
        if all(part.isidentifier() for part in python.split(".")):
            return python
        raise SpecError(
            f"Job file {job_file}: python: {python!r} is neither a .py file nor a module name.",
            hint="Write python: my_job.py (a Python file beside the job file) or "
            "python: my_package.my_job (an importable module).",
        )
    code = Path(python).expanduser()
    code = (code if code.is_absolute() else folder / code).resolve()
    if not builtin and not code.is_relative_to(folder):
        raise SpecError(
            f"Job file {job_file}: python: {python} is outside the job file's folder "
            f"({folder}).",
            hint="Keep the job's code beside the job file or below it, "
            "e.g. python: my_job.py.",
        )
    if not code.is_file():
        raise SpecError(f"Job file {job_file}: python file {python} does not exist.")
    return code


def import_job_file(path: Path) -> Any:
    """Import a Python job file under a private name (``toolkit_user_jobs.<stem>_<hash>``)."""
    import hashlib

    path = Path(path).resolve()
    digest = hashlib.sha256(str(path).encode()).hexdigest()[:8]
    stem = re.sub(r"\W", "_", path.stem)
    name = f"{USER_MODULE_PREFIX}{stem}_{digest}"
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise SpecError(f"Can't import job file {path}.")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except SpecError:
        del sys.modules[name]
        raise
    except Exception as exc:
        del sys.modules[name]
        raise SpecError(
            f"Job file {path} failed to import: {type(exc).__name__}: {exc}",
            hint="Run it with python to see the traceback, or set TOOLKIT_DEBUG=1.",
        ) from exc
    return module


def _job_from_module(module: Any, where: str) -> JobDefinition[Any]:
    job = getattr(module, "JOB", None)
    if not isinstance(job, JobDefinition):
        raise SpecError(
            f"{where} does not define JOB = JobDefinition(...).",
            hint="See 'toolkit new NAME --python' for a complete example.",
        )
    problem = job_name_problem(job.name)
    if problem is not None:
        raise SpecError(f"{where}: JOB's name {problem}.",
                        hint="Give the job a plain name, e.g. name='review-sentiment'.")
    return job


def _peek_yaml(path: Path) -> dict[str, Any] | None:
    try:
        return read_yaml_file(path, what="Job file")
    except SpecError:
        return None


def _describe(path: Path, builtin: bool, data: dict[str, Any] | None = None) -> JobRef:
    if path.suffix == ".py":
        text = path.read_text(encoding="utf-8", errors="replace")
        return JobRef(name=path.stem.replace("_", "-"), path=path, builtin=builtin,
                      description=_docstring_line(text))
    data = data if data is not None else _peek_yaml(path) or {}
    return JobRef(name=str(data.get("job") or path.stem), path=path, builtin=builtin,
                  description=str(data.get("description") or ""))


def _docstring_line(text: str) -> str:
    """The first line of a Python file's docstring (its description), without running it."""
    import ast

    try:
        docstring = ast.get_docstring(ast.parse(text)) or ""
    except SyntaxError:
        return ""
    return docstring.strip().splitlines()[0] if docstring.strip() else ""


def check_job_name(name: str) -> str:
    """A name for ``toolkit new``: a job name (see :mod:`toolkit.spec.jobs.job_names`)."""
    if job_name_problem(name) is not None:
        raise SpecError(
            f"Job name {name!r} is not usable as a file name.",
            hint=f"Use {JOB_NAME_RULE}, e.g. 'review-sentiment'.",
        )
    return name
