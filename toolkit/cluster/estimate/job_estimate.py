"""The estimate of a whole job: every model stage's workers, instances, rows/s and
price, the slowest stage's pace, and the wall time, GPU-hours and cost that follow
(the method: :mod:`toolkit.cluster.estimate`)."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from toolkit.cluster.cascade_price import compare_cascade
from toolkit.cluster.compute_table import worker_instance_type
from toolkit.cluster.estimate.figures import (
    AcceleratorCost,
    CostEstimate,
    Figure,
    StageEstimate,
    joined_sources,
    unknown,
)
from toolkit.cluster.estimate.markets import compare_markets
from toolkit.cluster.estimate.pilot import pilot_notes, pilot_rate, read_pilot
from toolkit.cluster.estimate.workload import (
    SampleRows,
    estimate_input_tokens,
    estimate_output_tokens,
    estimate_rows,
    local_tokenizer,
)
from toolkit.cluster.price_table import PRICES_AS_OF, instance_price
from toolkit.cluster.throughput_table import TOKENS_PER_SECOND_PER_GPU, size_class, tokens_per_second_per_gpu
from toolkit.engines.registry import capabilities
from toolkit.errors import SpecError
from toolkit.run.prompt_tokens import PromptTokens, chat_stage
from toolkit.spec.engine_settings import EngineSettings
from toolkit.spec.job_definition import JobDefinition
from toolkit.spec.models import MAIN_STAGE, SAMPLE_PREFIX, JobSpec
from toolkit.spec.row_contract import TASK_CONTRACTS


def estimate_job(
    job: JobDefinition[Any],
    spec: JobSpec,
    *,
    from_run: str | None = None,
    price_per_hour: float | None = None,
    sample_rows: Mapping[str, int] | None = None,
    sample_inputs: Mapping[str, SampleRows] | None = None,
    use_tokenizer: bool = True,
    count_rows: bool = True,
    tokens: PromptTokens | None = None,
    markets: bool = False,
    deadline_s: float | None = None,
) -> CostEstimate:
    """Estimate rows, tokens, workers, throughput, wall time, GPU-hours and cost.

    Every model stage (``spec.model_stages``) is estimated with its own workers,
    instances, rows/s per worker and price. Rows stream through every stage, so
    the slowest sets the job's pace: wall time = rows / the smallest rows/s per
    worker x workers of any stage; GPU-hours and cost add up every stage's
    workers and instances over that time (and the head node once).

    Args:
        job, spec: The job and its validated spec.
        from_run: Output directory of a finished pilot run: its measured rows/s
            replaces the throughput table (for every stage: it is the pipeline's).
        price_per_hour: On-demand price of one worker instance (USD), replacing
            the price table's (for every stage's instances).
        sample_rows: Default rows of each ``sample:`` input, by name.
        sample_inputs: Generators of ``sample:`` input rows, by name (tokens per row).
        use_tokenizer: Measure prompts with the model's tokenizer when it is on
            this machine (``False``: estimate only, for a quick estimate).
        count_rows: Count the rows of a local input file.
        tokens: Every row's prompt tokens, counted
            (:func:`~toolkit.run.prompt_tokens.count_prompt_tokens`): they replace the
            rows and tokens per row, and price the job on each accelerator.
        markets: Price spot beside on demand (:mod:`toolkit.cluster.estimate.markets`);
            also when ``compute.market_type`` isn't ON_DEMAND or with ``deadline_s``.
        deadline_s: The fewest workers that finish by then, on each market.

    Raises:
        SpecError: ``from_run`` holds no summary.
    """
    notes: list[str] = []
    sample_rows = sample_rows or {}
    pilot, pilot_spec = read_pilot(from_run) if from_run else (None, {})
    chat = chat_stage(job, spec)
    model_stages = spec.model_stages
    multi = len(model_stages) > 1
    tokenizer = local_tokenizer(chat.settings.model) if use_tokenizer else None
    rows = estimate_rows(spec.data, sample_rows, count=count_rows)
    input_tokens = estimate_input_tokens(job, spec, tokenizer, sample_inputs or {}, chat)
    output_tokens = estimate_output_tokens(job, spec, tokenizer, pilot, chat)
    budget = None
    if tokens is not None:
        rows = Figure(tokens.rows, "measured", f"rows of {tokens.input} read to count tokens")
        if tokens.counted:
            input_tokens = Figure(tokens.mean, "measured",
                                  f"every row's prompt: {tokens.total:,} tokens over "
                                  f"{tokens.counted:,} rows, tokenizer of {tokens.model}")
        budget = Figure(tokens.output_budget, "derived",
                        "every counted row's max_tokens (an upper bound)")
        notes += tokens.notes
        use_tokenizer = False  # counted: nothing is estimated
    if use_tokenizer and tokenizer is None and not chat.settings.model.startswith(SAMPLE_PREFIX):
        notes.append(f"The tokenizer of {chat.settings.model} is not on this machine (no local "
                     "directory, not in the Hugging Face cache), so tokens are estimated.")

    if multi:  # tokens are about the chat stage only
        input_tokens, output_tokens = (Figure(f.value, f.source, f"{chat.path}: {f.detail}")
                                       for f in (input_tokens, output_tokens))

    stages = []
    for path, settings in model_stages:
        if pilot is not None:
            rate = pilot_rate(str(from_run), pilot, pilot_spec, path, multi)
        else:
            rate = _table_rate(settings, input_tokens, output_tokens, path, chat.path)
        stages.append(_estimate_stage(spec, path, settings, rate, price_per_hour, notes, multi))
    if pilot is not None:
        notes += pilot_notes(pilot, pilot_spec, model_stages)
        if multi:
            notes.append("A pilot measures the whole pipeline, not each stage: a stage's "
                         "rows/s per worker is at least the pipeline's over that stage's "
                         "workers in the pilot, so a stage scaled up less than the others "
                         "may show as the slowest.")
    if multi:
        notes += _shared_group_notes(spec, stages, price_per_hour)

    head = instance_price(spec.compute.head_instance_type)
    head_figure = (Figure(head.usd_per_hour, "table",
                          f"{spec.compute.head_instance_type}, {PRICES_AS_OF}")
                   if head is not None else
                   unknown(f"no price for head node {spec.compute.head_instance_type}"))

    rated = [stage for stage in stages if stage.rows_per_second]
    # On a tie (a pilot scaled evenly) the later stage, the main one last, is named.
    slowest = min(reversed(rated), key=lambda stage: stage.rows_per_second) if rated else None
    unrated = [stage.path for stage in stages if not stage.rows_per_second] if rated else []
    if multi and unrated:
        notes.append(f"{' and '.join(unrated)}: no rows/s figure, so the wall time assumes "
                     f"{'it keeps' if len(unrated) == 1 else 'they keep'} up with "
                     f"{slowest.path}; a pilot run (--from-run) measures the whole pipeline.")
    total_rate = slowest.rows_per_second if slowest is not None else None
    wall = gpu_hours = cost = None
    if total_rate and rows.known:
        wall = round(rows.value / total_rate, 1)
        gpu_workers = sum(s.workers.value * s.gpus_per_worker.value for s in stages)
        gpu_hours = round(wall * gpu_workers / 3600, 2)
        if all(s.price_per_hour.known and s.instances.known for s in stages):
            hourly = sum(s.instances.value * s.price_per_hour.value for s in stages)
            cost = round(wall / 3600 * (hourly + (head_figure.value or 0)), 2)

    derived = "derived"
    if multi:
        whole = _whole_job(stages, slowest)
        rate_detail = (f"slowest stage, {slowest.path}: rows/s per worker x workers"
                       if slowest is not None else "")
        wall_detail = (f"rows / throughput, at {slowest.workers.value} {slowest.path} "
                       "worker(s)" if slowest is not None else "")
        gpu_detail = "wall time x every stage's workers x GPUs per worker"
        cost_detail = "wall time x (every stage's worker instances x price + head node)"
    else:
        (stage,) = stages
        whole = {name: getattr(stage, name) for name in StageEstimate._FIGURES}
        rate_detail = "rows/s per worker x workers"
        wall_detail = f"rows / throughput, at {stage.workers.value} worker(s)"
        gpu_detail = "wall time x workers x GPUs per worker"
        cost_detail = "wall time x (worker instances x price + head node)"
    compared = None
    if markets or deadline_s is not None or spec.compute.market_type != "ON_DEMAND":
        compared = compare_markets(spec, stages, rows, head_figure, deadline_s, price_per_hour)
        notes += compared.notes
    return CostEstimate(
        job=job.name, model=spec.engine.model, engine=spec.engine.kind,
        rows=rows, input_tokens_per_row=input_tokens, output_tokens_per_row=output_tokens,
        **whole, head_price_per_hour=head_figure,
        rows_per_second=Figure(total_rate, derived, rate_detail)
        if total_rate else unknown("needs rows/s per worker"),
        wall_seconds=Figure(wall, derived, wall_detail)
        if wall is not None else unknown("needs rows and throughput"),
        gpu_hours=Figure(gpu_hours, derived, gpu_detail)
        if gpu_hours is not None else unknown("needs the wall time"),
        cost_usd=Figure(cost, derived, cost_detail)
        if cost is not None else unknown("needs the wall time and a price"),
        notes=notes + ["Rough: model loading, node start-up, autoscaling and retries are not "
                       "included; a pilot run (--from-run) replaces table figures with "
                       "measured ones."],
        stages=stages, bottleneck=slowest.path if slowest is not None else None,
        unrated=unrated if multi else [],
        prompt_tokens=tokens, output_token_budget=budget,
        accelerator_costs=accelerator_costs(chat.settings, tokens, output_tokens)
        if tokens is not None else [],
        cascade_comparison=compare_cascade(spec, pilot, rows.value if rows.known else None)
        if pilot is not None else None,
        markets=compared,
    )


def accelerator_costs(settings: EngineSettings, found: PromptTokens,
                      output_tokens: Figure) -> list[AcceleratorCost]:
    """The counted job's GPU time and cost on each accelerator the throughput and
    price tables cover, for the chat stage's model size (none: its size is unknown)."""
    size = size_class(settings.model)
    if size is None or not output_tokens.known or not found.counted:
        return []
    generated = output_tokens.value * found.counted
    tokens = found.total + generated
    detail = (f"{found.total:,} input + ~{generated:,.0f} output tokens "
              f"({output_tokens.source}) at the table's tokens/s per GPU for {size}-class "
              "models on vLLM; GPU time only, rough")
    costs = []
    for accelerator, per_gpu in TOKENS_PER_SECOND_PER_GPU[size].items():
        try:
            instance_type = worker_instance_type(accelerator, None,
                                                 gpus=max(1, settings.gpus_per_worker))
        except SpecError:
            continue
        price = instance_price(instance_type)
        if price is None or not price.gpus:
            continue
        gpu_hours = tokens / per_gpu / 3600
        # Four places: a small input's figures stay checkable against a big one's.
        costs.append(AcceleratorCost(accelerator, instance_type, round(gpu_hours, 4),
                                     round(gpu_hours * price.usd_per_hour / price.gpus, 4),
                                     detail))
    return costs


def _whole_job(stages: list[StageEstimate], slowest: StageEstimate | None) -> dict[str, Figure]:
    """A multi-stage job's top-level figures: sums, shared values, the slowest stage's rate."""
    derived, differs = "derived", "differs by stage (see stages)"
    gpus = {s.gpus_per_worker.value for s in stages}
    types = list(dict.fromkeys(s.instance_type.value for s in stages))
    prices = {s.price_per_hour.value for s in stages}
    if None in prices:
        price = unknown("a stage's price is unknown")
    elif len(prices) == 1:
        price = Figure(prices.pop(), joined_sources(s.price_per_hour for s in stages),
                       "the same for every stage's instances")
    else:
        price = Figure(None, derived, differs)
    if slowest is not None:
        own = slowest.rows_per_second_per_worker
        per_worker = Figure(own.value, own.source, f"{slowest.path} (slowest stage): {own.detail}")
    else:
        per_worker = unknown("no stage has a rows/s figure")
    return {
        "workers": Figure(sum(s.workers.value for s in stages), derived,
                          "every stage's workers added up"),
        "gpus_per_worker": Figure(gpus.pop(), derived, "the same in every stage")
        if len(gpus) == 1 else Figure(None, derived, differs),
        "instance_type": unknown("a stage's instance type is unknown") if None in types
        else Figure(" + ".join(types), derived, "every stage's (see stages)"),
        "instances": Figure(sum(s.instances.value for s in stages), derived,
                            "every stage's instances added up")
        if all(s.instances.known for s in stages)
        else unknown("a stage's instances are unknown"),
        "rows_per_second_per_worker": per_worker,
        "price_per_hour": price,
    }


def _estimate_stage(spec: JobSpec, path: str, settings: EngineSettings, rate: Figure,
                price_per_hour: float | None, notes: list[str], multi: bool) -> StageEstimate:
    """One stage's workers, instances and price; ``rate`` is its rows/s per worker."""
    gpus = settings.gpus_per_worker
    gpus_detail = settings.gpus_detail
    if path != MAIN_STAGE:
        gpus_detail = gpus_detail.replace(f"{MAIN_STAGE}.", f"{path}.", 1)
    stage_notes = settings.plan_notes()
    notes.extend(f"{path}: {note}" if multi else note for note in stage_notes)
    instance_type = _instance_type_figure(spec, settings)
    price = instance_price(instance_type.value)
    workers, instances = _workers_and_instances(spec, path, settings, price, notes)
    if price_per_hour is not None:
        price_figure = Figure(price_per_hour, "flag", "--price-per-hour")
    elif price is not None:
        price_figure = Figure(price.usd_per_hour, "table",
                              f"{instance_type.value}, {PRICES_AS_OF}")
    else:
        price_figure = unknown("no price for this instance type; pass --price-per-hour")
    return StageEstimate(
        path=path, kind=settings.kind, task=settings.task, model=settings.model,
        workers=workers, gpus_per_worker=Figure(gpus, "spec", gpus_detail),
        instance_type=instance_type, instances=instances, rows_per_second_per_worker=rate,
        price_per_hour=price_figure,
    )


def _group_gpus(spec: JobSpec, accelerator: str | None) -> int:
    """GPUs per node of the worker group for ``accelerator``: as render sizes it, for
    the most GPUs any stage on that accelerator needs on one node."""
    key = accelerator.upper() if accelerator else None
    return max(s.gpus_per_worker for _, s in spec.model_stages
               if (s.accelerator_type.upper() if s.accelerator_type else None) == key)


def _instance_type_figure(spec: JobSpec, settings: EngineSettings) -> Figure:
    accelerator = settings.accelerator_type
    try:
        chosen = worker_instance_type(accelerator, spec.compute.worker_instance_type,
                                      gpus=_group_gpus(spec, accelerator))
    except SpecError as exc:
        return unknown(exc.message)
    if spec.compute.worker_instance_type:
        return Figure(chosen, "spec", "compute.worker_instance_type")
    return Figure(chosen, "table", f"compute table: {accelerator or 'CPU'} -> {chosen}")


def _workers_and_instances(spec: JobSpec, path: str, settings: EngineSettings, price: Any | None,
                  notes: list[str]) -> tuple[Figure, Figure]:
    """(workers, instances) of one stage: its concurrency capped by max_workers instances."""
    gpus = settings.gpus_per_worker
    workers = settings.concurrency
    detail = f"{path}.concurrency"
    if price is None:
        return Figure(workers, "spec", detail), unknown("instance type not in the price table")
    per_instance = price.workers_per_instance(gpus, settings.num_cpus)
    if per_instance < 1:
        notes.append(f"One {path} worker needs {gpus} GPUs; the instance holds {price.gpus}."
                     if path != MAIN_STAGE else
                     f"One worker needs {gpus} GPUs; the instance holds {price.gpus}.")
        return Figure(workers, "spec", detail), unknown("a worker does not fit one instance")
    cap = spec.compute.max_workers * per_instance
    if workers > cap:
        notes.append(f"{path}.concurrency {workers} is more than compute.max_workers "
                     f"{spec.compute.max_workers} instances hold ({cap}); planned with {cap}.")
        workers, detail = cap, f"capped by compute.max_workers {spec.compute.max_workers}"
    instances = math.ceil(workers / per_instance)
    return (Figure(workers, "spec", detail),
            Figure(instances, "derived", f"{per_instance} worker(s) per instance"))


def _shared_group_notes(spec: JobSpec, stages: list[StageEstimate],
                        price_per_hour: float | None) -> list[str]:
    """Stages on one instance type share its worker group, capped at max_workers nodes;
    a price flag prices every stage's instances alike."""
    notes = []
    by_type: dict[str, list[StageEstimate]] = {}
    for stage in stages:
        if stage.instance_type.known and stage.instances.known:
            by_type.setdefault(stage.instance_type.value, []).append(stage)
    for instance_type, sharing in by_type.items():
        total = sum(stage.instances.value for stage in sharing)
        if len(sharing) > 1 and total > spec.compute.max_workers:
            notes.append(f"{' and '.join(s.path for s in sharing)} share the {instance_type} "
                         f"worker group: {total} instances planned, more than "
                         f"compute.max_workers {spec.compute.max_workers}; they will queue.")
    if price_per_hour is not None and len(by_type) > 1:
        notes.append(f"--price-per-hour prices every worker instance alike: "
                     f"{', '.join(by_type)}.")
    return notes


def _table_rate(settings: EngineSettings, input_tokens: Figure, output_tokens: Figure,
                path: str = MAIN_STAGE, chat_path: str = MAIN_STAGE) -> Figure:
    """Rows/s per worker of stage ``path`` from the throughput table: chat stages only,
    over the tokens per row counted for ``chat_path``."""
    if path != chat_path:
        if TASK_CONTRACTS[settings.task].chat:
            return unknown(f"tokens per row are counted for {chat_path} only; run a pilot "
                            "(e.g. --rows 2000) and pass its output with --from-run")
        return unknown(f"the throughput table covers chat generation only, not "
                        f"{settings.task}; run a pilot (e.g. --rows 2000) and pass its "
                        "output with --from-run")
    gpus = settings.gpus_per_worker
    if not capabilities(settings).planned_from_table or not gpus:
        return unknown("the throughput table covers vLLM on GPUs only; run a pilot "
                        "(e.g. --rows 2000) and pass its output with --from-run")
    found = tokens_per_second_per_gpu(settings.model, settings.accelerator_type)
    if found is None:
        return unknown(f"no table figure for {settings.model} on "
                        f"{settings.accelerator_type or 'an unnamed GPU'}; run a pilot "
                        "and pass --from-run")
    if not (input_tokens.known and output_tokens.known):
        return unknown("needs tokens per row")
    size, per_gpu = found
    tokens = input_tokens.value + output_tokens.value
    rate = round(per_gpu * gpus / tokens, 2)
    return Figure(rate, "table", f"~{per_gpu:,} tokens/s per {settings.accelerator_type} "
                  f"GPU for {size}-class models on vLLM (rough) / {tokens:,.0f} tokens per row")
