"""What an ended job left: where its results are, its summary, its report.

``toolkit status`` shows them for a job that has ended. The output location is the
one recorded at submit (``JobInfo.output``, the ``toolkit_output`` metadata); the
summary (``_summary.json``) and the report (``_report.html``) are read from there
when this machine can reach it. When it can't (a relative path on a remote cluster,
a path on the cluster's own disks, a bucket without credentials here),
:attr:`JobResults.summary_note` says why in one line instead.

Nothing here imports Ray.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from toolkit.cluster.backends.base import JobInfo, JobStatus
from toolkit.redaction import redact
from toolkit.run.output.summary import RunSummary, read_summary
from toolkit.run.progress.watched_job import readable_from_here


@dataclass(frozen=True)
class JobResults:
    """Where a job's results are and what they hold, as far as can be seen from here.

    Attributes:
        output: The output location recorded at submit; None when none was.
        summary: The run's summary, read from the output; None when the job has
            not ended or it can't be read (see ``summary_note``).
        report: The run's ``_report.html``, when it exists.
        summary_note: Why there is no summary, in one line (``not readable from
            here: ...``, ``none: ...``); None when there is one or the job runs.
    """

    output: str | None
    summary: RunSummary | None = None
    report: str | None = None
    summary_note: str | None = None

    def as_json(self) -> dict[str, Any]:
        """The keys ``toolkit status --format json`` adds (null where unknown)."""
        return {
            "output": self.output,
            "summary": self.summary.model_dump(mode="json") if self.summary else None,
            "report": self.report,
            "summary_note": self.summary_note,
        }


def job_results(info: JobInfo, *, same_machine: bool = False,
                read: Callable[[str], RunSummary | None] = read_summary) -> JobResults:
    """The results of the job ``info`` describes.

    Args:
        info: The job as the backend reports it.
        same_machine: The cluster's nodes run on this machine (an absolute output
            path names the same folder here).
        read: Reads a run's summary from its output (tests pass their own).

    Never raises for an output it can't read: that is what ``summary_note`` is for.
    """
    output = redact(info.output) if info.output else None
    if not info.status.is_terminal():
        return JobResults(output)
    if not output:
        return JobResults(None, summary_note="none: the job recorded no output location "
                          "(it was not submitted by this toolkit)")
    if not readable_from_here(output):
        return JobResults(output, summary_note=f"not readable from here: {output} is "
                          "relative to the job's working dir on the cluster")
    if "://" not in output and not os.path.isdir(output):
        where = ("does not exist" if same_machine else
                 "is not on this machine (a path on the cluster's nodes)")
        return JobResults(output, summary_note=f"not readable from here: {output} {where}")
    try:
        summary = read(info.output or output)
    except Exception as exc:  # noqa: BLE001 - storage this machine can't read: say so, go on
        reason = " ".join(str(exc).split())[:200] or type(exc).__name__
        return JobResults(output, summary_note=redact(f"not readable from here: {reason}"))
    if summary is None:
        why = (f"no _summary.json in {output}" if info.status == JobStatus.SUCCEEDED else
               "the run ended before writing it")
        return JobResults(output, summary_note=f"none: {why}")
    return JobResults(output, summary, summary.report)
