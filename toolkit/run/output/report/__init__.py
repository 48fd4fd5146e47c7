"""The run report: one self-contained HTML file showing what a run produced.

It lives in the run layer, not above it: every finished run writes it
(:func:`~toolkit.run.driver.run_pipeline` calls :func:`write_report`), and what it
reads is the run layer's own (:class:`~toolkit.run.output.run_directory.RunDirectory`,
:class:`~toolkit.run.output.summary.RunSummary`). A folder of its own keeps its three
concerns apart: gathering figures (:mod:`.report_data`), charts (:mod:`.charts`)
and the page (:mod:`.page`).

Example:
    >>> write_report("out/date-reformat")  # doctest: +SKIP
    'out/date-reformat/_report.html'
"""

from __future__ import annotations

from pathlib import Path

from toolkit.errors import SpecError
from toolkit.run.output.run_directory import REPORT_FILE, RunDirectory

__all__ = ["REPORT_FILE", "render_report", "write_report"]


def render_report(output: str | RunDirectory) -> str:
    """The HTML report of the finished run in ``output`` (a local path, a URI, or the
    run directory itself).

    Raises:
        FileNotFoundError: ``output`` holds no finished run.
    """
    from toolkit.run.output.report.page import render_page
    from toolkit.run.output.report.report_data import gather_report_data

    run_dir = output if isinstance(output, RunDirectory) else RunDirectory(output)
    return render_page(gather_report_data(run_dir))


def write_report(output: str | RunDirectory, destination: str | Path | None = None) -> str:
    """Write the report of the finished run in ``output``; return where it went.

    Args:
        output: The run directory (``data.output``): a local path or ``s3://...``,
            or its :class:`~toolkit.run.output.run_directory.RunDirectory`.
        destination: A local file to write; default ``_report.html`` inside
            ``output`` (recorded in its manifest as the toolkit's own file).

    Raises:
        FileNotFoundError: ``output`` holds no finished run.
        SpecError: the report can't be written there (a read-only place, no
            permission, a file where a folder should be), naming it and why.
    """
    run_dir = output if isinstance(output, RunDirectory) else RunDirectory(output)
    html = render_report(run_dir).encode()
    if destination is None:
        try:
            return run_dir.write_file(REPORT_FILE, html)
        except OSError as exc:
            raise _unwritable(f"{run_dir.location.rstrip('/')}/{REPORT_FILE}", exc,
                              "Write it elsewhere with -o, e.g. -o report.html.") from None
    path = Path(destination)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)  # -o reports/run.html makes reports/
        path.write_bytes(html)
    except OSError as exc:
        raise _unwritable(str(path), exc, "Choose another -o, in a folder you can write to "
                          "(e.g. -o report.html here).") from None
    return str(path)


def _unwritable(where: str, exc: OSError, hint: str) -> SpecError:
    """The report can't go to ``where``: the OS's reason (read-only, permission), as a
    user's choice to change rather than the toolkit's failure."""
    reason = exc.strerror or str(exc)
    if exc.filename and str(exc.filename) != where:  # a folder on the way, not the file
        reason = f"{reason}: {exc.filename}"
    return SpecError(f"Can't write the report to {where}: {reason}.", hint=hint)
