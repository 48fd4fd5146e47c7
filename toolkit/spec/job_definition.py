"""What a job is, and how the toolkit finds one by name.

A job is one module in ``jobs/`` (``jobs.text_industry`` for ``text-industry``) that
exposes ``JOB = JobDefinition(...)``, plus one template ``templates/<name>.yaml``.
Nothing else needs to change to add a job: the CLI lists jobs from the templates
folder and imports the module by name.
"""

from __future__ import annotations

import importlib
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Generic, TypeVar

from toolkit.errors import SpecError
from toolkit.spec.models import JobSpec, StrictModel

OptionsT = TypeVar("OptionsT", bound=StrictModel)

REPO_ROOT = Path(__file__).resolve().parents[2]


def templates_dir() -> Path:
    """``$TOOLKIT_TEMPLATES_DIR`` if set, else the repository's ``templates/``."""
    return Path(os.environ.get("TOOLKIT_TEMPLATES_DIR", REPO_ROOT / "templates"))


@dataclass(frozen=True)
class JobDefinition(Generic[OptionsT]):
    """A job's contract with the shared pipeline.

    Attributes:
        name: The CLI name, e.g. ``text-industry``.
        description: One line for ``toolkit jobs``.
        spec_model: The job's ``JobSpec`` subclass (its ``options`` narrowed).
        preprocess: ``(row, options) -> {"messages": [...]}`` for one input row.
            Raising ``ValueError`` makes that row an error row (the message is
            kept in its ``error`` column) instead of failing the job.
        postprocess: ``(row, options) -> {result columns}`` from a row that has
            ``generated_text``. Raising ``ValueError`` makes it an error row.
        required_columns: ``options -> columns`` the input must have; checked
            before any model loads.
        id_column: ``options -> column`` that identifies a row (kept in the output).
        smoke_overrides: dotted spec paths set by ``--smoke`` (sample input and
            tiny model) before the user's own flags are applied.
        structured_output: ``options -> constraint`` in vLLM's structured-outputs
            form (``{"choice": [...]}``, ``{"regex": ...}``) or ``None``; both
            engines honour it.
        result_columns: column name -> Arrow type alias of what postprocess
            returns; null on error rows, and the same type in every file.
        drop_columns: ``options -> columns`` of the input not to write (e.g.
            image bytes).
        summary_columns / summarize: job-specific figures for the run summary
            (e.g. accuracy), computed from just these columns of the output.
    """

    name: str
    description: str
    spec_model: type[JobSpec]
    preprocess: Callable[[dict[str, Any], OptionsT], dict[str, Any]]
    postprocess: Callable[[dict[str, Any], OptionsT], dict[str, Any]]
    required_columns: Callable[[OptionsT], list[str]]
    id_column: Callable[[OptionsT], str]
    structured_output: Callable[[OptionsT], dict[str, Any] | None]
    result_columns: dict[str, str]
    smoke_overrides: dict[str, Any] = field(default_factory=dict)
    drop_columns: Callable[[OptionsT], list[str]] | None = None
    summary_columns: tuple[str, ...] = ()
    summarize: Callable[[Any], dict[str, int | float]] | None = None
    multimodal: bool = False

    @property
    def module_name(self) -> str:
        return module_name_for(self.name)

    @property
    def template_path(self) -> Path:
        return templates_dir() / f"{self.name}.yaml"


def module_name_for(job_name: str) -> str:
    return "jobs." + job_name.replace("-", "_")


def list_jobs() -> list[str]:
    """Names of the jobs that have a template, sorted."""
    return sorted(p.stem for p in templates_dir().glob("*.yaml"))


def load_job(name: str) -> JobDefinition[Any]:
    """Import ``jobs.<name>`` and return its ``JOB``.

    Raises:
        SpecError: no template or module by that name, naming the jobs that exist.
    """
    available = list_jobs()
    if name not in available:
        raise SpecError(
            f"Unknown job {name!r}. Available jobs: {', '.join(available) or 'none'}.",
            hint="Run 'toolkit jobs' to list them with a one-line description each.",
        )
    module = importlib.import_module(module_name_for(name))
    job = getattr(module, "JOB", None)
    if not isinstance(job, JobDefinition):
        raise SpecError(f"Module {module.__name__} does not define JOB = JobDefinition(...).")
    return job
