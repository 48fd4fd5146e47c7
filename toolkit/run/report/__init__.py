"""The run report: one self-contained HTML file showing what a run produced.

It lives in the run layer, not above it: every finished run writes it
(:func:`~toolkit.run.pipeline.run_pipeline` calls :func:`write_report`), and what it
reads is the run layer's own (:class:`~toolkit.run.run_directory.RunDirectory`,
:class:`~toolkit.run.summary.RunSummary`). A folder of its own keeps its three
concerns apart: gathering figures (:mod:`.report_data`), charts (:mod:`.charts`)
and the page (:mod:`.page`).

Example:
    >>> write_report("out/date-reformat")  # doctest: +SKIP
    'out/date-reformat/_report.html'
"""

from __future__ import annotations

from pathlib import Path

from toolkit.run.run_directory import RunDirectory

#: The report every finished run writes into its output directory.
REPORT_FILE = "_report.html"


def render_report(output: str | RunDirectory) -> str:
    """The HTML report of the finished run in ``output`` (a local path, a URI, or the
    run directory itself).

    Raises:
        FileNotFoundError: ``output`` holds no finished run.
    """
    from toolkit.run.report.page import render_page
    from toolkit.run.report.report_data import gather_report_data

    run_dir = output if isinstance(output, RunDirectory) else RunDirectory(output)
    return render_page(gather_report_data(run_dir))


def write_report(output: str | RunDirectory, destination: str | Path | None = None) -> str:
    """Write the report of the finished run in ``output``; return where it went.

    Args:
        output: The run directory (``data.output``): a local path or ``s3://...``,
            or its :class:`~toolkit.run.run_directory.RunDirectory`.
        destination: A local file to write; default ``_report.html`` inside
            ``output`` (recorded in its manifest as the toolkit's own file).

    Raises:
        FileNotFoundError: ``output`` holds no finished run.
    """
    run_dir = output if isinstance(output, RunDirectory) else RunDirectory(output)
    html = render_report(run_dir).encode()
    if destination is None:
        return run_dir.write_file(REPORT_FILE, html)
    path = Path(destination)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(html)
    return str(path)
