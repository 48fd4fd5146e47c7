"""Input formats with behaviour of their own, behind one interface the run layer calls
for every run.

Most formats (CSV, Parquet, JSON, image folders, Hugging Face datasets) are rows to
read and nothing more: :mod:`toolkit.run.input.reading` reads them, and their
:class:`RunFormat` does nothing at each step. A format that does more (the OpenAI
Batch API request file: staged and checked once, its own output file when the run is
complete) subclasses :class:`RunFormat` in its own module and registers it for its
``data.format`` with :func:`register_format`. The run layer asks :func:`run_format`
and calls the same steps whatever the format is; no other module of it names a format.

The steps, in a run's order:

1. :meth:`RunFormat.stage`, in preflight, before Ray starts (it takes the spec): a
   bad file fails here.
2. :meth:`RunFormat.open`, the run's rows as a Ray Dataset (None: read as usual);
   from here on each step takes the run's plan.
3. :meth:`RunFormat.staged_rows`, the rows the run will write once staged (progress).
4. :meth:`RunFormat.finish`, once every row is written: e.g. another output file,
   returning a note for the summary.

Example:
    >>> run_format(spec.data).stage(spec, run_dir)  # doctest: +SKIP
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, ClassVar

if TYPE_CHECKING:
    from ray.data import Dataset

    from toolkit.run.output.run_directory import RunDirectory
    from toolkit.run.run_plan import RunPlan
    from toolkit.spec.models import DataConfig, JobSpec

#: The modules whose import registers the formats with behaviour.
FORMAT_MODULES = ("toolkit.run.input.openai_batch",)


class RunFormat:
    """A ``data.format``'s part in a run; this base is a format of plain rows."""

    #: The format stages its rows into the run directory itself: the staged rows are
    #: what the run reads, and their count is the run's total.
    stages_rows: ClassVar[bool] = False

    def stage(self, spec: "JobSpec", run_dir: "RunDirectory") -> None:
        """Before Ray starts: prepare (and check) the input, so a bad file fails early.

        Raises:
            InputDataError: naming the file, line or row and what to do.
        """

    def open(self, plan: "RunPlan") -> "Dataset | None":
        """The run's rows, or None to read ``data.input`` as its format says."""
        return None

    def staged_rows(self, run_dir: "RunDirectory") -> int | None:
        """Rows staged for the run (``stages_rows`` formats), None until known."""
        return None

    def finish(self, plan: "RunPlan") -> str | None:
        """Once every row is written: what else the format writes; a note for the summary."""
        return None


_PLAIN = RunFormat()
_FORMATS: dict[str, RunFormat] = {}


def register_format(name: str, behaviour: RunFormat) -> RunFormat:
    """Give ``data.format: name`` this behaviour."""
    _FORMATS[name] = behaviour
    return behaviour


def _formats() -> dict[str, RunFormat]:
    if not _FORMATS:
        for module in FORMAT_MODULES:
            importlib.import_module(module)
    return _FORMATS


def run_format(data: "DataConfig") -> RunFormat:
    """The behaviour of ``data.format`` (the plain one for formats that only read rows)."""
    return _formats().get(data.format, _PLAIN)
