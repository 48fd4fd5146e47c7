"""``toolkit plan``: what a job will take before it runs: time, GPU-hours, money.

A plan multiplies a few figures, and says where each one came from:

- **rows**: ``data.rows`` (spec), a ``sample:`` input's default, or counted in a
  local input file (measured);
- **tokens per row** of the chat stage (the last ``generate`` one, else the main
  one, with placeholders for what earlier stages add): its prompts for a sample
  of the input rows (generated rows for ``sample:`` inputs, the first rows of a
  local file), tokenized with the
  model's own tokenizer when it is on this machine (a local model directory or
  the Hugging Face cache, loaded offline: measured); otherwise about
  :data:`CHARS_PER_TOKEN` characters per token over the rendered prompts, or over
  the prompt template with placeholder values when no input rows can be read
  from here (estimate). The answer's tokens come from a pilot run (measured),
  the choices of a ``choice`` output (estimate), or ``sampling.max_tokens`` (an
  upper bound);
- for each model stage (``spec.model_stages``: a multi-stage job's
  ``stages.NAME`` sections, then ``engine``):

  - **workers** (its ``concurrency``, capped by what ``compute.max_workers``
    instances hold) and their instance type (:mod:`toolkit.cluster.compute_table`);
  - **rows/s per worker**: measured by a pilot run (``--from-run DIR``: its
    ``_summary.json``; one rate for the whole pipeline), or, for the chat stage
    on a kind the table covers, tokens/s from
    :mod:`toolkit.cluster.throughput_table` divided by the tokens per row
    (table, rough); other stages have no table figure;
  - **price per hour** of a worker instance: :mod:`toolkit.cluster.price_table`
    or ``--price-per-hour`` (flag).

Rows stream through every stage, so the slowest sets the pace: wall time = rows
/ min over stages of (rows/s per worker x workers); GPU-hours = wall time x every
stage's workers x GPUs per worker; cost = wall time x (every stage's worker
instances x their price + the head node's). A stage with no rate is assumed to
keep up (and said so). Model loading, autoscaling and retries are not included.

Light: no Ray, no torch; transformers is imported only when the model's
tokenizer is on this machine.
"""

from __future__ import annotations

import csv
import json
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from toolkit.cluster.cascade_price import CascadeComparison, compare_cascade
from toolkit.cluster.compute_table import worker_instance_type
from toolkit.cluster.price_table import PRICES_AS_OF, instance_price
from toolkit.cluster.throughput_table import TOKENS_PER_SECOND_PER_GPU, size_class, tokens_per_second_per_gpu
from toolkit.engines.registry import engine_kind
from toolkit.errors import SpecError
from toolkit.run.progress.model import format_duration
from toolkit.run.prompt_tokens import (
    PLACEHOLDER_VALUE,
    ChatStage,
    PromptTokens,
    chat_stage,
    earlier_results,
)
from toolkit.spec.cascade import CASCADE_FIELD
from toolkit.spec.engine_settings import EngineSettings
from toolkit.spec.job_definition import JobDefinition
from toolkit.spec.models import MAIN_STAGE, SAMPLE_PREFIX, DataConfig, JobSpec
from toolkit.spec.row_contract import TASK_CONTRACTS

#: The usual rule of thumb for English text with BPE tokenizers.
CHARS_PER_TOKEN = 4
#: Chat-template tokens around each message (role header, separators) when estimating.
TOKENS_PER_MESSAGE = 5
#: Input rows whose prompts are rendered (and tokenized) to measure tokens per row.
SAMPLE_SIZE = 100

#: Generates rows of a ``sample:`` input: (rows, seed) -> rows.
SampleRows = Callable[[int, int], list[dict[str, Any]]]


@dataclass(frozen=True)
class Figure:
    """One number of a plan and where it came from.

    ``source`` is ``measured``, ``table``, ``estimate``, ``flag``, ``spec``,
    ``derived`` (computed from the figures above it) or ``unknown``.
    """

    value: Any
    source: str
    detail: str = ""

    @property
    def known(self) -> bool:
        return self.value is not None

    def as_json(self) -> dict[str, Any]:
        return {"value": self.value, "source": self.source, "detail": self.detail}


def _unknown(detail: str) -> Figure:
    return Figure(None, "unknown", detail)


@dataclass(frozen=True)
class StagePlan:
    """One model stage of a plan: its workers, their instances and how fast they go.

    ``path`` is the stage's spec section: ``stages.NAME`` for an earlier stage,
    ``engine`` for the main (last) one.
    """

    path: str
    kind: str
    task: str
    model: str
    workers: Figure
    gpus_per_worker: Figure
    instance_type: Figure
    instances: Figure
    rows_per_second_per_worker: Figure
    price_per_hour: Figure

    _FIGURES = ("workers", "gpus_per_worker", "instance_type", "instances",
                "rows_per_second_per_worker", "price_per_hour")

    @property
    def rows_per_second(self) -> float | None:
        """What this stage's workers together get through (None: no rate for it)."""
        per_worker = self.rows_per_second_per_worker.value
        if per_worker is None or per_worker <= 0 or self.workers.value is None:
            return None
        return round(per_worker * self.workers.value, 2)

    def as_json(self, bottleneck: bool = False) -> dict[str, Any]:
        payload: dict[str, Any] = {"path": self.path, "kind": self.kind, "task": self.task,
                                   "model": self.model}
        payload.update({name: getattr(self, name).as_json() for name in self._FIGURES})
        payload["rows_per_second"] = self.rows_per_second
        payload["bottleneck"] = bottleneck
        return payload

    def text_lines(self) -> list[str]:
        lines = [f"  {self.path}: {self.kind} with {self.model} ({self.task})"]
        for label, shown, figure in (
            ("workers", _workers(self.workers.value, self.gpus_per_worker.value), self.workers),
            ("instance type", _instances(self.instances.value, self.instance_type.value),
             self.instance_type),
            ("rows/s/worker", _approx(self.rows_per_second_per_worker.value, 1),
             self.rows_per_second_per_worker),
            ("price/hour", _usd(self.price_per_hour.value, 4) + " per instance"
             if self.price_per_hour.known else "?", self.price_per_hour),
        ):
            lines.append(f"    {label + ':':17} {shown:22} {_where(figure)}")
        return lines


@dataclass(frozen=True)
class AcceleratorCost:
    """What the counted tokens cost on one accelerator, at the throughput table's rate."""

    accelerator: str
    instance_type: str
    gpu_hours: float
    usd: float
    detail: str

    def as_json(self) -> dict[str, Any]:
        return {"accelerator": self.accelerator, "instance_type": self.instance_type,
                "gpu_hours": self.gpu_hours, "cost_usd": self.usd, "source": "derived",
                "detail": self.detail}


@dataclass(frozen=True)
class Plan:
    """Everything ``toolkit plan`` prints.

    The top-level figures describe the whole job: for a multi-stage job the
    workers and instances of every stage added up, rows/s per worker the slowest
    stage's, and ``stages`` each stage's own figures (one entry for a one-stage
    job, which prints and serializes as it always has, without them). ``model``
    and ``engine`` are the main stage's.
    """

    job: str
    model: str
    engine: str
    rows: Figure
    input_tokens_per_row: Figure
    output_tokens_per_row: Figure
    workers: Figure
    gpus_per_worker: Figure
    instance_type: Figure
    instances: Figure
    rows_per_second_per_worker: Figure
    price_per_hour: Figure
    head_price_per_hour: Figure
    rows_per_second: Figure
    wall_seconds: Figure
    gpu_hours: Figure
    cost_usd: Figure
    notes: list[str] = field(default_factory=list)
    stages: list[StagePlan] = field(default_factory=list)
    #: The slowest stage's path (None when no stage has a rate).
    bottleneck: str | None = None
    #: Stages without a rate, which the job's throughput assumes keep up.
    unrated: list[str] = field(default_factory=list)
    #: Every row's prompt tokens, counted (``--tokens``); None: not counted.
    prompt_tokens: PromptTokens | None = None
    #: The answers' token budget: every counted row's max_tokens (``--tokens``).
    output_token_budget: Figure | None = None
    #: What the job costs on each accelerator the tables price, from the counted tokens.
    accelerator_costs: list[AcceleratorCost] = field(default_factory=list)
    #: A cascade against its big model alone, from a cascade pilot (``--from-run``).
    cascade_comparison: CascadeComparison | None = None

    _FIGURES = ("rows", "input_tokens_per_row", "output_tokens_per_row", "workers",
                "gpus_per_worker", "instance_type", "instances", "rows_per_second_per_worker",
                "price_per_hour", "head_price_per_hour", "rows_per_second", "wall_seconds",
                "gpu_hours", "cost_usd")

    @property
    def multi_stage(self) -> bool:
        return len(self.stages) > 1

    def as_json(self) -> dict[str, Any]:
        payload: dict[str, Any] = {"job": self.job, "model": self.model, "engine": self.engine}
        payload.update({name: getattr(self, name).as_json() for name in self._FIGURES})
        if self.multi_stage:
            payload["stages"] = [stage.as_json(bottleneck=stage.path == self.bottleneck)
                                 for stage in self.stages]
        if self.prompt_tokens is not None:
            payload["prompt_tokens"] = self.prompt_tokens.as_json()
            payload["output_token_budget"] = (self.output_token_budget.as_json()
                                              if self.output_token_budget else None)
            payload["accelerator_costs"] = [cost.as_json() for cost in self.accelerator_costs]
        if self.cascade_comparison is not None:
            payload["cascade_comparison"] = self.cascade_comparison.as_json()
        payload["notes"] = list(self.notes)
        return payload

    def text(self) -> str:
        """The plan as ``toolkit plan`` prints it: one figure a line, with its source."""
        tokens = [
            ("rows", _count(self.rows.value), self.rows),
            ("input tokens/row", _approx(self.input_tokens_per_row.value, 0),
             self.input_tokens_per_row),
            ("output tokens/row", _approx(self.output_tokens_per_row.value, 0),
             self.output_tokens_per_row),
        ]
        head = ("head node", _usd(self.head_price_per_hour.value, 4) + " per hour"
                if self.head_price_per_hour.known else "?", self.head_price_per_hour)
        totals = [
            ("throughput", _approx(self.rows_per_second.value, 1, " rows/s"), self.rows_per_second),
            ("wall time", "~" + format_duration(self.wall_seconds.value)
             if self.wall_seconds.known else "?", self.wall_seconds),
            ("GPU-hours", "0 (CPU workers)" if self.gpu_hours.value == 0 and
             not self._gpus() else _approx(self.gpu_hours.value, 1), self.gpu_hours),
            ("cost", "~" + _usd(self.cost_usd.value, 2) if self.cost_usd.known else "?",
             self.cost_usd),
        ]
        if self.multi_stage:
            lines = [f"Plan for {self.job}: {_count(self.rows.value)} rows through "
                     f"{len(self.stages)} model stages ({', '.join(s.path for s in self.stages)})"]
            lines += _figure_lines(tokens)
            for stage in self.stages:
                lines += stage.text_lines()
            lines += _figure_lines([
                ("workers", f"{self.workers.value} ({self._gpus()} GPUs)"
                 if self._gpus() else f"{self.workers.value} on CPU", self.workers),
                ("instances", self._instances_text(), self.instances),
                head, *totals], gap=True)
        else:
            lines = [f"Plan for {self.job}: {_count(self.rows.value)} rows, {self.engine} with "
                     f"{self.model}"]
            lines += _figure_lines([
                *tokens,
                ("engine workers", _workers(self.workers.value, self.gpus_per_worker.value),
                 self.workers),
                ("instance type", _instances(self.instances.value, self.instance_type.value),
                 self.instance_type),
                ("rows/s/worker", _approx(self.rows_per_second_per_worker.value, 1),
                 self.rows_per_second_per_worker),
                ("price/hour", _usd(self.price_per_hour.value, 4) + " per instance"
                 if self.price_per_hour.known else "?", self.price_per_hour),
                head, *totals])
        if self.prompt_tokens is not None:
            lines += self._tokens_lines(self.prompt_tokens)
        if self.cascade_comparison is not None:
            lines.append(self.cascade_comparison.text())
        lines += [f"Note: {note}" for note in self.notes]
        return "\n".join(lines)

    def _tokens_lines(self, found: PromptTokens) -> list[str]:
        """The ``--tokens`` block: every row's prompt counted, what can't fit, the budget,
        and the cost on each priced accelerator."""
        measured = "measured"
        tokenizer = f"tokenizer of {found.model}, as {self.engine} counts them"
        if found.over_limit:
            more = (f" (+{found.over_limit - len(found.over_limit_ids):,} more)"
                    if found.over_limit > len(found.over_limit_ids) else "")
            over = (f"{_rows(found.over_limit)}: {'id' if found.over_limit == 1 else 'ids'} "
                    f"{', '.join(found.over_limit_ids)}{more}",
                    "each becomes an error row; --check-tokens refuses the run")
        else:
            over = ("0 rows", "every prompt fits")
        rows = [
            ("input tokens", f"{found.total:,}",
             Figure(found.total, measured, f"every row's prompt, {tokenizer}")),
            ("tokens/row", f"p50 {_count(found.p50)}, p99 {_count(found.p99)}, "
             f"max {_count(found.max)}",
             Figure(found.max, measured, f"longest: id {found.longest_id}"
                    if found.longest_id is not None else "")),
            ("max_model_len", _count(found.max_model_len),
             Figure(found.max_model_len, "spec" if "engine_kwargs" in found.max_model_len_from
                    else "measured", found.max_model_len_from)),
            ("over the limit", over[0], Figure(found.over_limit, measured, over[1])),
        ]
        if found.rejected:
            more = (f" (+{found.rejected - len(found.rejected_ids):,} more)"
                    if found.rejected > len(found.rejected_ids) else "")
            rows.append(("rejected by job", f"{_rows(found.rejected)}: ids "
                         f"{', '.join(found.rejected_ids)}{more}",
                         Figure(found.rejected, measured, f"first: {found.first_rejection}")))
        if self.output_token_budget is not None:
            rows.append(("output budget", f"{_count(self.output_token_budget.value)} tokens",
                         self.output_token_budget))
        streaming = (f"; {found.streaming_rows_per_second:,.0f} rows/s once the workers "
                     "were up" if found.streaming_rows_per_second else "")
        lines = [f"Every row's prompt, counted: {found.rows:,} rows of {found.input} in "
                 f"{found.seconds:,.1f} s ({found.rows_per_second:,.0f} rows/s{streaming})"]
        lines += _figure_lines(rows, gap=True)
        if self.accelerator_costs:
            lines.append("Cost on each priced accelerator, from the counted tokens "
                         f"({self.accelerator_costs[0].detail}):")
            for cost in self.accelerator_costs:
                lines.append(f"  {cost.accelerator + ':':7} {cost.instance_type:14} "
                             f"~{cost.gpu_hours:,.2f} GPU-hours  ~{_usd(cost.usd, 2)}")
        return lines

    def _gpus(self) -> int:
        """GPUs of every stage's workers together (GPUs per worker for one stage)."""
        if not self.multi_stage:
            return self.gpus_per_worker.value or 0
        return sum((s.workers.value or 0) * (s.gpus_per_worker.value or 0) for s in self.stages)

    def _instances_text(self) -> str:
        """``1 x g4dn.2xlarge + 2 x g6.2xlarge``: every stage's instances, by type."""
        by_type: dict[str, int] = {}
        for stage in self.stages:
            if not (stage.instance_type.known and stage.instances.known):
                return "?"
            kind = stage.instance_type.value
            by_type[kind] = by_type.get(kind, 0) + stage.instances.value
        return " + ".join(f"{count} x {kind}" for kind, count in by_type.items())

    def one_line(self) -> str | None:
        """``Estimate: ~3h 08m on 4 x g6.2xlarge, ~12.5 GPU-hours, ~$13.50 (...)``, or None
        when the wall time can't be estimated."""
        if not self.wall_seconds.known:
            return None
        parts = [f"~{format_duration(self.wall_seconds.value)}"]
        if self.multi_stage:
            shown = self._instances_text()
            if shown != "?":
                parts[0] += f" on {shown}"
        elif self.instances.known and self.instance_type.known:
            parts[0] += f" on {self.instances.value} x {self.instance_type.value}"
        if self.gpu_hours.known and self.gpu_hours.value:
            parts.append(f"~{self.gpu_hours.value:,.1f} GPU-hours")
        if self.cost_usd.known:
            parts.append(f"~{_usd(self.cost_usd.value, 2)}")
        throughput = self.rows_per_second_per_worker.source
        if self.unrated:
            throughput += f", {' and '.join(self.unrated)} assumed to keep up"
        price = (_sources(s.price_per_hour for s in self.stages) if self.multi_stage
                 else self.price_per_hour.source)
        sources = f"throughput: {throughput}, price: {price}"
        return (f"Estimate for {_count(self.rows.value)} rows: {', '.join(parts)} ({sources}; "
                "rough, see `toolkit plan`).")


def _where(figure: Figure) -> str:
    return f"{figure.source}: {figure.detail}" if figure.detail else figure.source


def _figure_lines(rows: list[tuple[str, str, Figure]], gap: bool = False) -> list[str]:
    """``  label:  shown  source: detail`` lines; ``gap`` keeps two spaces after a long value."""
    return [f"  {label + ':':19} {shown + ' ' if gap and len(shown) >= 22 else shown:22} "
            f"{_where(figure)}" for label, shown, figure in rows]


def _sources(figures: Any) -> str:
    """The distinct sources of some figures, in order: ``table``, ``table + flag``."""
    return " + ".join(dict.fromkeys(figure.source for figure in figures))


def _rows(count: int) -> str:
    return f"{count:,} row" if count == 1 else f"{count:,} rows"


def _count(value: Any) -> str:
    return f"{value:,}" if value is not None else "?"


def _approx(value: Any, digits: int, unit: str = "") -> str:
    return f"~{value:,.{digits}f}{unit}" if value is not None else "?"


def _usd(value: Any, digits: int) -> str:
    return f"${value:,.{digits}f}" if value is not None else "?"


def _workers(workers: Any, gpus: Any) -> str:
    if workers is None:
        return "?"
    return f"{workers} x {gpus} GPU" if gpus else f"{workers} on CPU"


def _instances(count: Any, instance_type: Any) -> str:
    if instance_type is None:
        return "?"
    return f"{count} x {instance_type}" if count is not None else str(instance_type)


# --- rows ------------------------------------------------------------------------------


def _local_file(data: DataConfig) -> tuple[Path, str] | None:
    """(path, format) of a single local input file, else None."""
    if "://" in data.input or data.input.startswith(SAMPLE_PREFIX):
        return None
    path = Path(data.input).expanduser()
    if not path.is_file():
        return None
    from toolkit.run.input.reading import input_format

    try:
        return path, input_format(data)
    except SpecError:
        return None


def count_local_rows(path: Path, file_format: str) -> int | None:
    """Rows in a local csv/parquet/jsonl file (Parquet: from its footer)."""
    if file_format == "parquet":
        import pyarrow.parquet as pq

        return pq.ParquetFile(path).metadata.num_rows
    if file_format == "csv":
        with open(path, newline="", encoding="utf-8") as stream:
            return max(0, sum(1 for _ in csv.reader(stream)) - 1)
    if file_format == "json":
        with open(path, encoding="utf-8") as stream:
            return sum(1 for line in stream if line.strip())
    return None


def plan_rows(data: DataConfig, sample_rows: Mapping[str, int], count: bool = True) -> Figure:
    """The rows a run will process, and where that number came from."""
    local = _local_file(data) if count else None
    counted = None
    if local is not None:
        try:
            counted = count_local_rows(*local)
        except (OSError, ValueError, UnicodeDecodeError):
            counted = None
    if data.rows is not None:
        if counted is not None and counted < data.rows:
            return Figure(counted, "measured", f"{data.input} has {counted:,} rows "
                          f"(fewer than data.rows {data.rows:,})")
        return Figure(data.rows, "spec", "data.rows (--rows)")
    if data.input.startswith(SAMPLE_PREFIX):
        name = data.input[len(SAMPLE_PREFIX):]
        if name in sample_rows:
            return Figure(sample_rows[name], "spec", f"default rows of {data.input}")
    if counted is not None:
        return Figure(counted, "measured", f"rows counted in {data.input}")
    return _unknown("data.rows is unset and the input can't be counted from here; pass --rows")


# --- tokens per row --------------------------------------------------------------------


def sample_input_rows(data: DataConfig, sample_inputs: Mapping[str, SampleRows],
                      size: int = SAMPLE_SIZE) -> tuple[list[dict[str, Any]], str] | None:
    """Up to ``size`` input rows readable from here, and what they are; else None."""
    if data.input.startswith(SAMPLE_PREFIX):
        make = sample_inputs.get(data.input[len(SAMPLE_PREFIX):])
        if make is None:
            return None
        return make(size, data.seed), f"{size} generated rows of {data.input}"
    local = _local_file(data)
    if local is None:
        return None
    path, file_format = local
    rows: list[dict[str, Any]] = []
    if file_format == "csv":
        with open(path, newline="", encoding="utf-8") as stream:
            for row in csv.DictReader(stream):
                rows.append(dict(row))
                if len(rows) >= size:
                    break
    elif file_format == "json":
        with open(path, encoding="utf-8") as stream:
            for line in stream:
                if line.strip():
                    rows.append(json.loads(line))
                if len(rows) >= size:
                    break
    elif file_format == "parquet":
        import pyarrow.parquet as pq

        batch = next(pq.ParquetFile(path).iter_batches(batch_size=size), None)
        rows = batch.to_pylist() if batch is not None else []
    else:
        return None
    return (rows, f"the first {len(rows)} rows of {data.input}") if rows else None


def local_tokenizer(model: str) -> Any | None:
    """The model's tokenizer when it is on this machine, loaded offline; else None.

    A local model directory with tokenizer files, or a Hugging Face id already in
    the Hugging Face cache. Never downloads; transformers (and with it torch) is
    imported only when the files are there.
    """
    if model.startswith(SAMPLE_PREFIX):
        return None
    path = Path(model).expanduser()
    if path.is_dir():
        if not any((path / name).is_file() for name in ("tokenizer.json", "tokenizer_config.json")):
            return None
        source = str(path)
    else:
        try:
            from huggingface_hub import try_to_load_from_cache

            if not isinstance(try_to_load_from_cache(model, "tokenizer_config.json"), str):
                return None
        except Exception:  # noqa: BLE001 - not a repo id, no hub library: no tokenizer
            return None
        source = model
    try:
        from transformers import AutoTokenizer

        return AutoTokenizer.from_pretrained(source, local_files_only=True)
    except Exception:  # noqa: BLE001 - an unusable tokenizer means estimating instead
        return None


def _text_of(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):  # multimodal parts: only the text counts here
        return "".join(part.get("text", "") for part in content if isinstance(part, dict))
    return ""


def estimate_prompt_tokens(messages: list[dict[str, Any]]) -> float:
    """About :data:`CHARS_PER_TOKEN` characters per token, plus each message's framing."""
    chars = sum(len(_text_of(m.get("content"))) for m in messages)
    return chars / CHARS_PER_TOKEN + TOKENS_PER_MESSAGE * len(messages)


def count_prompt_tokens(tokenizer: Any, messages: list[dict[str, Any]]) -> int:
    """Prompt tokens as the engines count them: the chat template, then the tokenizer."""
    text = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
    return len(tokenizer(text, add_special_tokens=False)["input_ids"])


def _messages_of(stage: ChatStage, options: Any,
                 rows: list[dict[str, Any]]) -> list[list[dict[str, Any]]]:
    earlier = earlier_results(stage, options)
    conversations = []
    for row in rows:
        try:
            conversations.append(list(stage.definition.preprocess({**row, **earlier},
                                                                  options)["messages"]))
        except Exception:  # noqa: BLE001 - rows the job rejects become error rows: no tokens
            continue
    return conversations


def plan_input_tokens(job: JobDefinition[Any], spec: JobSpec, tokenizer: Any | None,
                      sample_inputs: Mapping[str, SampleRows],
                      stage: ChatStage | None = None) -> Figure:
    """Prompt tokens per row of the chat stage: measured with the tokenizer, else estimated."""
    stage = stage or chat_stage(job, spec)
    options = job.options_of(spec)
    sampled = sample_input_rows(spec.data, sample_inputs)
    conversations, what = [], ""
    if sampled is not None:
        conversations = _messages_of(stage, options, sampled[0])
        what = sampled[1]
    if not conversations:
        columns = [column for upto in (*stage.earlier, stage.definition)
                   for column in upto.required_columns(options)]
        placeholder = dict.fromkeys([*columns, spec.data.id_column], PLACEHOLDER_VALUE)
        conversations = _messages_of(stage, options, [placeholder])
        what = (f"the prompt template with {len(PLACEHOLDER_VALUE)}-character placeholder "
                "values (no input rows readable from here)")
    if not conversations:
        return _unknown("the job's prompt could not be rendered without real input rows; "
                        "pass a local --input or a pilot run with --from-run")
    if tokenizer is not None:
        try:
            counts = [count_prompt_tokens(tokenizer, m) for m in conversations]
            return Figure(round(sum(counts) / len(counts), 1), "measured",
                          f"tokenizer of {stage.settings.model} over {what}")
        except Exception:  # noqa: BLE001 - e.g. a template that can't take these messages
            pass
    average = sum(estimate_prompt_tokens(m) for m in conversations) / len(conversations)
    return Figure(round(average, 1), "estimate",
                  f"~{CHARS_PER_TOKEN} characters per token over {what}")


def plan_output_tokens(job: JobDefinition[Any], spec: JobSpec, tokenizer: Any | None,
                       pilot: Any | None, stage: ChatStage | None = None) -> Figure:
    """Generated tokens per row: a pilot's measurement, a choice list's, or max_tokens."""
    stage = stage or chat_stage(job, spec)
    if pilot is not None and pilot.output_tokens is not None and pilot.rows_written:
        return Figure(round(pilot.output_tokens / pilot.rows_written, 1), "measured",
                      "generated tokens per row of the pilot run")
    constraint = stage.definition.structured_output(job.options_of(spec)) or {}
    choices = [str(c) for c in constraint.get("choice") or []]
    if choices:
        if tokenizer is not None:
            lengths = [len(tokenizer(c, add_special_tokens=False)["input_ids"]) for c in choices]
            how = f"tokenizer of {stage.settings.model}"
        else:
            lengths = [math.ceil(len(c) / CHARS_PER_TOKEN) for c in choices]
            how = f"~{CHARS_PER_TOKEN} characters per token"
        average = sum(lengths) / len(lengths) + 1
        return Figure(round(min(average, spec.sampling.max_tokens), 1), "estimate",
                      f"mean length of output.choice + 1 end token ({how})")
    return Figure(spec.sampling.max_tokens, "estimate",
                  "upper bound: sampling.max_tokens (a pilot run measures it)")


# --- workers, throughput, prices --------------------------------------------------------


def _pilot(from_run: str) -> tuple[Any, dict[str, Any]]:
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


def _pilot_rate(from_run: str, summary: Any, pilot_spec: dict[str, Any],
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
            return _unknown(f"the pilot run {from_run} had no {path} stage; run a pilot of "
                            "this job and pass it with --from-run")
    if per_worker is None:
        per_worker = round(summary.rows_per_second / workers, 2)
    whole = " of this stage, the whole pipeline's rate" if multi_stage else ""
    return Figure(per_worker, "measured",
                  f"pilot run {from_run}: {rows:,} rows in {summary.seconds:,.0f} s on "
                  f"{workers} worker(s){whole}, model loading included")


def _pilot_notes(summary: Any, pilot_spec: dict[str, Any],
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


def plan_job(
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
) -> Plan:
    """Estimate rows, tokens, workers, throughput, wall time, GPU-hours and cost.

    Every model stage (``spec.model_stages``) is planned with its own workers,
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

    Raises:
        SpecError: ``from_run`` holds no summary.
    """
    notes: list[str] = []
    sample_rows = sample_rows or {}
    pilot, pilot_spec = _pilot(from_run) if from_run else (None, {})
    chat = chat_stage(job, spec)
    model_stages = spec.model_stages
    multi = len(model_stages) > 1
    tokenizer = local_tokenizer(chat.settings.model) if use_tokenizer else None
    rows = plan_rows(spec.data, sample_rows, count=count_rows)
    input_tokens = plan_input_tokens(job, spec, tokenizer, sample_inputs or {}, chat)
    output_tokens = plan_output_tokens(job, spec, tokenizer, pilot, chat)
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
            rate = _pilot_rate(str(from_run), pilot, pilot_spec, path, multi)
        else:
            rate = _table_rate(settings, input_tokens, output_tokens, path, chat.path)
        stages.append(_plan_stage(spec, path, settings, rate, price_per_hour, notes, multi))
    if pilot is not None:
        notes += _pilot_notes(pilot, pilot_spec, model_stages)
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
                   _unknown(f"no price for head node {spec.compute.head_instance_type}"))

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
        whole = {name: getattr(stage, name) for name in StagePlan._FIGURES}
        rate_detail = "rows/s per worker x workers"
        wall_detail = f"rows / throughput, at {stage.workers.value} worker(s)"
        gpu_detail = "wall time x workers x GPUs per worker"
        cost_detail = "wall time x (worker instances x price + head node)"
    return Plan(
        job=job.name, model=spec.engine.model, engine=spec.engine.kind,
        rows=rows, input_tokens_per_row=input_tokens, output_tokens_per_row=output_tokens,
        **whole, head_price_per_hour=head_figure,
        rows_per_second=Figure(total_rate, derived, rate_detail)
        if total_rate else _unknown("needs rows/s per worker"),
        wall_seconds=Figure(wall, derived, wall_detail)
        if wall is not None else _unknown("needs rows and throughput"),
        gpu_hours=Figure(gpu_hours, derived, gpu_detail)
        if gpu_hours is not None else _unknown("needs the wall time"),
        cost_usd=Figure(cost, derived, cost_detail)
        if cost is not None else _unknown("needs the wall time and a price"),
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


def _whole_job(stages: list[StagePlan], slowest: StagePlan | None) -> dict[str, Figure]:
    """A multi-stage job's top-level figures: sums, shared values, the slowest stage's rate."""
    derived, differs = "derived", "differs by stage (see stages)"
    gpus = {s.gpus_per_worker.value for s in stages}
    types = list(dict.fromkeys(s.instance_type.value for s in stages))
    prices = {s.price_per_hour.value for s in stages}
    if None in prices:
        price = _unknown("a stage's price is unknown")
    elif len(prices) == 1:
        price = Figure(prices.pop(), _sources(s.price_per_hour for s in stages),
                       "the same for every stage's instances")
    else:
        price = Figure(None, derived, differs)
    if slowest is not None:
        own = slowest.rows_per_second_per_worker
        per_worker = Figure(own.value, own.source, f"{slowest.path} (slowest stage): {own.detail}")
    else:
        per_worker = _unknown("no stage has a rows/s figure")
    return {
        "workers": Figure(sum(s.workers.value for s in stages), derived,
                          "every stage's workers added up"),
        "gpus_per_worker": Figure(gpus.pop(), derived, "the same in every stage")
        if len(gpus) == 1 else Figure(None, derived, differs),
        "instance_type": _unknown("a stage's instance type is unknown") if None in types
        else Figure(" + ".join(types), derived, "every stage's (see stages)"),
        "instances": Figure(sum(s.instances.value for s in stages), derived,
                            "every stage's instances added up")
        if all(s.instances.known for s in stages)
        else _unknown("a stage's instances are unknown"),
        "rows_per_second_per_worker": per_worker,
        "price_per_hour": price,
    }


def _plan_stage(spec: JobSpec, path: str, settings: EngineSettings, rate: Figure,
                price_per_hour: float | None, notes: list[str], multi: bool) -> StagePlan:
    """One stage's workers, instances and price; ``rate`` is its rows/s per worker."""
    gpus = settings.gpus_per_worker
    gpus_detail = settings.gpus_detail
    if path != MAIN_STAGE:
        gpus_detail = gpus_detail.replace(f"{MAIN_STAGE}.", f"{path}.", 1)
    stage_notes = settings.plan_notes()
    notes.extend(f"{path}: {note}" if multi else note for note in stage_notes)
    instance_type = _plan_instance_type(spec, settings)
    price = instance_price(instance_type.value)
    workers, instances = _plan_workers(spec, path, settings, price, notes)
    if price_per_hour is not None:
        price_figure = Figure(price_per_hour, "flag", "--price-per-hour")
    elif price is not None:
        price_figure = Figure(price.usd_per_hour, "table",
                              f"{instance_type.value}, {PRICES_AS_OF}")
    else:
        price_figure = _unknown("no price for this instance type; pass --price-per-hour")
    return StagePlan(
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


def _plan_instance_type(spec: JobSpec, settings: EngineSettings) -> Figure:
    accelerator = settings.accelerator_type
    try:
        chosen = worker_instance_type(accelerator, spec.compute.worker_instance_type,
                                      gpus=_group_gpus(spec, accelerator))
    except SpecError as exc:
        return _unknown(exc.message)
    if spec.compute.worker_instance_type:
        return Figure(chosen, "spec", "compute.worker_instance_type")
    return Figure(chosen, "table", f"compute table: {accelerator or 'CPU'} -> {chosen}")


def _plan_workers(spec: JobSpec, path: str, settings: EngineSettings, price: Any | None,
                  notes: list[str]) -> tuple[Figure, Figure]:
    """(workers, instances) of one stage: its concurrency capped by max_workers instances."""
    gpus = settings.gpus_per_worker
    workers = settings.concurrency
    detail = f"{path}.concurrency"
    if price is None:
        return Figure(workers, "spec", detail), _unknown("instance type not in the price table")
    per_instance = (price.gpus // gpus) if gpus else int(price.vcpus // settings.num_cpus)
    if per_instance < 1:
        notes.append(f"One {path} worker needs {gpus} GPUs; the instance holds {price.gpus}."
                     if path != MAIN_STAGE else
                     f"One worker needs {gpus} GPUs; the instance holds {price.gpus}.")
        return Figure(workers, "spec", detail), _unknown("a worker does not fit one instance")
    cap = spec.compute.max_workers * per_instance
    if workers > cap:
        notes.append(f"{path}.concurrency {workers} is more than compute.max_workers "
                     f"{spec.compute.max_workers} instances hold ({cap}); planned with {cap}.")
        workers, detail = cap, f"capped by compute.max_workers {spec.compute.max_workers}"
    instances = math.ceil(workers / per_instance)
    return (Figure(workers, "spec", detail),
            Figure(instances, "derived", f"{per_instance} worker(s) per instance"))


def _shared_group_notes(spec: JobSpec, stages: list[StagePlan],
                        price_per_hour: float | None) -> list[str]:
    """Stages on one instance type share its worker group, capped at max_workers nodes;
    a price flag prices every stage's instances alike."""
    notes = []
    by_type: dict[str, list[StagePlan]] = {}
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
            return _unknown(f"tokens per row are counted for {chat_path} only; run a pilot "
                            "(e.g. --rows 2000) and pass its output with --from-run")
        return _unknown(f"the throughput table covers chat generation only, not "
                        f"{settings.task}; run a pilot (e.g. --rows 2000) and pass its "
                        "output with --from-run")
    gpus = settings.gpus_per_worker
    if not engine_kind(settings).planned_from_table or not gpus:
        return _unknown("the throughput table covers vLLM on GPUs only; run a pilot "
                        "(e.g. --rows 2000) and pass its output with --from-run")
    found = tokens_per_second_per_gpu(settings.model, settings.accelerator_type)
    if found is None:
        return _unknown(f"no table figure for {settings.model} on "
                        f"{settings.accelerator_type or 'an unnamed GPU'}; run a pilot "
                        "and pass --from-run")
    if not (input_tokens.known and output_tokens.known):
        return _unknown("needs tokens per row")
    size, per_gpu = found
    tokens = input_tokens.value + output_tokens.value
    rate = round(per_gpu * gpus / tokens, 2)
    return Figure(rate, "table", f"~{per_gpu:,} tokens/s per {settings.accelerator_type} "
                  f"GPU for {size}-class models on vLLM (rough) / {tokens:,.0f} tokens per row")
