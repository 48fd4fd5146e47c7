"""How much work a job is: its rows, and the tokens per row of its chat stage.

Rows come from the spec, a ``sample:`` input's default, or a local input file
counted here; prompt tokens from the model's own tokenizer when it is on this
machine, else :data:`CHARS_PER_TOKEN`; the answer's from a pilot, a ``choice``
list or ``sampling.max_tokens``. See :mod:`toolkit.cluster.estimate`.
"""

from __future__ import annotations

import csv
import json
import math
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from toolkit.cluster.estimate.figures import Figure, unknown
from toolkit.errors import SpecError
from toolkit.run.prompt_tokens import PLACEHOLDER_VALUE, ChatStage, chat_stage, earlier_results
from toolkit.spec.job_definition import JobDefinition
from toolkit.spec.models import SAMPLE_PREFIX, DataConfig, JobSpec

#: The usual rule of thumb for English text with BPE tokenizers.
CHARS_PER_TOKEN = 4
#: Chat-template tokens around each message (role header, separators) when estimating.
TOKENS_PER_MESSAGE = 5
#: Input rows whose prompts are rendered (and tokenized) to measure tokens per row.
SAMPLE_SIZE = 100

#: Generates rows of a ``sample:`` input: (rows, seed) -> rows.
SampleRows = Callable[[int, int], list[dict[str, Any]]]


def _local_file(data: DataConfig) -> tuple[Path, str] | None:
    """(path, format) of a single local input file, else None."""
    if "://" in data.input or data.input.startswith(SAMPLE_PREFIX):
        return None
    path = Path(data.input).expanduser()
    if not path.is_file():
        return None
    from toolkit.run.input.file_access import input_format

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


def estimate_rows(data: DataConfig, sample_rows: Mapping[str, int], count: bool = True) -> Figure:
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
    return unknown("data.rows is unset and the input can't be counted from here; pass --rows")


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


def estimate_input_tokens(job: JobDefinition[Any], spec: JobSpec, tokenizer: Any | None,
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
        return unknown("the job's prompt could not be rendered without real input rows; "
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


def estimate_output_tokens(job: JobDefinition[Any], spec: JobSpec, tokenizer: Any | None,
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
