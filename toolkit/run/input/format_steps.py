"""The steps of a run a ``data.format`` takes part in (:class:`RunFormat`), and the
formats registered with steps of their own.

Below both :mod:`toolkit.run.input.formats` (which looks a format up) and the formats
with behaviour (:mod:`toolkit.run.input.openai_batch` subclasses :class:`RunFormat` and
registers itself here), so neither imports the other back.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, ClassVar

if TYPE_CHECKING:
    from ray.data import Dataset

    from toolkit.run.output.run_directory import RunDirectory
    from toolkit.run.run_plan import RunPlan
    from toolkit.spec.models import JobSpec


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


_FORMATS: dict[str, RunFormat] = {}


def register_format(name: str, behaviour: RunFormat) -> RunFormat:
    """Give ``data.format: name`` this behaviour."""
    _FORMATS[name] = behaviour
    return behaviour


def registered_formats() -> dict[str, RunFormat]:
    """The formats registered so far, by ``data.format``."""
    return _FORMATS
