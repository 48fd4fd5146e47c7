"""The end-of-run summary, computed from what was actually written."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, Field

from toolkit.redaction import redact
from toolkit.run.answer_cache.cache_counts import CacheSummary, cache_summary
from toolkit.run.output.run_directory import REPORT_FILE, SUMMARY_FILE, Manifest, RunDirectory
from toolkit.run.row_checks import CONFIDENCE_SUFFIX
from toolkit.spec.cascade import ANSWERED_BY_COLUMN, CascadeConfig
from toolkit.spec.row_contract import ERROR_COLUMN, FAILED_CHECKS_COLUMN, FINISH_REASON_COLUMN

if TYPE_CHECKING:
    import pyarrow as pa

    from toolkit.spec.job_definition import JobDefinition
    from toolkit.spec.quality import ChecksConfig
    from toolkit.spec.run_settings import EngineStages, SummarizedRun


class StageSummary(BaseModel):
    """One model stage of a multi-stage job, as its engine section ran it."""

    name: str = Field(description="'stages.NAME' for an earlier stage; 'engine' for the main one.")
    task: str
    kind: str
    model: str
    workers: int = Field(description="Engine workers (the upper end of an autoscaling pool).")
    min_workers: int = Field(description="The lower end of the pool (= workers when fixed).")
    batch_size: int
    num_cpus: float = Field(description="CPUs reserved per worker.")
    gpus_per_worker: int
    accelerator_type: str | None


class CheckCount(BaseModel):
    """Rows that failed one check."""

    failed: int
    rate: float = Field(description="failed / rows_written.")


class ConfidenceSummary(BaseModel):
    """How sure the model was of its answers in one ``*_confidence`` column."""

    rows: int = Field(description="Rows with a confidence (answered rows).")
    mean: float
    p10: float
    median: float
    p90: float
    histogram: list[int] = Field(description="Rows in ten bins of 0.1 from 0 to 1.")


class Attempt(BaseModel):
    """One pass over the output: the first run, then each ``toolkit retry``."""

    attempt: int
    rows: int = Field(description="Rows this attempt (re)did; the first: every row.")
    fingerprint: str
    changed: list[str] = Field(default_factory=list,
                               description="Spec fields this attempt changed from the one before.")
    only: list[str] | None = Field(None, description="retry --only: the checks it redid.")
    started: str | None = None


class CascadeSummary(BaseModel):
    """Small model first: who answered the rows, and how many went on to the big model."""

    small_model: str
    big_model: str
    escalate_below: float | None
    answered_by: dict[str, int] = Field(
        description="Rows by the model whose answer (or error) they carry: the small one "
        "for the rows it kept, the big one for the rows escalated to it.")
    escalated: int = Field(description="Rows the small model sent on to the big one.")
    escalation_rate: float = Field(
        description="escalated / the rows the small model answered (what a full run "
        "sends to the big model).")
    input_tokens: dict[str, int] | None = Field(
        None, description="Prompt tokens each model read: the small one's on every row "
        "it answered (kept or escalated), the big one's on the rows escalated to it.")
    output_tokens: dict[str, int] | None = Field(
        None, description="Tokens each model generated, counted as input_tokens.")


class NodeTakenBack(BaseModel):
    """A worker node drained during the run (``toolkit.run.ray.node_drains``)."""

    node_id: str = Field(description="Ray's node id (hex).")
    node_ip: str | None = Field(None, description="The node's address.")
    reason: str | None = Field(
        None, description="preemption, idle termination, or null where Ray has not said.")
    deadline: float | None = Field(
        None, description="When the node was to go (seconds since the epoch); null: none.")
    message: str | None = Field(None, description="The drain's own words, once it died.")
    gone: bool = Field(False, description="The node died during the run.")


class MetricsPlace(BaseModel):
    """Where a run on a Ray cluster that outlives it shows its metrics
    (``toolkit_*``, see docs/clusters.md), and the tags that pick out its series."""

    job: str = Field(description="The metrics' job tag (exported_job in Prometheus).")
    write_id: str = Field(description="The metrics' write_id tag: this run's.")
    dashboard: str | None = Field(
        None, description="The Ray Dashboard's Metrics view, as the driver's Ray names it.")
    grafana: str | None = Field(
        None, description="The Grafana the Ray Dashboard embeds (RAY_GRAFANA_HOST), if set.")

    def describe(self) -> str:
        """One line: where, then the tags."""
        where = [w for w in (self.dashboard, self.grafana and f"Grafana {self.grafana}") if w]
        return (", ".join(where) + " " if where else "") + (
            f"(toolkit_* series with job={self.job}, write_id={self.write_id}; "
            "toolkit dashboard writes their Grafana panels)")


class RunSummary(BaseModel):
    job: str
    output: str
    rows_in: int = Field(description="Rows that entered the pipeline.")
    rows_written: int = Field(description="Rows in the output, with a result or an error.")
    rows_this_run: int | None = Field(
        None, description="Rows this run processed (fewer than rows_in when it resumed)."
    )
    rows_ok: int = Field(description="Rows with a result, no error and no failed check.")
    error_rows: int
    check_failed_rows: int | None = Field(
        None, description="Rows with a result that failed a check (a generate job's); "
        "rows_ok + check_failed_rows + error_rows = rows_written.")
    seconds: float
    rows_per_second: float
    engine_workers: int | None = Field(
        None, description="Engine workers (model replicas): engine.concurrency."
    )
    gpus_per_worker: int | None = Field(
        None,
        description="GPUs each engine worker holds (0 on CPU; vLLM: tensor x pipeline parallel).",
    )
    rows_per_second_per_worker: float | None = Field(
        None, description="rows_per_second / engine_workers: what `toolkit plan --from-run` reads."
    )
    gpu_hours: float | None = Field(
        None, description="seconds x engine_workers x gpus_per_worker / 3600 (0 on CPU); "
        "a multi-stage job adds each stage's workers x GPUs."
    )
    stages: list[StageSummary] = Field(
        default_factory=list,
        description="A multi-stage job's model stages in order (the main engine last), "
        "each with the workers and resources its own section gave it; empty for one stage.",
    )
    input_tokens: int | None = Field(
        None, description="Prompt tokens of the written rows, when the engine reports them."
    )
    output_tokens: int | None = Field(
        None, description="Generated tokens of the written rows, when the engine reports them."
    )
    tokens_per_second: float | None = Field(
        None, description="(input_tokens + output_tokens) / seconds, for a run that did not resume."
    )
    smoke: bool = Field(description="Tiny random-weight model: results are not meaningful.")
    figures: dict[str, int | float] = Field(
        default_factory=dict, description="Job-specific figures, e.g. accuracy."
    )
    notes: list[str] = Field(default_factory=list)
    checks: dict[str, CheckCount] = Field(
        default_factory=dict,
        description="Rows that failed each check (generate jobs; see spec.checks).")
    failing_rows: int | None = Field(
        None, description="Rows with an error or a failed check (what toolkit retry redoes).")
    finish_reasons: dict[str, int] = Field(
        default_factory=dict, description="Rows by finish_reason: stop, length, error.")
    confidence: dict[str, ConfidenceSummary] = Field(
        default_factory=dict, description="Each *_confidence column's distribution.")
    choices: dict[str, list[str]] = Field(
        default_factory=dict, description="Result columns whose answer is held to a "
        "declared list (a stage's structured_output choice): column -> the choices, in "
        "the declared order, so a report shows the ones no row got.")
    cascade: CascadeSummary | None = Field(
        None, description="A cascade's rows answered by each model and its escalation rate.")
    cache: CacheSummary | None = Field(
        None, exclude_if=lambda value: value is None,
        description="The answer cache's rows and the tokens it saved (a run with cache:).")
    metrics: MetricsPlace | None = Field(
        None, exclude_if=lambda value: value is None,
        description="Where the run's metrics are, for a run on a Ray cluster that outlives "
        "it (none for a Ray started by the run, whose metrics end with it).")
    nodes_taken_back: list[NodeTakenBack] = Field(
        default_factory=list, exclude_if=lambda value: not value,
        description="Worker nodes drained during the run (spot preemption, idle "
        "termination): each node's id, address, reason and deadline; Ray redid the "
        "blocks they held. Absent when none was.")
    attempts: list[Attempt] = Field(
        default_factory=list, description="The first run and each retry, oldest first "
        "(empty for a run never retried).")
    samples: list[dict[str, Any]] = Field(default_factory=list)
    first_errors: list[dict[str, Any]] = Field(default_factory=list)
    log_file: str | None = Field(
        None, description="Where Ray's and the engine's own output went during the run "
        "(None when it went to the terminal, with -v, or on a cluster)."
    )
    report: str | None = Field(
        None, description="The run report (_report.html in the output), written after "
        "this summary; None when it could not be written (a note says why)."
    )


#: Per-row token counts the engines report (Ray Data LLM's vLLM stage and ours).
INPUT_TOKENS_COLUMN = "num_input_tokens"
OUTPUT_TOKENS_COLUMN = "num_generated_tokens"
TOKEN_COLUMNS: tuple[str, ...] = (INPUT_TOKENS_COLUMN, OUTPUT_TOKENS_COLUMN)
#: Where a cascade's escalated rows keep the small model's token counts (the row's own
#: are the big model's, which answered it).
FIRST_TOKEN_COLUMNS: dict[str, str] = {name: f"{name}_first" for name in TOKEN_COLUMNS}


def accounting(stages: "EngineStages", seconds: float, rows_per_second: float,
               token_totals: dict[str, int | None], resumed: bool) -> dict[str, Any]:
    """The summary's accounting fields: workers, GPU-hours and token figures (workers:
    the main, last stage's)."""
    main = stages.model_stages[-1][1]
    workers = main.concurrency
    gpus = main.gpus_per_worker
    gpu_workers = sum(e.concurrency * e.gpus_per_worker
                      for _, e in stages.model_stages)
    inputs, outputs = token_totals.get(INPUT_TOKENS_COLUMN), token_totals.get(OUTPUT_TOKENS_COLUMN)
    tokens_per_second = None
    if inputs is not None and outputs is not None and seconds > 0 and not resumed:
        tokens_per_second = round((inputs + outputs) / seconds, 1)
    return {
        "engine_workers": workers,
        "gpus_per_worker": gpus,
        "rows_per_second_per_worker": round(rows_per_second / workers, 2),
        "gpu_hours": round(seconds * gpu_workers / 3600, 4),
        "input_tokens": inputs,
        "output_tokens": outputs,
        "tokens_per_second": tokens_per_second,
    }


def stage_summaries(stages: "EngineStages") -> list[StageSummary]:
    """Each model stage's engine section, earlier stages first; [] for a one-stage job."""
    named = stages.model_stages
    if len(named) < 2:
        return []
    return [StageSummary(
        name=name, task=e.task, kind=e.kind, model=e.model, workers=e.concurrency,
        min_workers=e.pool_size[0], batch_size=e.batch_size, num_cpus=e.num_cpus,
        gpus_per_worker=e.gpus_per_worker, accelerator_type=e.accelerator_type,
    ) for name, e in named]


def _token_totals(dataset: Any) -> dict[str, int | None]:
    """Sums of the token columns the output has, every model's (a cascade's escalated
    rows add the small model's, :data:`FIRST_TOKEN_COLUMNS`); None for one it lacks, or
    that no row filled: models that don't count tokens, such as classifiers and tabular
    ones."""
    import pyarrow.compute as pc

    names = dataset.schema.names
    present = [c for c in TOKEN_COLUMNS if c in names]
    firsts = [FIRST_TOKEN_COLUMNS[c] for c in present if FIRST_TOKEN_COLUMNS[c] in names]
    table = dataset.to_table(columns=present + firsts) if present else None
    if table is not None and table.num_rows and all(
            table[c].null_count == table.num_rows for c in present):
        return dict.fromkeys(TOKEN_COLUMNS)

    def total(column: str) -> int:
        assert table is not None
        summed = [column, *([FIRST_TOKEN_COLUMNS[column]]
                            if FIRST_TOKEN_COLUMNS[column] in firsts else [])]
        return sum(int(pc.sum(table[c]).as_py() or 0) for c in summed)

    return {c: total(c) if c in present else None for c in TOKEN_COLUMNS}


#: Sample results and first errors a summary shows.
SHOWN_ROWS = 3


def first_rows(table: "pa.Table", id_column: str, count: int = SHOWN_ROWS) -> "pa.Table":
    """``table``'s ``count`` rows with the first ids, in id order (numbers as numbers;
    text by length, then by text, so "2" comes before "10"): whatever order Ray wrote
    the rows in, a summary shows the same ones."""
    import pyarrow as pa
    import pyarrow.compute as pc

    ids = table[id_column]
    if not plain_values(ids.type):  # a folder written before ids were checked
        return table.slice(0, count)
    keys = [(id_column, "ascending")]
    if pa.types.is_string(ids.type) or pa.types.is_large_string(ids.type):
        table = table.append_column(_ID_LENGTH, pc.utf8_length(ids))
        keys = [(_ID_LENGTH, "ascending"), *keys]
    chosen = pc.select_k_unstable(table, k=min(count, table.num_rows), sort_keys=keys)
    first = table.take(chosen).sort_by(keys)
    return first.drop_columns([_ID_LENGTH]) if _ID_LENGTH in first.column_names else first


_ID_LENGTH = "__id_length"


def plain_values(arrow_type: "pa.DataType") -> bool:
    """Whether Arrow's sort, group-by and membership kernels take values of this type.

    Not every kernel raises on the others: ``select_k_unstable`` over a struct, list or
    dictionary column ends the process with a segmentation fault. Preflight refuses
    such id columns; an output folder written before it did may still hold one.
    """
    import pyarrow as pa

    types = pa.types
    return not (types.is_nested(arrow_type) or types.is_dictionary(arrow_type)
                or isinstance(arrow_type, pa.ExtensionType))


def summarize_output(
    job: "JobDefinition[Any]",
    run: "SummarizedRun",
    run_dir: RunDirectory,
    seconds: float,
    rows_in: int | None,
    rows_this_run: int | None = None,
    notes: list[str] | None = None,
    log_file: str | None = None,
    attempts: list[Attempt] | None = None,
    *,
    options: Any = None,
    metrics: MetricsPlace | None = None,
) -> RunSummary:
    """Count the written rows and errors, pick sample results, save ``_summary.json``.

    ``run`` is the run's plan (:class:`~toolkit.run.run_plan.RunPlan`), with its
    ``options``; a caller without a plan passes the spec, whose options the job
    works out. ``rows_in`` is Ray's own count of rows that entered preprocessing;
    when Ray reports none, every written row is taken to have come in. ``log_file``
    is where Ray's own output went (:attr:`RunSummary.log_file`).
    """
    import pyarrow.compute as pc

    data = run.data
    dataset = run_dir.open_results(data.output_format)
    id_column = data.id_column
    if options is None:
        options = job.options_of(run)  # a spec (see above)
    # A multi-stage job's earlier stages' results first, as in the output.
    result_columns = [c for stage in job.stages for c in stage.result_columns(options)]
    errors = dataset.to_table(columns=[id_column, ERROR_COLUMN])
    failed = pc.is_valid(errors[ERROR_COLUMN])
    rows_written = errors.num_rows
    error_rows = int(pc.sum(failed).as_py() or 0)
    shown = [c for c in (id_column, *result_columns) if c in dataset.schema.names]
    # An Array, not a ChunkedArray: isin() would rebuild an empty one as nulls.
    good_ids = first_rows(errors.filter(pc.invert(failed)), id_column)[id_column].combine_chunks()
    chosen = pc.field(ERROR_COLUMN).is_null()
    if plain_values(good_ids.type):
        chosen &= pc.field(id_column).isin(good_ids)
    good = first_rows(dataset.to_table(columns=shown, filter=chosen), id_column)
    bad = first_rows(errors.filter(failed), id_column)
    processed = rows_this_run if rows_this_run is not None else rows_written
    figures: dict[str, int | float] = {}
    if job.summarize is not None:
        figures = job.summarize(dataset.to_table(columns=list(job.summary_columns)))
    notes = list(notes or [])
    repeated = repeated_ids(errors[id_column])
    if repeated:
        count, shown = repeated
        notes.append(
            f"WARNING: {count:,} row(s) of the output repeat a {id_column} another row has "
            f"({shown}): a result file was copied or edited by hand, so readers see those "
            "ids twice. Remove the copies, or rerun with --overwrite."
        )
        if rows_in is not None and rows_in + count == rows_written:
            rows_in = None  # accounted for above; not also an interrupted write
    if rows_in is not None and rows_in != rows_written:
        notes.append(
            f"WARNING: {rows_in:,} rows came in but {rows_written:,} are in the output; "
            "the output may hold files of an interrupted write; rerun with --overwrite."
        )
    quality = answer_quality(dataset, run.checks, rows_written)
    rows_per_second = round(processed / seconds, 2) if seconds > 0 else 0.0
    resumed = rows_this_run is not None and rows_this_run != rows_written
    summary = RunSummary(
        job=job.name,
        output=redact(data.output),
        rows_in=rows_in if rows_in is not None else rows_written - (repeated or (0,))[0],
        rows_written=rows_written,
        rows_this_run=rows_this_run,
        rows_ok=rows_written - quality.get("failing_rows", error_rows),
        error_rows=error_rows,
        check_failed_rows=quality["failing_rows"] - error_rows if "failing_rows" in quality
        else None,
        seconds=round(seconds, 2),
        rows_per_second=rows_per_second,
        **accounting(run, seconds, rows_per_second, _token_totals(dataset), resumed),
        stages=stage_summaries(run),
        smoke=run.uses_sample_model,
        figures=figures,
        **quality,
        choices=declared_choices(job, options),
        cascade=cascade_summary(dataset, run.cascade, run.model_stages[-1][1].model),
        cache=cache_summary(dataset, run.cache),
        metrics=metrics,
        attempts=attempts or [],
        notes=notes,
        samples=good.to_pylist(),
        first_errors=bad.to_pylist(),
        log_file=log_file,
    )
    save_summary(summary, run_dir)
    return summary


def save_summary(summary: RunSummary, run_dir: RunDirectory) -> None:
    """Write ``summary`` as the run's ``_summary.json`` (credentials redacted)."""
    run_dir.write_json(SUMMARY_FILE, redact(summary.model_dump(mode="json")))


def cascade_summary(dataset: Any, cascade: CascadeConfig | None,
                    big: str) -> CascadeSummary | None:
    """Rows answered by each model of a cascade (``cascade.model``, then the main
    stage's ``big``), from the output's ``answered_by``."""
    import pyarrow.compute as pc

    if cascade is None or ANSWERED_BY_COLUMN not in dataset.schema.names:
        return None
    small = cascade.model
    names = dataset.schema.names
    table = dataset.to_table(columns=[ANSWERED_BY_COLUMN, *(
        c for c in (*TOKEN_COLUMNS, *FIRST_TOKEN_COLUMNS.values()) if c in names)])
    counts = {entry["values"]: int(entry["counts"]) for entry in pc.value_counts(
        table[ANSWERED_BY_COLUMN].drop_null()).to_pylist()}
    answered = {small: counts.get(small, 0), big: counts.get(big, 0)}
    reached = sum(answered.values())

    def by_model(column: str) -> dict[str, int] | None:
        if column not in names or table[column].null_count == table.num_rows:
            return None
        first = FIRST_TOKEN_COLUMNS[column]
        mine = {model: pc.sum(pc.filter(table[column], pc.equal(
            table[ANSWERED_BY_COLUMN], model))).as_py() or 0 for model in (small, big)}
        if first in names:  # the small model's tokens on the rows it escalated
            mine[small] += pc.sum(table[first]).as_py() or 0
        return {redact(model): int(tokens) for model, tokens in mine.items()}

    return CascadeSummary(small_model=redact(small), big_model=redact(big),
                          escalate_below=cascade.escalate_below,
                          answered_by={redact(k): v for k, v in answered.items()},
                          escalated=answered[big],
                          escalation_rate=round(answered[big] / reached, 4) if reached else 0.0,
                          input_tokens=by_model(INPUT_TOKENS_COLUMN),
                          output_tokens=by_model(OUTPUT_TOKENS_COLUMN))


def declared_choices(job: "JobDefinition[Any]", options: Any) -> dict[str, list[str]]:
    """column -> choices of each stage held to a ``{"choice": [...]}`` constraint.

    The constraint is on the generated text, not on a column: the column is the stage's
    one text result (a ``*_confidence`` beside it is a number). A stage with several
    text columns is left out rather than guessed at."""
    choices: dict[str, list[str]] = {}
    for stage in job.stages:
        constraint = stage.structured_output(options)
        if not isinstance(constraint, dict) or not isinstance(constraint.get("choice"), list):
            continue
        text = [name for name, alias in stage.result_columns(options).items()
                if alias in ("string", "large_string")]
        if len(text) == 1:
            choices[text[0]] = [str(choice) for choice in constraint["choice"]]
    return choices


def repeated_ids(ids: Any) -> tuple[int, str] | None:
    """(rows beyond the first of each id, a few such ids) of an id column; None when
    every id is on one row."""
    import pyarrow as pa
    import pyarrow.compute as pc

    if not plain_values(ids.type):
        return None
    # unique() hashes once; count_distinct() took 6x as long on a million ids.
    distinct = len(pc.unique(ids))
    if distinct == len(ids):
        return None
    counts = pa.table({"id": ids}).group_by("id", use_threads=False).aggregate([("id", "count")])
    repeated = counts.filter(pc.greater(counts["id_count"], 1))["id"].to_pylist()
    shown = ", ".join(repr(value) for value in repeated[:3])
    return len(ids) - distinct, shown + (f" and {len(repeated) - 3} more" if len(repeated) > 3
                                         else "")


def answer_quality(dataset: Any, checks: "ChecksConfig", rows: int) -> dict[str, Any]:
    """The summary's checks, finish reasons and confidences, from the columns a generate
    job writes (``failed_checks``, ``finish_reason``, ``*_confidence``); empty otherwise."""
    import pyarrow.compute as pc

    names = dataset.schema.names
    confidence_columns = [c for c in names if c.endswith(CONFIDENCE_SUFFIX)]
    present = [c for c in (FAILED_CHECKS_COLUMN, FINISH_REASON_COLUMN, ERROR_COLUMN) if c in names]
    if FAILED_CHECKS_COLUMN not in names and not confidence_columns:
        return {}
    table = dataset.to_table(columns=[*present, *confidence_columns])
    quality: dict[str, Any] = {}
    if FAILED_CHECKS_COLUMN in names:
        enabled = [*checks.enabled, *([checks.custom_name] if checks.custom else [])]
        counts = dict.fromkeys(enabled, 0)
        for text in table[FAILED_CHECKS_COLUMN].drop_null().to_pylist():
            for name in text.split(","):
                counts[name] = counts.get(name, 0) + 1
        quality["checks"] = {name: CheckCount(failed=n, rate=round(n / rows, 4) if rows else 0.0)
                             for name, n in counts.items()}
        failing = pc.is_valid(table[FAILED_CHECKS_COLUMN])
        if ERROR_COLUMN in present:
            failing = pc.or_(failing, pc.is_valid(table[ERROR_COLUMN]))
        quality["failing_rows"] = int(pc.sum(failing).as_py() or 0)
    if FINISH_REASON_COLUMN in names:
        reasons = pc.value_counts(table[FINISH_REASON_COLUMN].drop_null())
        quality["finish_reasons"] = {r["values"]: int(r["counts"]) for r in reasons.to_pylist()}
    quality["confidence"] = {}
    for column in confidence_columns:
        values = table[column].drop_null()
        values = values.filter(pc.invert(pc.is_nan(values)))  # no figure: not a confidence
        if not len(values):
            continue
        p10, median, p90 = pc.quantile(values, q=[0.1, 0.5, 0.9]).to_pylist()
        bins = pc.min_element_wise(pc.cast(pc.multiply(values, 10), "int64", safe=False), 9)
        histogram = [0] * 10
        for entry in pc.value_counts(bins).to_pylist():
            histogram[int(entry["values"])] = int(entry["counts"])
        quality["confidence"][column] = ConfidenceSummary(
            rows=len(values), mean=round(pc.mean(values).as_py(), 4), p10=round(p10, 4),
            median=round(median, 4), p90=round(p90, 4), histogram=histogram)
    return quality


def attempt_summaries(manifest: Manifest | None) -> list[Attempt]:
    """The manifest's attempts (the first run, then each retry); empty: never retried."""
    if manifest is None:
        return []
    return [Attempt.model_validate({key: attempt.get(key) for key in Attempt.model_fields
                                    if attempt.get(key) is not None})
            for attempt in manifest.attempts if attempt.get("rows") is not None]


def read_summary(output: str) -> RunSummary | None:
    """The summary a finished run left in ``output``, or None if there is none."""
    run_dir = RunDirectory(output)
    content = run_dir.read_json(SUMMARY_FILE)
    if content is None:
        return None
    summary = RunSummary.model_validate(content)
    # Written after the summary, so not in it: `toolkit status` and a rerun of a
    # finished run show where it is.
    if run_dir.exists(REPORT_FILE):
        summary.report = redact(output.rstrip("/") + "/" + REPORT_FILE)
    return summary


def finished_job_summary(output: str | None) -> RunSummary | None:
    """The summary of a finished job, when its output is reachable from here."""
    if not output:
        return None
    try:
        return read_summary(output)
    except Exception:  # noqa: BLE001 - an unreachable bucket just means no summary to show
        return None
