"""What a pilot run (``toolkit plan --from-run DIR``) measured: its rows/s per
worker of each stage, and what to say where it differs from the job estimated."""

from __future__ import annotations

from typing import Any

from toolkit.cluster.estimate.figures import Figure, unknown
from toolkit.errors import SpecError
from toolkit.spec.cascade import CASCADE_FIELD
from toolkit.spec.engine_settings import EngineSettings
from toolkit.spec.models import MAIN_STAGE


def read_pilot(from_run: str) -> tuple[Any, dict[str, Any]]:
    """The pilot run's summary and the spec it ran (``{}`` without a manifest).

    Raises:
        SpecError: ``from_run`` holds no readable summary.
    """
    from toolkit.run.output.run_directory import RunDirectory
    from toolkit.run.output.summary import read_summary

    try:
        summary = read_summary(from_run)
    except Exception:  # noqa: BLE001 - unreadable is the same as missing here
        summary = None
    if summary is None:
        raise SpecError(
            f"--from-run: {from_run} has no readable _summary.json.",
            hint="Point it at the output directory of a finished run of this job, e.g. "
            "one with --rows 2000 on the same model and accelerator.",
        )
    manifest = RunDirectory(from_run).read_manifest()
    return summary, (manifest.spec if manifest is not None else {})


def _pilot_section(pilot_spec: dict[str, Any], path: str) -> dict[str, Any]:
    """The pilot spec's engine section of stage ``path`` (``{}`` when it had none)."""
    if path == MAIN_STAGE:
        return pilot_spec.get(MAIN_STAGE) or {}
    if path == CASCADE_FIELD:  # only what the cascade set itself: the rest is engine's
        return {key: value for key, value in (pilot_spec.get(CASCADE_FIELD) or {}).items()
                if value is not None}
    return (pilot_spec.get("stages") or {}).get(path.split(".", 1)[1]) or {}


def _section_workers(section: dict[str, Any]) -> int | None:
    concurrency = section.get("concurrency")
    if isinstance(concurrency, list) and concurrency:  # an autoscaling range: [min, max]
        concurrency = concurrency[-1]
    return concurrency if isinstance(concurrency, int) else None


def pilot_rate(from_run: str, summary: Any, pilot_spec: dict[str, Any],
                path: str = MAIN_STAGE, multi_stage: bool = False) -> Figure:
    """Rows/s per worker of stage ``path`` as the pilot measured it.

    A pilot measures one rate, the whole pipeline's: every stage got through at
    least that many rows/s on the workers it had, so each stage's rate per worker
    is the pipeline's divided by that stage's workers in the pilot.
    """
    rows = summary.rows_this_run if summary.rows_this_run else summary.rows_written
    if path == MAIN_STAGE:
        workers = (summary.engine_workers or _section_workers(_pilot_section(pilot_spec, path))
                   or 1)
        per_worker = summary.rows_per_second_per_worker
    else:
        ran = [stage.workers for stage in summary.stages if stage.name == path]
        workers = ran[0] if ran else _section_workers(_pilot_section(pilot_spec, path))
        per_worker = None
        if not workers:
            return unknown(f"the pilot run {from_run} had no {path} stage; run a pilot of "
                            "this job and pass it with --from-run")
    if per_worker is None:
        per_worker = round(summary.rows_per_second / workers, 2)
    whole = " of this stage, the whole pipeline's rate" if multi_stage else ""
    return Figure(per_worker, "measured",
                  f"pilot run {from_run}: {rows:,} rows in {summary.seconds:,.0f} s on "
                  f"{workers} worker(s){whole}, model loading included")


def pilot_notes(summary: Any, pilot_spec: dict[str, Any],
                 model_stages: list[tuple[str, EngineSettings]]) -> list[str]:
    notes = []
    for path, settings in model_stages:
        section = _pilot_section(pilot_spec, path)
        for key, label in (("kind", "engine"), ("model", "model"),
                           ("accelerator_type", "accelerator")):
            ours = getattr(settings, key)
            if path != MAIN_STAGE:
                label = f"{path} {label}"
            if key in section and section[key] != ours:
                notes.append(f"The pilot run used {label} {section[key]!r}, this plan "
                             f"{ours!r}: its throughput may not carry over.")
    cascade = getattr(summary, "cascade", None)
    if cascade is not None:
        notes.append(f"The pilot's cascade sent {cascade.escalation_rate:.1%} of its rows "
                     f"on to {cascade.big_model} (confidence under "
                     f"{cascade.escalate_below}); a full run on rows like these sends about "
                     "as many, and the rest never reach it.")
    if summary.smoke:
        notes.append("The pilot was a smoke run (tiny random-weight model): its throughput "
                     "says nothing about a real model.")
    if summary.seconds < 120:
        notes.append(f"The pilot ran {summary.seconds:.0f} s, much of it loading the model: "
                     "a longer pilot gives a truer (higher) rate.")
    return notes
