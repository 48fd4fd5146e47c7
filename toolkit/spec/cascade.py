"""Small model first: the spec's ``cascade`` section and the columns a cascade writes.

A cascade puts a cheaper model in front of the job's main one (``engine``): it answers
every row first, and only the rows it is unsure of (an answer's confidence under
``escalate_below``), that failed a check, or that it errored on go on to
``engine.model``. The rows it keeps never reach the big model. Its stage takes the
engine settings ``engine`` has, each defaulting to ``engine``'s own, so only what
differs is written (``cascade: {model: SMALL, escalate_below: 0.8}``).

How the rows flow is the run layer's (:mod:`toolkit.run.cascade_rows`); this module
holds what the spec and the output agree on.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pydantic import Field

from toolkit.spec.engine_settings import EngineSettings, other_kinds_settings, validate_engine
from toolkit.spec.strict_model import StrictModel

#: The cascade stage's spec path, as errors, plan and the summary name it.
CASCADE_FIELD = "cascade"
#: Which model gave a row's final answer (or the error it carries).
ANSWERED_BY_COLUMN = "answered_by"
_CONFIDENCE = "_confidence"
#: The engine settings a cascade stage may set for itself (the rest follow ``engine``).
STAGE_SETTINGS = ("kind", "engine_kwargs", "batch_size", "concurrency", "num_cpus",
                  "accelerator_type")


class CascadeConfig(StrictModel):
    """``cascade:``: a small model answers every row first; the main engine only the
    rows it escalates."""

    model: str = Field(description=(
        "The small model that answers every row first (a Hugging Face id, a checkpoint "
        "directory, or sample:tiny-chat-small in a smoke run). It must differ from "
        "engine.model, which answers only the rows escalated to it."))
    escalate_below: float | None = Field(None, gt=0, le=1, description=(
        "A row whose answer's confidence (<column>_confidence, a choice output's) is "
        "under this goes on to engine.model. Higher sends more rows to the big model "
        "(better answers, more cost); 1 sends every row that isn't certain. Rows that "
        "fail a check or error in the small model always go on; unset, only those do."))
    kind: str | None = Field(None, description="The small model's engine kind; unset: engine.kind.")
    engine_kwargs: dict[str, Any] | None = Field(
        None, description="The small model's engine arguments; unset: engine.engine_kwargs.")
    batch_size: int | None = Field(None, gt=0, description=(
        "Rows per batch to one small-model worker; unset: engine.batch_size. A small "
        "model usually keeps up with larger batches."))
    concurrency: int | str | list[int] | None = Field(None, description=(
        "Small-model workers (N, or MIN-MAX to autoscale); unset: engine.concurrency. "
        "It sees every row while the big model sees only the escalated ones, so it "
        "usually wants as many workers or more."))
    num_cpus: float | None = Field(None, gt=0, description="CPUs per small-model worker; "
                                   "unset: engine.num_cpus.")
    accelerator_type: str | None = Field(None, description=(
        "GPU type per small-model worker ('none' for CPUs, beside a big model on GPUs); "
        "unset: engine.accelerator_type. "
        "A 1B model runs on a cheaper GPU than an 8B one."))


def cascade_engine(engine: EngineSettings, cascade: CascadeConfig) -> EngineSettings:
    """The small model's engine section: ``engine``'s, with what ``cascade`` sets on top.

    Raises:
        pydantic.ValidationError: the merged section is not a valid engine section.
    """
    data = engine.model_dump(mode="json")
    data.pop("min_concurrency", None)  # carried by the concurrency range dumped above
    # Unset (null) follows engine, also in a spec read back from its dump: a small
    # model on CPUs beside a big one on GPUs says accelerator_type: none.
    data.update(cascade.model_dump(include=set(STAGE_SETTINGS), exclude_none=True))
    data["model"] = cascade.model
    if data.get("kind") != engine.kind:
        # Settings only engine's kind takes (vLLM's kv_cache_gib...) don't follow the
        # stage onto another kind.
        for key in other_kinds_settings(data):
            del data[key]
    return validate_engine(data)


def first_columns(results: Mapping[str, str]) -> dict[str, str]:
    """Where a cascade keeps the small model's results on escalated rows:
    ``<column>_first`` and ``<column>_first_confidence``, each result column's name
    -> its own (with its Arrow type alias)."""
    named: dict[str, str] = {}
    for column in results:
        base = column.removesuffix(_CONFIDENCE)
        if column.endswith(_CONFIDENCE) and base in results:
            named[column] = f"{base}_first{_CONFIDENCE}"
        else:
            named[column] = f"{column}_first"
    return named


def confidence_columns(results: Mapping[str, str]) -> list[str]:
    """The result columns holding an answer's confidence."""
    return [column for column in results if column.endswith(_CONFIDENCE)]


def cascade_problems(cascade: CascadeConfig, engine: EngineSettings, job_name: str,
                     results: Mapping[str, str], chat: bool) -> list[str]:
    """``cascade.field: problem`` lines for a cascade in front of ``engine``, the main
    stage of job ``job_name`` (its result columns ``results``; ``chat``: it generates
    text, so its answers are checked)."""
    problems = []
    if cascade.model == engine.model:
        problems.append(f"  cascade.model: {cascade.model!r} is engine.model too; the "
                        "cascade's model answers every row first and engine.model only "
                        "the rows it escalates, so name a smaller model here")
    if not chat:
        problems.append(f"  cascade: job {job_name}'s main stage is task {engine.task}, "
                        "whose answers carry neither a confidence nor checks, so nothing "
                        "could decide which rows to escalate; a cascade needs a generate "
                        "job (a choice output gives each answer a confidence)")
    elif cascade.escalate_below is not None and not confidence_columns(results):
        problems.append(f"  cascade.escalate_below: job {job_name}'s answers carry no "
                        "confidence (only a choice output has <column>_confidence); leave "
                        "it out to escalate just the rows that fail a check or error")
    return problems
