"""The end-of-run summary, computed from what was actually written."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, Field

from toolkit.run.run_directory import SUMMARY_FILE, RunDirectory
from toolkit.spec.row_contract import ERROR_COLUMN

if TYPE_CHECKING:
    from toolkit.spec.job_definition import JobDefinition
    from toolkit.spec.models import JobSpec


class RunSummary(BaseModel):
    job: str
    output: str
    rows_in: int = Field(description="Rows that entered the pipeline.")
    rows_written: int = Field(description="Rows in the output, with a result or an error.")
    rows_this_run: int | None = Field(
        None, description="Rows this run processed (fewer than rows_in when it resumed)."
    )
    rows_ok: int
    error_rows: int
    seconds: float
    rows_per_second: float
    smoke: bool = Field(description="Tiny random-weight model: results are not meaningful.")
    figures: dict[str, int | float] = Field(
        default_factory=dict, description="Job-specific figures, e.g. accuracy."
    )
    notes: list[str] = Field(default_factory=list)
    samples: list[dict[str, Any]] = Field(default_factory=list)
    first_errors: list[dict[str, Any]] = Field(default_factory=list)


def summarize_output(
    job: "JobDefinition[Any]",
    spec: "JobSpec",
    run_dir: RunDirectory,
    seconds: float,
    rows_in: int | None,
    rows_this_run: int | None = None,
    notes: list[str] | None = None,
) -> RunSummary:
    """Count the written rows and errors, pick sample results, save ``_summary.json``.

    ``rows_in`` is Ray's own count of rows that entered preprocessing; when Ray
    reports none, every written row is taken to have come in.
    """
    import pyarrow.compute as pc

    dataset = run_dir.open_results(spec.data.output_format)
    id_column = spec.data.id_column
    result_columns = job.result_columns(job.options_of(spec))
    errors = dataset.to_table(columns=[id_column, ERROR_COLUMN])
    failed = pc.is_valid(errors[ERROR_COLUMN])
    rows_written = errors.num_rows
    error_rows = int(pc.sum(failed).as_py() or 0)
    shown = [id_column, *result_columns]
    good = dataset.to_table(columns=shown, filter=pc.field(ERROR_COLUMN).is_null()).slice(0, 3)
    bad = errors.filter(failed).slice(0, 3)
    processed = rows_this_run if rows_this_run is not None else rows_written
    figures: dict[str, int | float] = {}
    if job.summarize is not None:
        figures = job.summarize(dataset.to_table(columns=list(job.summary_columns)))
    notes = list(notes or [])
    if rows_in is not None and rows_in != rows_written:
        notes.append(
            f"WARNING: {rows_in:,} rows came in but {rows_written:,} are in the output; "
            "the output may hold files of an interrupted write; rerun with --overwrite."
        )
    summary = RunSummary(
        job=job.name,
        output=spec.data.output,
        rows_in=rows_in if rows_in is not None else rows_written,
        rows_written=rows_written,
        rows_this_run=rows_this_run,
        rows_ok=rows_written - error_rows,
        error_rows=error_rows,
        seconds=round(seconds, 2),
        rows_per_second=round(processed / seconds, 2) if seconds > 0 else 0.0,
        smoke=spec.uses_sample_model,
        figures=figures,
        notes=notes,
        samples=good.to_pylist(),
        first_errors=bad.to_pylist(),
    )
    run_dir.write_json(SUMMARY_FILE, summary.model_dump(mode="json"))
    return summary


def read_summary(output: str) -> RunSummary | None:
    """The summary a finished run left in ``output``, or None if there is none."""
    content = RunDirectory(output).read_json(SUMMARY_FILE)
    return RunSummary.model_validate(content) if content is not None else None


def finished_job_summary(output: str | None) -> RunSummary | None:
    """The summary of a finished job, when its output is reachable from here."""
    if not output:
        return None
    try:
        return read_summary(output)
    except Exception:  # noqa: BLE001 - an unreachable bucket just means no summary to show
        return None
