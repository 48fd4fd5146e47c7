"""What a caller follows of a run while it goes: one object, not a handful of callbacks.

The driver (:func:`toolkit.run.driver.execute`) tells its :class:`RunObserver` when Ray
is up, what the run does before its first row, how far it is, what a user must know
that Ray only wrote to its log, and that the cluster was lost. The base class does
nothing with the first four; ``toolkit run``'s terminal line
(:class:`~toolkit.run.progress.display.ProgressDisplay`) and a submitted job's log
(:class:`~toolkit.run.progress.job_log.JobLogWriter`) are the two observers.

Example:
    >>> class Printed(RunObserver):
    ...     progress_interval_s = 5.0
    ...     def progress(self, progress):
    ...         print(progress.rows_done)
    >>> run_job(job, spec, observer=Printed())  # doctest: +SKIP
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from toolkit.errors import ToolkitError
    from toolkit.run.progress.model import Progress
    from toolkit.run.ray.connection import RayConnection


class RunObserver:
    """Follows a run; each method is called as the run goes and does nothing here."""

    #: Seconds between :meth:`progress` calls; None: the run's progress is not read
    #: at all (no thread polls the output folder).
    progress_interval_s: float | None = None
    #: Rows/s is measured over this much recent time; None: over the whole run.
    progress_window_s: float | None = None

    def connected(self, connection: "RayConnection") -> None:
        """Ray is up: which cluster was joined, its Ray Dashboard URL, and warnings
        about ``data.output`` as the cluster's nodes see it."""

    def phase(self, text: str) -> None:
        """What the run does before its first row (``reading the input``, ``loading the
        model``); the progress told carries it too."""

    def progress(self, progress: "Progress") -> None:
        """The run's progress, every :attr:`progress_interval_s` and once when it
        finished (from a background thread)."""

    def notice(self, text: str) -> None:
        """What a user must know that Ray only wrote to the run's log: a worker out of
        memory, one that died, engine pools fitted to this machine."""

    def cluster_lost(self, error: "ToolkitError") -> None:
        """Ray's GCS stopped answering and the process ends right after this returns
        (Ray would end it anyway, without a word): say ``error`` where the user looks."""
        print(f"Error: {error.format_message()}", file=sys.stderr, flush=True)
