"""Picking a cascade's threshold from numbers: ``toolkit plan JOB --from-run OUT --calibrate LABELS``.

A pilot (the small model alone, or a cascade) has the small model's answer and its
confidence on every row it answered: on a cascade's escalated rows in
``<column>_first`` and ``<column>_first_confidence``. Against a CSV of known answers
(the run's id column and the answer column), each candidate ``escalate_below`` says
how many rows would go on to the big model and how many of the rows the small model
keeps are right; a cascade pilot also says how the big model did on the rows it was
sent. The candidates are the confidences' own quantiles, and the spec's threshold.

Example:
    >>> print(calibrate("out/small-alone", "labels.csv").text())  # doctest: +SKIP
    Calibration: 40 labelled rows of out/small-alone: ...
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from toolkit.errors import SpecError
from toolkit.spec.cascade import ANSWERED_BY_COLUMN

#: Quantiles of the small model's confidences offered as thresholds.
QUANTILES = (0.1, 0.25, 0.5, 0.75, 0.9)
_CONFIDENCE = "_confidence"
_FIRST = "_first"


@dataclass(frozen=True)
class Threshold:
    """One candidate ``escalate_below`` on the labelled rows."""

    escalate_below: float
    escalated: int
    kept: int
    kept_right: int

    def as_json(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class Calibration:
    """The small model's answers on labelled rows, at each candidate threshold."""

    run: str
    labels: str
    column: str
    small_model: str
    labelled: int
    small_right: int
    thresholds: list[Threshold]
    #: A cascade pilot's big model, with its labelled escalated rows and those it got right.
    big_model: str | None = None
    big_rows: int = 0
    big_right: int = 0
    notes: list[str] = field(default_factory=list)

    def as_json(self) -> dict[str, Any]:
        return {"run": self.run, "labels": self.labels, "column": self.column,
                "small_model": self.small_model, "labelled_rows": self.labelled,
                "small_model_right": self.small_right,
                "thresholds": [t.as_json() for t in self.thresholds],
                "big_model": self.big_model,
                "big_model_rows": self.big_rows if self.big_model else None,
                "big_model_right": self.big_right if self.big_model else None,
                "notes": list(self.notes)}

    def text(self) -> str:
        lines = [f"Calibration: {self.labelled:,} labelled rows of {self.run}, "
                 f"{self.column} against {self.labels}",
                 f"  {self.small_model} alone: {_right(self.small_right, self.labelled)}",
                 f"  {'escalate_below':<16} {'escalated':<18} kept rows right"]
        for t in self.thresholds:
            share = f"{t.escalated:,} ({t.escalated / self.labelled:.1%})"
            lines.append(f"  {t.escalate_below:<16g} {share:<18} {_right(t.kept_right, t.kept)}")
        if self.big_model:
            lines.append(f"  {self.big_model} on the pilot's {self.big_rows:,} escalated "
                         f"rows: {_right(self.big_right, self.big_rows)}")
        lines += [f"Note: {note}" for note in self.notes]
        return "\n".join(lines)


def _right(right: int, rows: int) -> str:
    return f"{right:,} of {rows:,} right ({right / rows:.1%})" if rows else "no rows"


def calibrate(run: str, labels: str, escalate_below: float | None = None) -> Calibration:
    """The calibration of the pilot in ``run`` against the answers in ``labels``.

    Raises:
        SpecError: the run has no summary or no answer with a confidence, or the labels
            file lacks the run's id column or answer column (each named).
    """
    import pyarrow.compute as pc

    from toolkit.run.output.run_directory import RunDirectory
    from toolkit.run.output.summary import read_summary

    summary = read_summary(run)
    manifest = RunDirectory(run).read_manifest()
    if summary is None or manifest is None:
        raise SpecError(f"--calibrate: {run} has no finished run (no _summary.json).",
                        hint="Point --from-run at the output of a finished pilot: the small "
                        "model alone, or a cascade.")
    data = manifest.spec.get("data") or {}
    id_column = str(data.get("id_column") or "")
    results = RunDirectory(run).open_results(str(data.get("output_format") or "parquet"))
    names = results.schema.names
    columns = [name.removesuffix(_CONFIDENCE) for name in names
               if name.endswith(_CONFIDENCE) and not name.endswith(_FIRST + _CONFIDENCE)
               and name.removesuffix(_CONFIDENCE) in names]
    truth, column = _read_labels(labels, id_column, columns)
    # Only the columns the calibration reads, not every input column of the pilot.
    wanted = [id_column, column, column + _CONFIDENCE, column + _FIRST,
              column + _FIRST + _CONFIDENCE, ANSWERED_BY_COLUMN]
    table = results.to_table(columns=[name for name in wanted if name in names])

    cascade = summary.cascade
    final = table[column].to_pylist()
    answer, confidence = table[column], table[column + _CONFIDENCE]
    answered_by = (table[ANSWERED_BY_COLUMN].to_pylist() if ANSWERED_BY_COLUMN in names
                   else [None] * table.num_rows)
    if cascade is not None and ANSWERED_BY_COLUMN in names:
        by_small = pc.equal(table[ANSWERED_BY_COLUMN], cascade.small_model)
        answer = pc.if_else(by_small, answer, table[column + _FIRST])
        confidence = pc.if_else(by_small, confidence, table[column + _FIRST + _CONFIDENCE])
        small_model = cascade.small_model
    else:
        small_model = str((manifest.spec.get("engine") or {}).get("model") or "the model")
    # (the label, the small model's answer and confidence, who answered, the final answer)
    rows = [(truth[str(i)], a, c, by, f) for i, a, c, by, f in zip(
        table[id_column].to_pylist(), answer.to_pylist(), confidence.to_pylist(),
        answered_by, final) if str(i) in truth]
    if not rows:
        raise SpecError(
            f"--calibrate: no {id_column} of {labels} is a row of {run}.",
            hint=f"The labels' {id_column} values must be ids of the pilot's rows.")
    confidences = sorted(c for _, _, c, _, _ in rows if c is not None)
    candidates = {round(_quantile(confidences, q), 3) for q in QUANTILES} if confidences else set()
    if escalate_below is not None:
        candidates.add(escalate_below)
    thresholds = []
    for threshold in sorted(candidates):
        kept = [(label, a) for label, a, c, _, _ in rows if c is not None and c >= threshold]
        thresholds.append(Threshold(threshold, len(rows) - len(kept), len(kept),
                                    sum(1 for label, a in kept if a == label)))
    big = ([(label, f) for label, _, _, by, f in rows if by == cascade.big_model]
           if cascade is not None else [])
    notes = []
    if len(rows) < 200:
        notes.append(f"{len(rows)} labelled rows: one row moves a share by "
                     f"{1 / len(rows):.1%}; a few hundred give steadier figures.")
    return Calibration(run=run, labels=labels, column=column, small_model=small_model,
                       labelled=len(rows),
                       small_right=sum(1 for label, a, _, _, _ in rows if a == label),
                       thresholds=thresholds,
                       big_model=cascade.big_model if cascade is not None else None,
                       big_rows=len(big), big_right=sum(1 for label, f in big if f == label),
                       notes=notes)


def _read_labels(path: str, id_column: str, columns: list[str]) -> tuple[dict[str, str], str]:
    """The known answers by id, and which answer column they are for.

    Raises:
        SpecError: the run has no answer with a confidence, or the file can't be read
            or lacks the id column or every answer column.
    """
    import csv

    if not columns:
        raise SpecError("--calibrate: the pilot run has no answer with a confidence "
                        "(<column>_confidence, a choice output's).",
                        hint="Calibrate a job whose output is a choice; a regex or "
                        "JSON-schema output escalates on failed checks alone.")
    try:
        with open(path, newline="", encoding="utf-8") as stream:
            reader = csv.DictReader(stream)
            header = list(reader.fieldnames or [])
            rows = list(reader)
    except (OSError, UnicodeDecodeError, csv.Error) as exc:
        raise SpecError(f"--calibrate: {path} can't be read as CSV: {exc}",
                        hint="Give a CSV with a header row: the run's id column and the "
                        "answer column.") from None
    column = next((c for c in columns if c in header), None)
    if id_column not in header or column is None:
        raise SpecError(
            f"--calibrate: {path} has columns {', '.join(header) or '(none)'}; it needs the "
            f"run's id column {id_column} and the known answer in {' or '.join(columns)}.",
            hint=f"Write one row per labelled input row: {id_column},{columns[0]}")
    return {row[id_column]: row[column] for row in rows}, column


def _quantile(values: list[float], q: float) -> float:
    """The ``q`` quantile of sorted ``values`` (nearest rank)."""
    return values[min(len(values) - 1, max(0, round(q * (len(values) - 1))))]
