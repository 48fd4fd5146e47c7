"""Every row's prompt tokens, counted before any model loads: ``toolkit plan --tokens``
and the ``--check-tokens`` preflight of ``run`` and ``submit``.

One Ray Data pass over the run's own input (the same rows a run reads: the file,
``--rows`` of it, or a ``sample:`` input) runs the job's own preprocess on each row,
as the pipeline does, and counts its prompt with the model's tokenizer the way the
stage's engine will (:mod:`toolkit.engines.token_counter`): the figures are the
``num_input_tokens`` a run writes, found on CPUs, with no model weights and no GPU.

The stage counted is the job's chat stage (the last ``generate`` stage of the stages
a run plans, :func:`~toolkit.run.run_plan.plan_stages`); what earlier stages would
add to a row is stood in for by placeholders, so for a multi-stage job the counts are
exact only where the prompt doesn't use them.
"""

from __future__ import annotations

import dataclasses
import os
import time
import warnings
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from toolkit.engines.model_source import ModelLocation
from toolkit.engines.token_counter import model_max_len
from toolkit.errors import InputDataError, SpecError
from toolkit.run.run_plan import PlannedStage, RunPlan, plan_stages
from toolkit.spec.engine_settings import EngineSettings
from toolkit.spec.job_definition import JobDefinition
from toolkit.spec.models import JobSpec
from toolkit.spec.row_contract import MAX_TOKENS_COLUMN, MESSAGES_COLUMN, PROMPT_COLUMN
from toolkit.spec.sample_sources import SampleProvider, require_sample
from toolkit.spec.stages import StageDefinition

if TYPE_CHECKING:
    import numpy as np
    import pyarrow as pa
    from ray.data import Dataset

#: Ids shown of the rows over the limit (and of the rows the job rejects).
SHOWN_IDS = 10
#: Rows per batch a counting worker takes.
BATCH_ROWS = 2048
#: Placeholder for an earlier stage's text result (and an input column when no row
#: can be read).
PLACEHOLDER_VALUE = "Example Value Ltd"
#: A placeholder for an earlier stage's result column, by its Arrow type alias.
_RESULT_PLACEHOLDERS: dict[str, Any] = {"double": 0.5, "float": 0.5, "int64": 1, "int32": 1,
                                        "bool": True}


@dataclass(frozen=True)
class ChatStage:
    """The model stage whose tokens are counted: the last chat (generate) stage, or
    the main one when no stage is chat; with the stages that run before it."""

    planned: PlannedStage
    earlier: tuple[StageDefinition[Any], ...] = ()

    @property
    def path(self) -> str:
        return self.planned.field

    @property
    def definition(self) -> StageDefinition[Any]:
        return self.planned.definition

    @property
    def settings(self) -> EngineSettings:
        return self.planned.engine


def last_chat_stage(stages: Sequence[PlannedStage]) -> ChatStage:
    """Of a run's planned stages, the one whose prompts and answers are counted in
    tokens (see :class:`ChatStage`); a cascade's small model is not counted."""
    stages = [stage for stage in stages if stage.cascade is None]
    found = len(stages) - 1
    for index, stage in enumerate(stages):
        if stage.contract.chat:
            found = index
    return ChatStage(stages[found], tuple(stage.definition for stage in stages[:found]))


def chat_stage(job: JobDefinition[Any], spec: JobSpec) -> ChatStage:
    """:func:`last_chat_stage` of the stages a run of ``spec`` plans (for what no run
    plans: the cost estimate)."""
    return last_chat_stage(plan_stages(job, spec, job.options_of(spec)))


@dataclass(frozen=True)
class CountedRun:
    """What a count reads, worked out before Ray starts: a run's plan, or for
    ``toolkit plan --tokens`` the same from the spec.

    Attributes:
        stages: The job's stages as a run plans them, their models located.
        samples: Serves a ``sample:`` input's rows (smoke runs).
    """

    job: JobDefinition[Any]
    spec: JobSpec
    options: Any
    stages: tuple[PlannedStage, ...]
    samples: SampleProvider | None = None

    @classmethod
    def of_plan(cls, plan: RunPlan) -> CountedRun:
        return cls(plan.job, plan.spec, plan.options, plan.stages, plan.samples)


def earlier_results(stage: ChatStage, options: Any) -> dict[str, Any]:
    """Placeholder values of what the stages before ``stage`` add to a row, so its
    prompt can be rendered without running them."""
    return {column: _RESULT_PLACEHOLDERS.get(alias, [] if alias.startswith("list<")
                                             else PLACEHOLDER_VALUE)
            for earlier in stage.earlier
            for column, alias in earlier.result_columns(options).items()}


@dataclass(frozen=True)
class PromptTokens:
    """What the counting pass found: every row's prompt tokens, and the rows that can't run.

    ``rejected`` rows are those the job's preprocess refuses (a blank column, a
    prompt over ``options.max_prompt_chars``): a run writes them as error rows
    without reaching the model, so they have no tokens here either.
    """

    job: str
    stage: str
    model: str
    input: str
    rows: int
    counted: int
    total: int
    p50: int | None
    p99: int | None
    max: int | None
    longest_id: str | None
    max_model_len: int | None
    max_model_len_from: str
    over_limit: int
    over_limit_ids: list[str]
    rejected: int
    rejected_ids: list[str]
    first_rejection: str | None
    output_budget: int
    seconds: float
    #: Rows/s while the workers were up: from the first counted batch to the last
    #: (None: one batch), so the workers' start (Python, the tokenizer) is left out.
    streaming_rows_per_second: float | None = None
    notes: list[str] = field(default_factory=list)

    @property
    def mean(self) -> float | None:
        return round(self.total / self.counted, 1) if self.counted else None

    @property
    def rows_per_second(self) -> float:
        return round(self.rows / self.seconds, 1) if self.seconds > 0 else 0.0

    def as_json(self) -> dict[str, Any]:
        return {
            "stage": self.stage, "model": self.model, "input": self.input, "rows": self.rows,
            "rows_counted": self.counted,
            "input_tokens": {"total": self.total, "mean": self.mean, "p50": self.p50,
                             "p99": self.p99, "max": self.max, "longest_id": self.longest_id},
            "max_model_len": {"value": self.max_model_len, "source": self.max_model_len_from},
            "over_max_model_len": {"count": self.over_limit, "ids": self.over_limit_ids},
            "rejected_by_job": {"count": self.rejected, "ids": self.rejected_ids,
                                "first_reason": self.first_rejection},
            "output_token_budget": self.output_budget,
            "seconds": round(self.seconds, 2), "rows_per_second": self.rows_per_second,
            "streaming_rows_per_second": self.streaming_rows_per_second,
            "notes": list(self.notes),
        }


def count_prompt_tokens(run: CountedRun, shown_ids: int = SHOWN_IDS) -> PromptTokens:
    """Count every input row's prompt tokens on the connected Ray (see the module).

    Raises:
        SpecError: the counted stage's engine has no tokenizer here (an HTTP
            endpoint), or its model can't be found.
        InputDataError: the input can't be read.
    """
    from toolkit.run.row_steps import engine_sampling_params, ship_job_code_by_value

    started = time.monotonic()
    job, spec, options = run.job, run.spec, run.options
    stage, source = counted_stage(run.stages)
    settings = stage.settings
    limit, limit_from = model_max_len(dict(settings.engine_kwargs), source, stage.path)
    ship_job_code_by_value(job)
    import ray
    from ray.data import ActorPoolStrategy, DataContext

    cpus = int(ray.cluster_resources().get("CPU", 1))
    workers = max(1, min(os.cpu_count() or 1, cpus - 1))
    template_kwargs = dict(getattr(settings, "chat_template_kwargs", None) or {})
    found = _Totals(limit, shown_ids)
    # A run stages the first --rows rows of a file, so those are the rows counted here:
    # a limit in the input's order. The run's own datasets, made later, keep Ray's default.
    context = DataContext.get_current()
    ordered = context.execution_options.preserve_order
    context.execution_options.preserve_order = ordered or spec.data.rows is not None
    try:
        with warnings.catch_warnings():
            # Ray files max_restarts under its deprecated ray_remote_args, and warns when
            # a small input has fewer blocks than the pool has workers: no news to a user.
            warnings.simplefilter("ignore", DeprecationWarning)
            warnings.filterwarnings("ignore", "The minimum number of concurrent actors")
            counted = _input_rows(run).map_batches(
                _CountBatch, fn_constructor_kwargs={
                    "tokenizer_source": source,
                    "ray_llm_prompt": stage.planned.kind.capabilities.ray_llm_prompt,
                    "chat_template_kwargs": template_kwargs,
                    "preprocess": stage.definition.preprocess, "options": options,
                    "earlier": earlier_results(stage, options),
                    "sampling_params": engine_sampling_params(
                        spec.sampling, stage.planned.structured_output),
                    "id_column": spec.data.id_column,
                    "apply_chat_template": getattr(stage.settings, "apply_chat_template", True),
                }, batch_size=BATCH_ROWS, batch_format="pyarrow",
                compute=ActorPoolStrategy(size=workers),
                # Nothing to restart for: a worker that dies fails the count, which says so.
                num_cpus=1, max_restarts=0)
            for batch in counted.iter_batches(batch_format="pyarrow", batch_size=None):
                found.add(batch)
    finally:
        context.execution_options.preserve_order = ordered
    notes = []
    if stage.earlier:
        names = ", ".join(s.name for s in stage.earlier)
        verb = "runs" if len(stage.earlier) == 1 else "run"
        notes.append(f"{names} {verb} before {stage.path}: "
                     "their results are placeholders here, so prompts that include them are "
                     "counted with those.")
    return found.result(job=job.name, stage=stage.path, model=settings.model,
                        input=spec.data.input, limit_from=limit_from,
                        seconds=time.monotonic() - started, notes=notes)


def counted_stage(stages: Sequence[PlannedStage]) -> tuple[ChatStage, str]:
    """Of a run's planned stages, the one whose prompts are counted and where its
    tokenizer loads from, checked before any Ray starts.

    Raises:
        SpecError: the stage's engine has no local tokenizer (an HTTP endpoint), or
            its tokenizer can't be loaded.
    """
    stage = last_chat_stage(stages)
    settings = stage.settings
    if not stage.planned.contract.chat or not stage.planned.kind.capabilities.loads_checkpoint:
        raise SpecError(
            f"--tokens: {stage.path} ({settings.kind}, {settings.task}) has no chat prompt "
            "counted with a local tokenizer.",
            hint="Token counts are for chat stages of engines that load a model "
            "(vllm, transformers); an HTTP endpoint counts its own tokens.")
    source = stage.planned.model.path()
    _check_tokenizer(source, settings.model, stage.path)
    return stage, source


def _check_tokenizer(source: str, model: str, path: str) -> None:
    """Load the tokenizer here once: a clear error before any worker starts, and a Hub
    model's tokenizer files fetched once, into the cache the workers then read.

    Raises:
        SpecError: the tokenizer can't be loaded (offline, gated, not a model).
    """
    try:
        from transformers import AutoTokenizer

        AutoTokenizer.from_pretrained(source)
    except Exception as exc:  # noqa: BLE001 - one paragraph instead of a traceback
        reason = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        raise SpecError(
            f"--tokens: the tokenizer of {path}.model {model} can't be loaded: {reason}",
            hint="Counting needs the model's tokenizer files (not its weights): a local "
            "model directory (--model DIR), or a Hugging Face id this machine can reach "
            "(HF_TOKEN for a gated one). --smoke counts with the sample model's tokenizer.",
        ) from None


def _input_rows(run: CountedRun) -> "Dataset":
    """The rows the run reads, in the input's order (``--rows``: its first)."""
    from toolkit.run.input.formats import run_format
    from toolkit.run.input.reading import open_input

    data, samples = run.spec.data, run.samples
    if run_format(data).stages_rows:
        return _staged_rows(run.spec)
    if data.input.startswith("sample:"):
        name = require_sample("data.input", data.input, samples, "input")
        assert samples is not None
        return samples.open_input(name, data.rows, data.seed, data.partitions)
    ds = open_input(data)
    return ds.limit(data.rows) if data.rows else ds


def _staged_rows(spec: JobSpec) -> "Dataset":
    """The rows a format that stages its own (an OpenAI Batch API request file) would
    stage for a run, staged into a folder of the count's own and held in memory: the
    run's folder is left alone, and the workers of any cluster can read them.

    Raises:
        InputDataError: the file can't be staged, as a run would refuse it (a file of
            which no line can run keeps that folder: its error file is named).
    """
    import shutil
    import tempfile

    import pyarrow.dataset as pads
    import ray.data

    from toolkit.run.input.formats import run_format
    from toolkit.run.output.run_directory import RunDirectory

    folder = tempfile.mkdtemp(prefix="toolkit-tokens-")
    counted = spec.model_copy(update={"data": spec.data.model_copy(update={"output": folder})})
    run_dir = RunDirectory(folder)
    run_dir.prepare(counted, overwrite=False, resumable=False)
    try:
        run_format(spec.data).stage(counted, run_dir)
    except InputDataError:
        if not run_dir.exists("_batch_output.jsonl"):
            shutil.rmtree(folder, ignore_errors=True)
        raise
    table = pads.dataset(run_dir.staged_input_path, format="parquet").to_table()
    shutil.rmtree(folder, ignore_errors=True)
    return ray.data.from_arrow([table.slice(start, BATCH_ROWS)
                                for start in range(0, max(table.num_rows, 1), BATCH_ROWS)])


class _CountBatch:
    """A Ray Data worker: the job's preprocess on each row, then the prompt's tokens.

    Returns per row its id, its prompt tokens (-1: the job rejected the row), its
    ``max_tokens`` and the preprocess's reason where it rejected it.
    """

    def __init__(self, tokenizer_source: str, ray_llm_prompt: bool,
                 chat_template_kwargs: dict[str, Any], preprocess: Any, options: Any,
                 earlier: dict[str, Any], sampling_params: dict[str, Any],
                 id_column: str, apply_chat_template: bool = True) -> None:
        from toolkit.engines.token_counter import PromptTokenCounter

        self.counter = PromptTokenCounter(tokenizer_source, ray_llm_prompt, chat_template_kwargs)
        # Off: a row's `prompt` is counted as written (/v1/completions).
        self.input_column = MESSAGES_COLUMN if apply_chat_template else PROMPT_COLUMN
        self.preprocess, self.options, self.earlier = preprocess, options, earlier
        self.sampling_params, self.id_column = sampling_params, id_column

    def __call__(self, batch: "pa.Table") -> dict[str, "np.ndarray"]:
        import numpy as np

        from toolkit.run.row_steps import prepare_row
        from toolkit.spec.row_contract import ERROR_COLUMN, plain

        rows = batch.to_pylist()
        ids = [str(row.get(self.id_column)) for row in rows]
        tokens = np.full(len(rows), -1, dtype=np.int64)
        max_tokens = np.zeros(len(rows), dtype=np.int64)
        reasons: list[str | None] = [None] * len(rows)
        good, conversations = [], []
        for i, row in enumerate(rows):
            out = prepare_row({**row, **self.earlier} if self.earlier else row,
                              self.preprocess, self.options, self.sampling_params,
                              self.input_column)
            if out[ERROR_COLUMN]:
                reasons[i] = out[ERROR_COLUMN]
                continue
            good.append(i)
            messages = out[self.input_column]
            conversations.append(messages if isinstance(messages, (list, str)) else plain(messages))
            max_tokens[i] = int(out.get(MAX_TOKENS_COLUMN) or 0)
        if good:
            tokens[good] = (self.counter.count(conversations)
                            if self.input_column == MESSAGES_COLUMN
                            else self.counter.count_texts(conversations))
        return {"id": np.array(ids, dtype=object), "tokens": tokens,
                "max_tokens": max_tokens, "reason": np.array(reasons, dtype=object)}


class _Totals:
    """Sums what the workers return, keeping only the ids it will show."""

    def __init__(self, limit: int | None, shown: int) -> None:
        import numpy as np

        self.np = np
        self.limit, self.shown = limit, shown
        self.tokens: list[Any] = []
        self.rows = self.over = self.rejected = self.budget = 0
        self.over_ids: list[str] = []
        self.rejected_ids: list[str] = []
        self.first_rejection: str | None = None
        self.longest = (-1, None)
        self.first_batch: tuple[float, int] | None = None  # (when, rows so far)
        self.last_batch_at = 0.0

    def add(self, batch: "pa.Table") -> None:
        np = self.np
        tokens = batch.column("tokens").to_numpy()
        ids = batch.column("id")
        self.rows += len(tokens)
        self.last_batch_at = time.monotonic()
        if self.first_batch is None:
            self.first_batch = (self.last_batch_at, self.rows)
        ok = tokens >= 0
        self.tokens.append(tokens[ok].astype(np.int32))
        self.budget += int(batch.column("max_tokens").to_numpy()[ok].sum())
        if ok.any():
            at = int(np.argmax(tokens))
            if tokens[at] > self.longest[0]:
                self.longest = (int(tokens[at]), ids[at].as_py())
        rejected = np.flatnonzero(~ok)
        self.rejected += len(rejected)
        for i in rejected[: max(0, self.shown - len(self.rejected_ids))]:
            self.rejected_ids.append(ids[int(i)].as_py())
        if len(rejected) and self.first_rejection is None:
            self.first_rejection = batch.column("reason")[int(rejected[0])].as_py()
        if self.limit is not None:
            over = np.flatnonzero(tokens > self.limit)
            self.over += len(over)
            for i in over[: max(0, self.shown - len(self.over_ids))]:
                self.over_ids.append(ids[int(i)].as_py())

    def result(self, *, job: str, stage: str, model: str, input: str, limit_from: str,
               seconds: float, notes: list[str]) -> PromptTokens:
        np = self.np
        every = np.concatenate(self.tokens) if self.tokens else np.zeros(0, dtype=np.int32)
        counted = int(every.size)

        def at(q: float) -> int | None:
            return int(np.percentile(every, q, method="higher")) if counted else None

        return PromptTokens(
            job=job, stage=stage, model=model, input=input, rows=self.rows, counted=counted,
            total=int(every.sum(dtype=np.int64)), p50=at(50), p99=at(99),
            max=int(every.max()) if counted else None, longest_id=self.longest[1],
            max_model_len=self.limit, max_model_len_from=limit_from, over_limit=self.over,
            over_limit_ids=self.over_ids, rejected=self.rejected,
            rejected_ids=self.rejected_ids, first_rejection=self.first_rejection,
            output_budget=self.budget, seconds=seconds,
            streaming_rows_per_second=self._streaming_rate(), notes=notes)

    def _streaming_rate(self) -> float | None:
        if self.first_batch is None:
            return None
        at, rows = self.first_batch
        if self.last_batch_at <= at or self.rows <= rows:
            return None
        return round((self.rows - rows) / (self.last_batch_at - at), 1)


def check_prompt_tokens(found: PromptTokens) -> None:
    """Refuse a run whose rows can't fit the model (``--check-tokens``).

    Raises:
        InputDataError: rows over ``max_model_len``, naming how many, the first
            ids and the longest, and what to change.
    """
    if not found.over_limit:
        return
    ids = ", ".join(found.over_limit_ids)
    more = f" and {found.over_limit - len(found.over_limit_ids):,} more" \
        if found.over_limit > len(found.over_limit_ids) else ""
    one = found.over_limit == 1
    raise InputDataError(
        f"--check-tokens: {found.over_limit:,} of {found.rows:,} rows of {found.input} "
        f"{'has a prompt' if one else 'have prompts'} longer than max_model_len "
        f"{found.max_model_len} ({found.max_model_len_from}) for {found.model}: "
        f"{'id' if one else 'ids'} {ids}{more}; the longest is {found.max} tokens (id "
        f"{found.longest_id}). Nothing was run.",
        hint=f"Raise {found.stage}.engine_kwargs.max_model_len (--set "
        f"{found.stage}.engine_kwargs.max_model_len={found.max}, if the model takes it), "
        "shorten or drop those rows, or run without --check-tokens to have them written "
        "as error rows. toolkit plan JOB --tokens lists them before a run.")


def count_prompt_tokens_on_ray(job: JobDefinition[Any], spec: JobSpec,
                               samples: SampleProvider | None = None,
                               address: str | None = None) -> PromptTokens:
    """:func:`count_prompt_tokens` on the Ray already joined, else on ``address`` /
    RAY_ADDRESS, else on a Ray started here for the count (and stopped after it).

    Raises:
        BackendUnavailableError: Ray can't be started or joined; the rest as
            :func:`count_prompt_tokens`'s.
    """
    import logging

    from toolkit.run.ray.connection import connect_ray, stop_local_ray

    options = job.options_of(spec)
    # Each model as a run's preflight locates it: a sample model is built where it loads.
    stages = tuple(dataclasses.replace(stage, model=ModelLocation(stage.engine.model, samples))
                   for stage in plan_stages(job, spec, options))
    counted_stage(stages)  # a model without a tokenizer here: before Ray starts
    connection = connect_ray(address)
    data_logger = logging.getLogger("ray.data")
    level = data_logger.level
    data_logger.setLevel(logging.WARNING)  # its execution plans are no news here
    try:
        # Ray Data's progress bar (on stderr) shows a long count going.
        return count_prompt_tokens(CountedRun(job, spec, options, stages, samples))
    finally:
        data_logger.setLevel(level)
        if connection.started_here:
            stop_local_ray()
