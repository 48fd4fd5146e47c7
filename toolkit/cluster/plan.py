"""``toolkit plan``: what a job will take before it runs: time, GPU-hours, money.

A plan multiplies a few figures, and says where each one came from:

- **rows**: ``data.rows`` (spec), a ``sample:`` input's default, or counted in a
  local input file (measured);
- **tokens per row**: the job's prompts for a sample of the input rows (generated
  rows for ``sample:`` inputs, the first rows of a local file), tokenized with the
  model's own tokenizer when it is on this machine (a local model directory or
  the Hugging Face cache, loaded offline: measured); otherwise about
  :data:`CHARS_PER_TOKEN` characters per token over the rendered prompts, or over
  the prompt template with placeholder values when no input rows can be read
  from here (estimate). The answer's tokens come from a pilot run (measured),
  the choices of a ``choice`` output (estimate), or ``sampling.max_tokens`` (an
  upper bound);
- **engine workers** (``engine.concurrency``, capped by what
  ``compute.max_workers`` instances hold) and their instance type
  (:mod:`toolkit.cluster.compute_table`);
- **rows/s per worker**: measured by a pilot run (``--from-run DIR``: its
  ``_summary.json``), or tokens/s from :mod:`toolkit.cluster.throughput_table`
  divided by the tokens per row (table, rough);
- **price per hour** of a worker instance: :mod:`toolkit.cluster.price_table`
  or ``--price-per-hour`` (flag).

Then: wall time = rows / (rows/s per worker x workers); GPU-hours = wall time x
workers x GPUs per worker; cost = wall time x (worker instances x their price +
the head node's). Model loading, autoscaling and retries are not included.

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

from toolkit.cluster.compute_table import worker_instance_type
from toolkit.cluster.price_table import PRICES_AS_OF, instance_price
from toolkit.cluster.throughput_table import tokens_per_second_per_gpu
from toolkit.errors import SpecError
from toolkit.run.progress_model import format_duration
from toolkit.spec.engine_kinds import engine_kind
from toolkit.spec.job_definition import JobDefinition
from toolkit.spec.models import SAMPLE_PREFIX, DataConfig, JobSpec

#: The usual rule of thumb for English text with BPE tokenizers.
CHARS_PER_TOKEN = 4
#: Chat-template tokens around each message (role header, separators) when estimating.
TOKENS_PER_MESSAGE = 5
#: Input rows whose prompts are rendered (and tokenized) to measure tokens per row.
SAMPLE_SIZE = 100
#: Placeholder for each input column when no input row can be read from here.
PLACEHOLDER_VALUE = "Example Value Ltd"

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
class Plan:
    """Everything ``toolkit plan`` prints."""

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

    _FIGURES = ("rows", "input_tokens_per_row", "output_tokens_per_row", "workers",
                "gpus_per_worker", "instance_type", "instances", "rows_per_second_per_worker",
                "price_per_hour", "head_price_per_hour", "rows_per_second", "wall_seconds",
                "gpu_hours", "cost_usd")

    def as_json(self) -> dict[str, Any]:
        payload: dict[str, Any] = {"job": self.job, "model": self.model, "engine": self.engine}
        payload.update({name: getattr(self, name).as_json() for name in self._FIGURES})
        payload["notes"] = list(self.notes)
        return payload

    def text(self) -> str:
        """The plan as ``toolkit plan`` prints it: one figure a line, with its source."""
        rows = [
            ("rows", _count(self.rows.value), self.rows),
            ("input tokens/row", _approx(self.input_tokens_per_row.value, 0),
             self.input_tokens_per_row),
            ("output tokens/row", _approx(self.output_tokens_per_row.value, 0),
             self.output_tokens_per_row),
            ("engine workers", _workers(self.workers.value, self.gpus_per_worker.value),
             self.workers),
            ("instance type", _instances(self.instances.value, self.instance_type.value),
             self.instance_type),
            ("rows/s/worker", _approx(self.rows_per_second_per_worker.value, 1),
             self.rows_per_second_per_worker),
            ("price/hour", _usd(self.price_per_hour.value, 4) + " per instance"
             if self.price_per_hour.known else "?", self.price_per_hour),
            ("head node", _usd(self.head_price_per_hour.value, 4) + " per hour"
             if self.head_price_per_hour.known else "?", self.head_price_per_hour),
            ("throughput", _approx(self.rows_per_second.value, 1, " rows/s"), self.rows_per_second),
            ("wall time", "~" + format_duration(self.wall_seconds.value)
             if self.wall_seconds.known else "?", self.wall_seconds),
            ("GPU-hours", "0 (CPU workers)" if self.gpu_hours.value == 0 and
             not self.gpus_per_worker.value else _approx(self.gpu_hours.value, 1),
             self.gpu_hours),
            ("cost", "~" + _usd(self.cost_usd.value, 2) if self.cost_usd.known else "?",
             self.cost_usd),
        ]
        lines = [f"Plan for {self.job}: {_count(self.rows.value)} rows, {self.engine} with "
                 f"{self.model}"]
        for label, shown, figure in rows:
            where = f"{figure.source}: {figure.detail}" if figure.detail else figure.source
            lines.append(f"  {label + ':':19} {shown:22} {where}")
        lines += [f"Note: {note}" for note in self.notes]
        return "\n".join(lines)

    def one_line(self) -> str | None:
        """``Estimate: ~3h 08m on 4 x g6.2xlarge, ~12.5 GPU-hours, ~$13.50 (...)``, or None
        when the wall time can't be estimated."""
        if not self.wall_seconds.known:
            return None
        parts = [f"~{format_duration(self.wall_seconds.value)}"]
        if self.instances.known and self.instance_type.known:
            parts[0] += f" on {self.instances.value} x {self.instance_type.value}"
        if self.gpu_hours.known and self.gpu_hours.value:
            parts.append(f"~{self.gpu_hours.value:,.1f} GPU-hours")
        if self.cost_usd.known:
            parts.append(f"~{_usd(self.cost_usd.value, 2)}")
        sources = (f"throughput: {self.rows_per_second_per_worker.source}, "
                   f"price: {self.price_per_hour.source}")
        return (f"Estimate for {_count(self.rows.value)} rows: {', '.join(parts)} ({sources}; "
                "rough, see `toolkit plan`).")


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
    from toolkit.run.input_data import input_format

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


def _messages_of(job: JobDefinition[Any], options: Any,
                 rows: list[dict[str, Any]]) -> list[list[dict[str, Any]]]:
    conversations = []
    for row in rows:
        try:
            conversations.append(list(job.preprocess(row, options)["messages"]))
        except Exception:  # noqa: BLE001 - rows the job rejects become error rows: no tokens
            continue
    return conversations


def plan_input_tokens(job: JobDefinition[Any], spec: JobSpec, tokenizer: Any | None,
                      sample_inputs: Mapping[str, SampleRows]) -> Figure:
    """Prompt tokens per row: measured with the tokenizer, else estimated."""
    options = job.options_of(spec)
    sampled = sample_input_rows(spec.data, sample_inputs)
    conversations, what = [], ""
    if sampled is not None:
        conversations = _messages_of(job, options, sampled[0])
        what = sampled[1]
    if not conversations:
        placeholder = dict.fromkeys([*job.required_columns(options), spec.data.id_column],
                                    PLACEHOLDER_VALUE)
        conversations = _messages_of(job, options, [placeholder])
        what = (f"the prompt template with {len(PLACEHOLDER_VALUE)}-character placeholder "
                "values (no input rows readable from here)")
    if not conversations:
        return _unknown("the job's prompt could not be rendered without real input rows; "
                        "pass a local --input or a pilot run with --from-run")
    if tokenizer is not None:
        try:
            counts = [count_prompt_tokens(tokenizer, m) for m in conversations]
            return Figure(round(sum(counts) / len(counts), 1), "measured",
                          f"tokenizer of {spec.engine.model} over {what}")
        except Exception:  # noqa: BLE001 - e.g. a template that can't take these messages
            pass
    average = sum(estimate_prompt_tokens(m) for m in conversations) / len(conversations)
    return Figure(round(average, 1), "estimate",
                  f"~{CHARS_PER_TOKEN} characters per token over {what}")


def plan_output_tokens(job: JobDefinition[Any], spec: JobSpec, tokenizer: Any | None,
                       pilot: Any | None) -> Figure:
    """Generated tokens per row: a pilot's measurement, a choice list's, or max_tokens."""
    if pilot is not None and pilot.output_tokens is not None and pilot.rows_written:
        return Figure(round(pilot.output_tokens / pilot.rows_written, 1), "measured",
                      "generated tokens per row of the pilot run")
    constraint = job.structured_output(job.options_of(spec)) or {}
    choices = [str(c) for c in constraint.get("choice") or []]
    if choices:
        if tokenizer is not None:
            lengths = [len(tokenizer(c, add_special_tokens=False)["input_ids"]) for c in choices]
            how = f"tokenizer of {spec.engine.model}"
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
    from toolkit.run.run_directory import RunDirectory
    from toolkit.run.summary import read_summary

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


def _pilot_rate(from_run: str, summary: Any, pilot_spec: dict[str, Any]) -> Figure:
    engine = pilot_spec.get("engine") or {}
    workers = summary.engine_workers or engine.get("concurrency") or 1
    per_worker = summary.rows_per_second_per_worker
    if per_worker is None:
        per_worker = round(summary.rows_per_second / workers, 2)
    rows = summary.rows_this_run if summary.rows_this_run else summary.rows_written
    return Figure(per_worker, "measured",
                  f"pilot run {from_run}: {rows:,} rows in {summary.seconds:,.0f} s on "
                  f"{workers} worker(s), model loading included")


def _pilot_notes(summary: Any, pilot_spec: dict[str, Any], spec: JobSpec) -> list[str]:
    notes = []
    engine = pilot_spec.get("engine") or {}
    for key, label in (("kind", "engine"), ("model", "model"),
                       ("accelerator_type", "accelerator")):
        ours = getattr(spec.engine, key)
        if key in engine and engine[key] != ours:
            notes.append(f"The pilot run used {label} {engine[key]!r}, this plan {ours!r}: "
                         "its throughput may not carry over.")
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
) -> Plan:
    """Estimate rows, tokens, workers, throughput, wall time, GPU-hours and cost.

    Args:
        job, spec: The job and its validated spec.
        from_run: Output directory of a finished pilot run: its measured rows/s per
            worker replaces the throughput table.
        price_per_hour: On-demand price of one worker instance (USD), replacing
            the price table's.
        sample_rows: Default rows of each ``sample:`` input, by name.
        sample_inputs: Generators of ``sample:`` input rows, by name (tokens per row).
        use_tokenizer: Measure prompts with the model's tokenizer when it is on
            this machine (``False``: estimate only, for a quick estimate).
        count_rows: Count the rows of a local input file.

    Raises:
        SpecError: ``from_run`` holds no summary.
    """
    notes: list[str] = []
    sample_rows = sample_rows or {}
    pilot, pilot_spec = _pilot(from_run) if from_run else (None, {})
    tokenizer = local_tokenizer(spec.engine.model) if use_tokenizer else None
    rows = plan_rows(spec.data, sample_rows, count=count_rows)
    input_tokens = plan_input_tokens(job, spec, tokenizer, sample_inputs or {})
    output_tokens = plan_output_tokens(job, spec, tokenizer, pilot)
    if use_tokenizer and tokenizer is None and not spec.uses_sample_model:
        notes.append(f"The tokenizer of {spec.engine.model} is not on this machine (no local "
                     "directory, not in the Hugging Face cache), so tokens are estimated.")

    gpus = spec.engine.gpus_per_worker
    gpus_figure = Figure(gpus, "spec", spec.engine.gpus_detail)
    instance_type = _plan_instance_type(spec, notes)
    price = instance_price(instance_type.value)
    workers, instances = _plan_workers(spec, gpus, price, notes)

    if pilot is not None:
        per_worker = _pilot_rate(str(from_run), pilot, pilot_spec)
        notes += _pilot_notes(pilot, pilot_spec, spec)
    else:
        per_worker = _table_rate(spec, gpus, input_tokens, output_tokens)

    if price_per_hour is not None:
        price_figure = Figure(price_per_hour, "flag", "--price-per-hour")
    elif price is not None:
        price_figure = Figure(price.usd_per_hour, "table",
                              f"{instance_type.value}, {PRICES_AS_OF}")
    else:
        price_figure = _unknown("no price for this instance type; pass --price-per-hour")
    head = instance_price(spec.compute.head_instance_type)
    head_figure = (Figure(head.usd_per_hour, "table",
                          f"{spec.compute.head_instance_type}, {PRICES_AS_OF}")
                   if head is not None else
                   _unknown(f"no price for head node {spec.compute.head_instance_type}"))

    total_rate = wall = gpu_hours = cost = None
    if per_worker.known and workers.known and per_worker.value > 0:
        total_rate = round(per_worker.value * workers.value, 2)
    if total_rate and rows.known:
        wall = round(rows.value / total_rate, 1)
        gpu_hours = round(wall * workers.value * gpus / 3600, 2)
        if price_figure.known and instances.known:
            cost = round(wall / 3600 * (instances.value * price_figure.value
                                        + (head_figure.value or 0)), 2)
    derived = "derived"
    return Plan(
        job=job.name, model=spec.engine.model, engine=spec.engine.kind,
        rows=rows, input_tokens_per_row=input_tokens, output_tokens_per_row=output_tokens,
        workers=workers, gpus_per_worker=gpus_figure, instance_type=instance_type,
        instances=instances, rows_per_second_per_worker=per_worker,
        price_per_hour=price_figure, head_price_per_hour=head_figure,
        rows_per_second=Figure(total_rate, derived, "rows/s per worker x workers")
        if total_rate else _unknown("needs rows/s per worker"),
        wall_seconds=Figure(wall, derived, f"rows / throughput, at {workers.value} worker(s)")
        if wall is not None else _unknown("needs rows and throughput"),
        gpu_hours=Figure(gpu_hours, derived, "wall time x workers x GPUs per worker")
        if gpu_hours is not None else _unknown("needs the wall time"),
        cost_usd=Figure(cost, derived, "wall time x (worker instances x price + head node)")
        if cost is not None else _unknown("needs the wall time and a price"),
        notes=notes + ["Rough: model loading, node start-up, autoscaling and retries are not "
                       "included; a pilot run (--from-run) replaces table figures with "
                       "measured ones."],
    )


def _plan_instance_type(spec: JobSpec, notes: list[str]) -> Figure:
    accelerator = spec.engine.accelerator_type
    notes.extend(spec.engine.plan_notes())
    try:
        chosen = worker_instance_type(accelerator, spec.compute.worker_instance_type,
                                      gpus=spec.engine.gpus_per_worker)
    except SpecError as exc:
        return _unknown(exc.message)
    if spec.compute.worker_instance_type:
        return Figure(chosen, "spec", "compute.worker_instance_type")
    return Figure(chosen, "table", f"compute table: {accelerator or 'CPU'} -> {chosen}")


def _plan_workers(spec: JobSpec, gpus: int, price: Any | None,
                  notes: list[str]) -> tuple[Figure, Figure]:
    """(engine workers, worker instances): concurrency capped by max_workers instances."""
    workers = spec.engine.concurrency
    detail = "engine.concurrency"
    if price is None:
        return Figure(workers, "spec", detail), _unknown("instance type not in the price table")
    per_instance = (price.gpus // gpus) if gpus else int(price.vcpus // spec.engine.num_cpus)
    if per_instance < 1:
        notes.append(f"One worker needs {gpus} GPUs; the instance holds {price.gpus}.")
        return Figure(workers, "spec", detail), _unknown("a worker does not fit one instance")
    cap = spec.compute.max_workers * per_instance
    if workers > cap:
        notes.append(f"engine.concurrency {workers} is more than compute.max_workers "
                     f"{spec.compute.max_workers} instances hold ({cap}); planned with {cap}.")
        workers, detail = cap, f"capped by compute.max_workers {spec.compute.max_workers}"
    instances = math.ceil(workers / per_instance)
    return (Figure(workers, "spec", detail),
            Figure(instances, "derived", f"{per_instance} worker(s) per instance"))


def _table_rate(spec: JobSpec, gpus: int, input_tokens: Figure, output_tokens: Figure) -> Figure:
    if not engine_kind(spec.engine).planned_from_table or not gpus:
        return _unknown("the throughput table covers vLLM on GPUs only; run a pilot "
                        "(e.g. --rows 2000) and pass its output with --from-run")
    found = tokens_per_second_per_gpu(spec.engine.model, spec.engine.accelerator_type)
    if found is None:
        return _unknown(f"no table figure for {spec.engine.model} on "
                        f"{spec.engine.accelerator_type or 'an unnamed GPU'}; run a pilot "
                        "and pass --from-run")
    if not (input_tokens.known and output_tokens.known):
        return _unknown("needs tokens per row")
    size, per_gpu = found
    tokens = input_tokens.value + output_tokens.value
    rate = round(per_gpu * gpus / tokens, 2)
    return Figure(rate, "table", f"~{per_gpu:,} tokens/s per {spec.engine.accelerator_type} "
                  f"GPU for {size}-class models on vLLM (rough) / {tokens:,.0f} tokens per row")
