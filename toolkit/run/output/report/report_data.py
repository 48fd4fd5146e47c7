"""What a run report shows, gathered from a finished run directory into typed figures.

Everything comes from what the run wrote: ``_manifest.json`` (job, model, engine,
fingerprint), ``_summary.json`` (counts, accounting, figures, stages, checks) and the
result files themselves (columns, errors, when each piece was written). Result files
are read a batch at a time and only the columns a chart needs, so a report of a
million-row run costs seconds and flat memory; histograms and the row sample are
taken from a bounded sample of rows, and the page says so.
"""

from __future__ import annotations

import datetime
import math
import re
from collections import Counter
from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel, Field

from toolkit.run.output.report.thumbnails import sample_thumbnails
from toolkit.run.output.run_directory import SUMMARY_FILE, RunDirectory
from toolkit.run.output.summary import TOKEN_COLUMNS, RunSummary
from toolkit.spec.cascade import ANSWERED_BY_COLUMN
from toolkit.spec.row_contract import ERROR_COLUMN, FAILED_CHECKS_COLUMN

if TYPE_CHECKING:
    import pyarrow

#: Values a histogram or a length histogram is drawn from, at most: enough for a
#: faithful shape, few enough that a 1M-row report takes seconds.
MAX_CHART_VALUES = 50_000
#: A text column with at most this many distinct values may be drawn as categories.
MAX_CATEGORIES = 25
#: Median characters above which a text column is free text whatever its distinct
#: values (a tiny model's replies can all be the same sentence): labels are short.
MAX_LABEL_CHARS = 40
#: Examples shown under a free-text column's length histogram.
TEXT_EXAMPLES = 3
#: Rows shown in the sample table (ok rows, then error rows).
SAMPLE_OK_ROWS = 12
SAMPLE_ERROR_ROWS = 6
#: Characters of one cell shown in the sample table.
MAX_CELL_CHARS = 160
#: Error kinds listed (the rest are summed into one line), example ids per kind.
MAX_ERROR_KINDS = 20
EXAMPLE_IDS_PER_KIND = 5


class ColumnFigures(BaseModel):
    """One result column, summarised for the chart that fits its type."""

    name: str
    kind: Literal["categories", "numbers", "confidence", "text", "vector", "other"]
    values: int = Field(description="Non-null values in the column (all rows read).")
    nulls: int
    categories: list[tuple[str, int]] = Field(
        default_factory=list, description="Value -> count, most common first (categories); "
        "a declared choice no row got is there with 0.")
    choices: list[str] = Field(
        default_factory=list, description="The column's declared choices (the job's "
        "structured_output choice list), in the declared order; empty when undeclared.")
    examples: list[str] = Field(
        default_factory=list, description="A few distinct values, cut to MAX_CELL_CHARS "
        "(text).")
    sample: list[float] = Field(
        default_factory=list, description="Numbers, or text lengths in characters, of up to "
        "MAX_CHART_VALUES rows spread over the output (numbers, confidence, text).")
    dimension: int | None = Field(None, description="A vector column's length.")
    mean_norm: float | None = Field(None, description="A vector column's mean L2 norm.")
    note: str = ""


class ErrorKind(BaseModel):
    """Error rows whose messages are the same once ids, numbers and paths are blanked."""

    message: str
    count: int
    example_ids: list[str]


class WritePoint(BaseModel):
    """Rows written by ``seconds`` after the run started (one per result file)."""

    seconds: float
    rows: int


class ReportData(BaseModel):
    """Everything the report page shows about one run."""

    output: str
    job: str
    model: str | None
    engine: str | None
    fingerprint: str | None
    finished_at: str | None = Field(description="When _summary.json was written (UTC).")
    summary: RunSummary
    checks: dict[str, dict[str, int | float]] = Field(
        default_factory=dict, description="_summary.json's checks: name -> failed, rate.")
    id_column: str
    input_columns: list[str]
    result_columns: list[str]
    check_column: str | None = Field(
        None, description="failed_checks, where the run wrote it: the checks each row "
        "failed, shown beside its error (the Checks table counts them).")
    text_columns: list[str] = Field(
        default_factory=list, description="Result columns of free text (kind 'text').")
    columns: list[ColumnFigures]
    error_kinds: list[ErrorKind]
    other_error_rows: int = Field(0, description="Error rows beyond MAX_ERROR_KINDS kinds.")
    writes: list[WritePoint]
    sample_rows: list[dict[str, str]]
    thumbnails: dict[str, str] = Field(
        default_factory=dict, description="Sample row id -> a small picture of the row's "
        "image as a data: URI (image jobs whose pictures can be found locally).")
    sampled_from: int = Field(description="Rows the histograms were drawn from.")


def gather_report_data(run_dir: RunDirectory) -> ReportData:
    """Read a finished run directory into the figures of its report.

    Raises:
        FileNotFoundError: the directory holds no finished run (no ``_summary.json``).
    """
    raw = run_dir.read_json(SUMMARY_FILE)
    if raw is None:
        raise FileNotFoundError(f"{run_dir.location} holds no {SUMMARY_FILE}: no finished run")
    summary = RunSummary.model_validate(raw)
    manifest = run_dir.read_manifest()
    spec = manifest.spec if manifest is not None else {}
    data, engine = spec.get("data", {}), spec.get("engine", {})
    file_format = data.get("output_format", "parquet")
    id_column = data.get("id_column", "id")
    dataset = run_dir.open_results(file_format)
    names = dataset.schema.names
    results = _result_columns(summary, names, id_column)
    check_column = FAILED_CHECKS_COLUMN if FAILED_CHECKS_COLUMN in names else None
    inputs = [n for n in names if n not in results
              and n not in (id_column, ERROR_COLUMN, FAILED_CHECKS_COLUMN)]
    columns, sampled = _column_figures(dataset, results, declared_choices(summary, spec))
    kinds, other = _error_kinds(dataset, id_column)
    samples = _sample_rows(dataset, id_column, inputs,
                           [*results, *([check_column] if check_column else [])])
    return ReportData(
        output=summary.output, job=summary.job, model=engine.get("model"),
        engine=engine.get("kind"), fingerprint=manifest.fingerprint if manifest else None,
        finished_at=_modified(run_dir, SUMMARY_FILE),
        summary=summary, checks=_checks(raw), id_column=id_column, input_columns=inputs,
        result_columns=results, check_column=check_column,
        text_columns=[c.name for c in columns if c.kind == "text"], columns=columns,
        error_kinds=kinds, other_error_rows=other,
        writes=_writes(run_dir, dataset, summary),
        sample_rows=[{name: _cell(value) for name, value in row.items()} for row in samples],
        thumbnails=_by_cell(sample_thumbnails(samples, id_column, spec), samples, id_column),
        sampled_from=sampled,
    )


def _by_cell(thumbnails: dict[str, str], rows: list[dict[str, Any]],
             id_column: str) -> dict[str, str]:
    """``thumbnails`` keyed by the id as the table shows it (a long path is cut there)."""
    return {_cell(row[id_column]): thumbnails[str(row[id_column])] for row in rows
            if str(row[id_column]) in thumbnails}


def declared_choices(summary: RunSummary, spec: dict[str, Any]) -> dict[str, list[str]]:
    """Result column -> its declared choices: the summary's (any job's structured_output
    choice), else a prompt job's ``output.choice`` in the manifest's spec (a summary
    written before it recorded them)."""
    if summary.choices:
        return summary.choices
    output = spec.get("output")
    if isinstance(output, dict) and isinstance(output.get("column"), str) \
            and isinstance(output.get("choice"), list):
        return {output["column"]: [str(choice) for choice in output["choice"]]}
    return {}


def _result_columns(summary: RunSummary, names: list[str], id_column: str) -> list[str]:
    """The job's result columns: those its summary's sample rows show (the id and the
    job's result columns), plus what engines add generically (token counts,
    finish_reason, ``*_confidence``; a cascade's ``answered_by`` and ``<column>_first``).
    Without sample rows (every row failed): all."""
    shown = [c for row in summary.samples[:1] for c in row if c != id_column]
    if not shown:
        return [n for n in names if n not in (id_column, ERROR_COLUMN)]
    # A cascade's: who answered, and the small model's overruled answers.
    cascade = ({ANSWERED_BY_COLUMN, *(f"{c}_first" for c in shown)}
               if summary.cascade is not None else set())
    extra = [n for n in names if n in TOKEN_COLUMNS or n == "finish_reason"
             or n.endswith("_confidence") or n in cascade]
    return [n for n in names if n in shown or n in extra]


def _checks(raw: dict[str, Any]) -> dict[str, dict[str, int | float]]:
    checks = raw.get("checks")
    if not isinstance(checks, dict):
        return {}
    return {str(name): {k: v for k, v in figures.items() if isinstance(v, (int, float))}
            for name, figures in checks.items() if isinstance(figures, dict)}


def _modified(run_dir: RunDirectory, name: str) -> str | None:
    info = run_dir.fs.get_file_info(f"{run_dir.root}/{name}")
    if info.mtime is None:
        return None
    return info.mtime.astimezone(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")


def _column_figures(dataset: Any, columns: list[str], choices: dict[str, list[str]]
                    ) -> tuple[list[ColumnFigures], int]:
    """Each column's figures, from batches of only those columns (every ``stride``-th
    row kept for histograms). Returns them and how many rows the samples came from.

    ``choices``: the declared choices of columns that have them, each drawn as
    categories with every choice in it."""
    import numpy
    import pyarrow as pa
    import pyarrow.compute as pc

    total = dataset.count_rows()
    stride = max(1, math.ceil(total / MAX_CHART_VALUES))
    if not columns:
        return [], 0
    schema = dataset.schema
    counts: dict[str, Counter[str]] = {c: Counter() for c in columns}
    samples: dict[str, list[float]] = {c: [] for c in columns}
    nulls = dict.fromkeys(columns, 0)
    norms: dict[str, list[float]] = {c: [] for c in columns}
    dims: dict[str, int | None] = dict.fromkeys(columns)
    examples: dict[str, list[str]] = {c: [] for c in columns}
    seen = 0
    for batch in _scan(dataset, columns, batch_size=131_072).to_batches():
        keep = pa.array(range(-seen % stride, batch.num_rows, stride), pa.int64())
        seen += batch.num_rows
        for name in columns:
            array = batch.column(name)
            nulls[name] += array.null_count
            kind = _kind_of(name, schema.field(name).type)
            if kind in ("text", "categories"):
                valid = array.drop_null()
                if len(counts[name]) <= MAX_CATEGORIES + len(choices.get(name, ())):
                    counts[name].update(
                        {str(v.as_py()): c.as_py() for v, c in zip(
                            *pc.value_counts(valid).flatten())})
                if len(examples[name]) < TEXT_EXAMPLES:
                    for value in valid.unique()[:2 * TEXT_EXAMPLES].to_pylist():
                        text = " ".join(str(value).split())
                        if text and text not in examples[name] \
                                and len(examples[name]) < TEXT_EXAMPLES:
                            examples[name].append(_cell(text))
                samples[name] += pc.utf8_length(pc.cast(array.take(keep), pa.string())
                                                ).drop_null().to_pylist()
            elif kind in ("numbers", "confidence"):
                if pa.types.is_boolean(array.type):
                    counts[name].update({str(v.as_py()): c.as_py() for v, c in zip(
                        *pc.value_counts(array.drop_null()).flatten())})
                samples[name] += pc.cast(array.take(keep), pa.float64()).drop_null().to_pylist()
            elif kind == "vector":
                vectors = array.take(keep).drop_null()
                vectors = vectors.filter(pc.greater(pc.list_value_length(vectors), 0))
                if len(vectors):
                    # One numpy pass: a Python loop over 50,000 x 1,024 floats takes seconds.
                    flat = pc.list_flatten(vectors).to_numpy(zero_copy_only=False)
                    lengths = pc.list_value_length(vectors).to_numpy(zero_copy_only=False)
                    dims[name] = int(lengths.max())
                    squares = numpy.add.reduceat(numpy.nan_to_num(flat.astype(float)) ** 2,
                                                 numpy.r_[0, numpy.cumsum(lengths)[:-1]])
                    norms[name] += numpy.sqrt(squares).tolist()
    figures = []
    for name in columns:
        kind = _kind_of(name, schema.field(name).type)
        values = total - nulls[name]
        declared = choices.get(name, [])
        if kind in ("text", "categories"):
            kind = ("categories" if declared or not _free_text(counts[name], samples[name],
                                                                  values) else "text")
        if kind == "numbers" and counts[name]:
            kind = "categories"  # booleans
        # Declared choices no row got are there too, with 0: that nothing was
        # labelled "Other" is a finding, not a gap in the chart.
        categories = [*counts[name].most_common(),
                      *((choice, 0) for choice in declared if choice not in counts[name])]
        figures.append(ColumnFigures(
            name=name, kind=kind, values=values, nulls=nulls[name],
            categories=categories if kind == "categories" else [], choices=declared,
            examples=examples[name] if kind == "text" else [],
            sample=samples[name] if kind in ("numbers", "confidence", "text") else [],
            dimension=dims[name], mean_norm=(round(sum(norms[name]) / len(norms[name]), 4)
                                             if norms[name] else None),
            note="" if kind != "other" else f"not charted ({schema.field(name).type})",
        ))
    return figures, min(total, math.ceil(total / stride))


def _free_text(counts: Counter[str], lengths: list[float], values: int) -> bool:
    """Whether an undeclared text column is free text (captions, replies: a length
    histogram) rather than labels (bars): many distinct values for its rows, or long
    values. A bar per distinct caption would show every caption once, cut short."""
    if not counts or len(counts) > MAX_CATEGORIES:
        return True
    if values >= 4 and len(counts) > values / 2:
        return True
    ordered = sorted(lengths)
    return bool(ordered) and ordered[len(ordered) // 2] > MAX_LABEL_CHARS


def _kind_of(name: str, arrow_type: "pyarrow.DataType") -> str:
    import pyarrow as pa

    if name.endswith("_confidence") and pa.types.is_floating(arrow_type):
        return "confidence"
    if pa.types.is_boolean(arrow_type) or pa.types.is_integer(arrow_type) or pa.types.is_floating(
            arrow_type):
        return "numbers"
    if pa.types.is_string(arrow_type) or pa.types.is_large_string(arrow_type):
        return "text"
    if pa.types.is_dictionary(arrow_type):
        return "categories"
    if (pa.types.is_list(arrow_type) or pa.types.is_large_list(arrow_type)
            or pa.types.is_fixed_size_list(arrow_type)) and (
            pa.types.is_floating(arrow_type.value_type) or pa.types.is_integer(
                arrow_type.value_type)):
        return "vector"
    return "other"


# Blanked before grouping: what differs between otherwise identical messages.
_VOLATILE = [
    (re.compile(r"(?:[A-Za-z]:)?(?:/[\w.\-]+){2,}/?"), "<path>"),
    (re.compile(r"\b[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}\b"),
     "<id>"),
    (re.compile(r"\b(?=[0-9a-fA-F]*\d)[0-9a-fA-F]{8,}\b"), "<id>"),
    (re.compile(r"\d+(?:\.\d+)?"), "<n>"),
]


def error_kind(message: str) -> str:
    """``message`` with ids, numbers and paths blanked: one kind for rows that failed
    the same way.

    Example:
        >>> error_kind("cannot identify image file '/data/img_0042.png' (row 17)")
        "cannot identify image file '<path>' (row <n>)"
    """
    kind = " ".join(message.split())
    for pattern, blank in _VOLATILE:
        kind = pattern.sub(blank, kind)
    return kind if len(kind) <= 240 else kind[:237] + "..."


def _error_kinds(dataset: Any, id_column: str) -> tuple[list[ErrorKind], int]:
    import pyarrow.compute as pc

    counts: Counter[str] = Counter()
    examples: dict[str, list[str]] = {}
    for batch in _scan(dataset, [id_column, ERROR_COLUMN],
                       pc.field(ERROR_COLUMN).is_valid()).to_batches():
        for row_id, message in zip(batch.column(0).to_pylist(), batch.column(1).to_pylist()):
            kind = error_kind(str(message))
            counts[kind] += 1
            ids = examples.setdefault(kind, [])
            if len(ids) < EXAMPLE_IDS_PER_KIND:
                ids.append(str(row_id))
    top = counts.most_common(MAX_ERROR_KINDS)
    other = sum(counts.values()) - sum(count for _, count in top)
    return [ErrorKind(message=m, count=c, example_ids=examples[m]) for m, c in top], other


def _writes(run_dir: RunDirectory, dataset: Any, summary: RunSummary) -> list[WritePoint]:
    """Cumulative rows written over the run, from when each result file was last
    modified (Ray writes each piece once) and its row count, measured from the run's
    start: the summary's time, ``seconds`` before it was written."""
    infos = {f.path: f for f in run_dir.fs.get_file_info(list(dataset.files))}
    pieces = []
    for fragment in dataset.get_fragments():
        mtime = infos[fragment.path].mtime
        if mtime is not None:
            pieces.append((mtime.timestamp(), fragment.count_rows()))
    summary_info = run_dir.fs.get_file_info(f"{run_dir.root}/{SUMMARY_FILE}")
    if not pieces or summary_info.mtime is None:
        return []
    start = summary_info.mtime.timestamp() - summary.seconds
    points, rows = [WritePoint(seconds=0, rows=0)], 0
    for when, count in sorted(pieces):
        rows += count
        points.append(WritePoint(seconds=round(max(0.0, when - start), 2), rows=rows))
    return points


def _scan(dataset: Any, columns: list[str], filter: Any = None,
          batch_size: int = 16_384) -> Any:
    """A scanner of ``columns`` that reads little ahead: Arrow's defaults (16 batches of
    128k rows, 4 files at once) hold hundreds of MB of a wide output for a sample of 18 rows."""
    return dataset.scanner(columns=columns, filter=filter, batch_size=batch_size,
                           batch_readahead=2, fragment_readahead=1)


def _sample_rows(dataset: Any, id_column: str, inputs: list[str],
                 results: list[str]) -> list[dict[str, Any]]:
    """The first ok rows and error rows, with their values as read (a thumbnail needs
    a whole path; the table cuts them)."""
    import pyarrow.compute as pc

    columns = [id_column, *results, ERROR_COLUMN, *inputs]
    ok = _scan(dataset, columns, pc.field(ERROR_COLUMN).is_null()).head(SAMPLE_OK_ROWS)
    bad = _scan(dataset, columns, pc.field(ERROR_COLUMN).is_valid()).head(SAMPLE_ERROR_ROWS)
    return ok.to_pylist() + bad.to_pylist()


_CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")


def _cell(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, float):
        return f"{value:.4g}"
    if isinstance(value, (bytes, bytearray)):
        return f"<{len(value):,} bytes>"
    if isinstance(value, list) and len(value) > 8:
        shown = ", ".join(f"{v:.4g}" if isinstance(v, float) else str(v) for v in value[:8])
        return f"[{shown}, ... ({len(value)} values)]"
    # A random-weight model's text holds control characters (NUL among them), which
    # HTML can't show; the replacement character says something was there.
    text = _CONTROL.sub("\ufffd", str(value))
    return text if len(text) <= MAX_CELL_CHARS else text[:MAX_CELL_CHARS - 3] + "..."
