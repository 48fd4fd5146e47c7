"""The job spec: one validated Pydantic object that a run, a render and a submit share.

A spec has five sections: ``options`` (the job's own settings, a model each job
declares), ``data`` (where rows come from and go to), ``engine`` (which inference
engine, model and how many workers), ``sampling`` and ``compute`` (the cluster a
rendered job asks for). Every model forbids unknown keys, so a typo fails here,
locally, instead of on a cluster an hour later.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    BeforeValidator,
    Field,
    SerializeAsAny,
    ValidationError,
    ValidationInfo,
    field_validator,
)

from toolkit.spec.cascade import CASCADE_FIELD, CascadeConfig, cascade_engine
from toolkit.spec.engine_settings import EngineSettings
from toolkit.spec.jobs.job_names import job_name_problem
from toolkit.spec.quality import ChecksConfig, StopLossConfig
from toolkit.spec.strict_model import StrictModel
from toolkit.spec.structured_regex import regex_problem

SAMPLE_PREFIX = "sample:"
#: The name of a job's main (last) model stage, whose section is ``engine``.
MAIN_STAGE = "engine"

_ROW_SUFFIXES = {"": 1, "k": 1_000, "m": 1_000_000, "b": 1_000_000_000}
_ROW_PATTERN = re.compile(r"^\s*(-?\d[\d_]*(?:\.\d+)?)\s*([kmb]?)\s*$", re.IGNORECASE)


def parse_row_count(value: Any) -> int | None:
    """Read a row count the way people write it: ``1000``, ``10k``, ``1M``, ``2_000_000``.

    ``all`` (or ``None``) means every row of the input.
    """
    if value is None or isinstance(value, bool):
        if isinstance(value, bool):
            raise ValueError("expected a row count such as 1000, 10k or 1M, not a boolean")
        return None
    if isinstance(value, int):
        if value <= 0:
            raise ValueError(f"row count must be positive, got {value}")
        return value
    text = str(value).strip()
    if text.lower() == "all":
        return None
    match = _ROW_PATTERN.match(text)
    if not match:
        raise ValueError(
            f"{text!r} is not a row count; write it like 1000, 10k, 1M, 2_000_000 or 'all'"
        )
    number = float(match.group(1).replace("_", "")) * _ROW_SUFFIXES[match.group(2).lower()]
    if number != int(number):
        raise ValueError(f"{text!r} is not a whole number of rows")
    if number <= 0:
        raise ValueError(f"row count must be positive, got {text!r}")
    return int(number)


RowCount = Annotated[int | None, BeforeValidator(parse_row_count)]

def check_regex(pattern: str) -> str:
    """A regular expression that compiles and that structured outputs can enforce."""
    try:
        re.compile(pattern)
    except re.error as exc:
        raise ValueError(f"not a valid regular expression: {exc}") from None
    problem = regex_problem(pattern)
    if problem is not None:
        raise ValueError(f"{pattern!r}: {problem}")
    return pattern


Regex = Annotated[str, AfterValidator(check_regex)]

#: The separators a CSV file may use, by how people name them (a tab can't be typed
#: into ``--set`` and YAML reads a bare ``|`` as something else, so ``\t``, ``tab``
#: and ``pipe`` stand for them).
CSV_DELIMITERS = {",": ",", ";": ";", "\t": "\t", "\\t": "\t", "tab": "\t", "|": "|",
                  "pipe": "|"}


class CsvDialect(StrictModel):
    """How a CSV input is written: what Excel or Google Sheets made of it."""

    delimiter: str = Field(
        ",",
        description=(
            "The character between a CSV file's columns: ',' (the default), ';' (Excel in "
            "locales whose decimal mark is a comma writes this), '\\t' (tab) or '|' (pipe). A "
            "wrong one makes the whole header one column, which the run refuses."
        ),
    )
    encoding: str = Field(
        "utf-8",
        description=(
            "The CSV file's text encoding: utf-8 (the default; a byte-order mark is "
            "skipped), or e.g. cp1252 (Excel's 'CSV' on Windows), latin-1, utf-16. "
            "Anything but UTF-8 is decoded as it is read, which costs some speed: for "
            "large inputs re-save the file as UTF-8."
        ),
    )

    @field_validator("delimiter", mode="before")
    @classmethod
    def _a_separator(cls, value: Any) -> Any:
        if isinstance(value, str) and value.lower() in CSV_DELIMITERS:
            return CSV_DELIMITERS[value.lower()]
        raise ValueError(f"{value!r} is not a CSV separator; use ',', ';', '\\t' (tab) or "
                         "'|' (pipe)")

    @field_validator("encoding")
    @classmethod
    def _a_known_encoding(cls, value: str) -> str:
        import codecs

        try:
            text = codecs.lookup(value)._is_text_encoding  # not base64, zlib, rot13 ...
        except LookupError:
            text = False
        if not text:
            raise ValueError(f"{value!r} is not a text encoding Python knows; e.g. utf-8, "
                             "cp1252, latin-1, utf-16") from None
        return value


class DataConfig(StrictModel):
    input: str = Field(
        description=(
            "Where rows come from: a local path, a directory, an http(s):// or s3:// URL, "
            "hf://NAME for a Hugging Face dataset, or 'sample:customers' / 'sample:images' "
            "for generated rows (offline smoke runs). On a multi-node "
            "cluster a local path must exist on every node; prefer s3:// or shared storage."
        )
    )
    format: Literal["auto", "csv", "parquet", "json", "images", "huggingface",
                    "openai-batch"] = Field(
        "auto",
        description=(
            "Input format; 'auto' picks by extension (.csv, .parquet, .json/.jsonl), a "
            "folder of pictures is 'images', and hf://NAME is a streamed Hugging Face dataset. "
            "'openai-batch' is an OpenAI Batch API request file (JSONL, one "
            "{custom_id, method, url, body} per line): custom_id is the row id, and a finished "
            "run also writes _batch_output.jsonl in the Batch API's output format."
        ),
    )
    id_column: str = Field(
        description=(
            "Input column that identifies a row (unique per row). Resume, error rows and "
            "the output are keyed on it; it is kept in every output row."
        )
    )

    @field_validator("id_column")
    @classmethod
    def _a_column_name(cls, value: str) -> str:
        """A name: refused here, since an empty one passes every check of the input
        and fails only deep inside Ray Data's checkpointing."""
        if not value.strip():
            raise ValueError("is empty; name the input column that identifies each row, "
                             "e.g. --set data.id_column=Index (a column unique per row)")
        return value

    rows: RowCount = Field(
        None,
        description=(
            "Process only the first N rows (1000, 10k, 1M). Unset means all rows. Small "
            "values are the cheap way to check a new prompt or model before a full run."
        ),
    )
    partitions: int | None = Field(
        None,
        gt=0,
        description=(
            "How many blocks to split the rows into. More blocks spread work over more "
            "workers and make retries cheaper; too many add scheduling overhead. Splitting "
            "is streaming (blocks of rows/partitions rows), so memory stays flat."
        ),
    )
    output: str = Field(
        description=(
            "Directory (local path or s3://) that results are written to as they are "
            "produced, with _summary.json beside them. On a cluster use shared or cloud "
            "storage: a relative path lives on the head node's disk."
        )
    )

    @field_validator("output")
    @classmethod
    def _a_directory_of_its_own(cls, value: str) -> str:
        """Not the filesystem root nor the home directory: a run lists (and on
        --overwrite clears) what it finds in its output directory."""
        if not value.strip():
            raise ValueError("is empty; name a directory for the results, e.g. "
                             "--output out/<job> (a new or empty directory)")
        if "://" in value:
            return value
        where = Path(os.path.abspath(os.path.expanduser(value)))
        try:
            home = Path(os.path.abspath(Path.home()))
        except RuntimeError:  # no home directory known
            home = None
        what = ("the filesystem root" if where == Path(where.anchor)
                else "your home directory" if where == home else None)
        if what is not None:
            shown = value if str(where) == value else f"{value} ({where})"
            raise ValueError(
                f"{shown} is {what}; results need a directory of their own, "
                "e.g. --output out/<job> (a new or empty directory)")
        return value
    output_format: Literal["parquet", "csv", "json"] = Field(
        "parquet",
        description="Parquet keeps types and compresses well; csv/json are easier to eyeball.",
    )
    seed: int = Field(0, description="Seed for generated sample input ('sample:' inputs only).")
    # Left out of dumps while it holds the defaults, so specs without one keep their hash.
    csv: CsvDialect = Field(
        default_factory=CsvDialect,
        exclude_if=lambda value: value == CsvDialect(),
        description=(
            "How a CSV input is written: csv.delimiter (',', ';', '\\t', '|') and "
            "csv.encoding (utf-8, cp1252, latin-1, utf-16, ...), e.g. --set "
            "data.csv.delimiter=';' --set data.csv.encoding=cp1252 for a CSV file from "
            "Excel in much of Europe. Quoted cells may hold newlines and doubled quotes."
        ),
    )


class SamplingConfig(StrictModel):
    temperature: float = Field(
        0.0,
        ge=0,
        description="0 is greedy and repeatable; higher values give more varied answers.",
    )
    max_tokens: int = Field(
        gt=0,
        description="Upper bound on generated tokens per row; bounds cost and run time.",
    )
    top_p: float = Field(1.0, gt=0, le=1, description="Nucleus sampling cut-off.")
    seed: int | None = Field(None, description="Sampling seed, for repeatable non-greedy runs.")


class CacheConfig(StrictModel):
    """Where a run keeps the answers it paid for, and which it may reuse
    (:mod:`toolkit.run.answer_cache`)."""

    dir: str = Field(
        description="The answer cache: a local folder, or s3://, gs://, ... (on a cluster, "
        "a location every node reads and writes). A row whose prompt, model and settings "
        "are all in it is answered from it without reaching the model.")
    sampled: bool = Field(
        False,
        description="Cache sampled answers too (temperature above 0 without a seed): a "
        "rerun then repeats the first run's sample instead of drawing a new one. Off, "
        "only repeatable answers (greedy, or a fixed seed) are cached.")
    shared: bool = Field(
        False,
        description="The local folder in dir is on storage every node mounts at the same "
        "path (NFS, EFS): a run on a cluster that is not on this machine (submit, render, "
        "run --address) may then use it. Off, such a run refuses a local folder, where "
        "each node would keep its own answers.")


def _market_type(value: Any) -> Any:
    """``spot``, ``prefer-spot``: the market as people write it, in Anyscale's spelling."""
    return value.strip().upper().replace("-", "_") if isinstance(value, str) else value


#: The market of Anyscale's worker groups (``anyscale.compute_config.models.MarketType``).
MarketType = Annotated[Literal["ON_DEMAND", "SPOT", "PREFER_SPOT"], BeforeValidator(_market_type)]


class ComputeConfig(StrictModel):
    image_uri: str | None = Field(
        None,
        description=(
            "Container image for Anyscale jobs. Unset uses the anyscale/ray-llm image "
            "matching the installed Ray version."
        ),
    )
    head_instance_type: str = Field(
        "m5.2xlarge", description="Head node instance type; it runs the driver, not the model."
    )
    worker_instance_type: str | None = Field(
        None,
        description=(
            "Worker instance type. Unset picks it from engine.accelerator_type "
            "(L4 -> g6.2xlarge, A10G -> g5.2xlarge, ...)."
        ),
    )
    min_workers: int = Field(0, ge=0, description="Workers kept up when idle (0 saves money).")
    max_workers: int = Field(
        10, ge=0, description="Upper bound for autoscaling; caps cost and concurrency."
    )
    max_retries: int = Field(
        2, ge=0, description="How many times Anyscale retries a failed job from the start."
    )
    # Left out of dumps while on demand, so specs that don't set it keep their hash.
    market_type: MarketType = Field(
        "ON_DEMAND",
        exclude_if=lambda value: value == "ON_DEMAND",
        description=(
            "Market of the worker nodes on Anyscale (the head node is always on demand): "
            "ON_DEMAND; SPOT, cheaper (often 60-70% off) but a node can be taken back at "
            "any time, and its rows in flight are redone; PREFER_SPOT, spot where there "
            "is some and on demand otherwise (Anyscale swaps back to spot when it can). "
            "--spot is short for SPOT. A Ray cluster's nodes are what it was started "
            "with: there this key is not used. `toolkit plan --spot` prices both markets."
        ),
    )
    cloud: str | None = Field(None, description="Anyscale cloud name; unset uses the default.")
    resource_wait_s: float | None = Field(
        180.0,
        gt=0,
        description=(
            "Seconds a running job waits for resources that no node (or node type the "
            "autoscaler has) can give, e.g. a GPU type the cluster lacks, before it stops "
            "with exit code 3, keeping what it wrote. Waiting for the autoscaler to add a "
            "node that can hold it is never cut short. null waits forever."
        ),
    )


class JobSpec(StrictModel):
    """Everything one run needs. Jobs subclass it to give ``options`` their own model."""

    job: str = Field(description="The job template name, e.g. 'text-industry'.")
    options: StrictModel = Field(
        default_factory=StrictModel, description="The job's own options."
    )
    data: DataConfig
    # Serialized as the section's own kind (SerializeAsAny), with that kind's fields.
    engine: SerializeAsAny[EngineSettings]
    # Left out of dumps while empty, so one-stage specs keep their hash.
    stages: dict[str, SerializeAsAny[EngineSettings]] = Field(
        default_factory=dict,
        exclude_if=lambda value: not value,
        description=(
            "A multi-stage job's model stages that run before 'engine' (its main, last "
            "stage), by the names the job gives them, each with its own engine section: "
            "model, batch_size, concurrency, num_cpus, accelerator_type. Size each for "
            "its own model: a small classifier keeps up with a large chat model on far "
            "fewer (or cheaper) GPUs. A row that fails in a stage is an error row that "
            "the later stages skip."
        ),
    )
    # Left out of dumps while unset, so specs without one keep their hash.
    cascade: CascadeConfig | None = Field(
        None,
        exclude_if=lambda value: value is None,
        description=(
            "Small model first: cascade.model answers every row, and only the rows whose "
            "answer's confidence is under cascade.escalate_below, that fail a check or "
            "that it errored on go on to engine.model. Every engine setting engine has "
            "(kind, batch_size, concurrency, num_cpus, accelerator_type, engine_kwargs) "
            "may be set here for the small model; unset ones follow engine's."
        ),
    )
    sampling: SamplingConfig
    compute: ComputeConfig = Field(default_factory=ComputeConfig)
    # Both left out of dumps while they hold the defaults, so older specs keep their hash.
    checks: ChecksConfig = Field(
        default_factory=ChecksConfig,
        exclude_if=lambda value: value == ChecksConfig(),
        description="Checks every answer of a generate job must pass (truncated, empty, "
        "invalid; refusal patterns, a confidence floor and your own function on request). "
        "Rows record what they failed in failed_checks; progress and the summary count them.",
    )
    stop_loss: StopLossConfig = Field(
        default_factory=StopLossConfig,
        exclude_if=lambda value: value == StopLossConfig(),
        description="Stop a run early (exit 8, keeping what it wrote) when most of its "
        "first rows fail; 'toolkit retry OUTPUT' then redoes only what failed.",
    )
    # Left out of dumps while unset, so specs without one keep their hash.
    cache: CacheConfig | None = Field(
        None,
        exclude_if=lambda value: value is None,
        description="Answer cache across runs (cache.dir, cache.sampled): a row answered "
        "before with the same prompt, model and settings is answered from it; rows "
        "answered from it say so in answered_by.",
    )
    strict: bool = Field(
        False,
        description=(
            "Fail the run at the first row that errors, naming it. Off (the default), "
            "failed rows are written with their 'error' and the run goes on."
        ),
    )

    @field_validator("job")
    @classmethod
    def _a_name_not_a_path(cls, value: str) -> str:
        """It names folders and files (``out/<job>``, rendered specs): never a path."""
        problem = job_name_problem(value)
        if problem is not None:
            raise ValueError(problem)
        return value

    @field_validator("cascade")
    @classmethod
    def _a_stage_in_front_of_engine(cls, value: CascadeConfig | None,
                                    info: ValidationInfo) -> CascadeConfig | None:
        """The small model's section, merged over ``engine``'s, is an engine section."""
        engine = info.data.get("engine")
        if value is None or not isinstance(engine, EngineSettings):
            return value
        try:
            cascade_engine(engine, value)
        except ValidationError as exc:
            raise ValueError("; ".join(
                f"{'.'.join(str(p) for p in item['loc']) or 'the section'}: "
                f"{item['msg'].removeprefix('Value error, ')}" for item in exc.errors()
            )) from None
        return value

    @property
    def cascade_engine(self) -> EngineSettings | None:
        """The cascade's small model's engine section (``engine``'s settings under its
        own), or None without a cascade."""
        return None if self.cascade is None else cascade_engine(self.engine, self.cascade)

    @property
    def model_stages(self) -> list[tuple[str, EngineSettings]]:
        """Every model stage's engine section with its spec path, in the order rows go
        through them: ``stages.NAME`` sections, the cascade's small model, then
        ``engine`` (the main, last one)."""
        small = self.cascade_engine
        return [*((f"stages.{name}", stage) for name, stage in self.stages.items()),
                *([(CASCADE_FIELD, small)] if small is not None else []),
                ("engine", self.engine)]

    def with_engines(self, engines: Mapping[str, EngineSettings]) -> "JobSpec":
        """The spec with some model stages' engine sections replaced, by spec path
        (``engine``, ``stages.NAME``, ``cascade``: its pool and batch settings)."""
        if not engines:
            return self
        update: dict[str, object] = {
            "engine": engines.get("engine", self.engine),
            "stages": {name: engines.get(f"stages.{name}", section)
                       for name, section in self.stages.items()}}
        small = engines.get(CASCADE_FIELD)
        if small is not None and self.cascade is not None:
            update["cascade"] = self.cascade.model_copy(update={
                "batch_size": small.batch_size, "num_cpus": small.num_cpus,
                "concurrency": (f"{small.min_concurrency}-{small.concurrency}"
                                if small.min_concurrency is not None else small.concurrency)})
        return self.model_copy(update=update)

    def stage_engine(self, name: str) -> EngineSettings:
        """The engine section of the job's stage ``name`` (:data:`MAIN_STAGE`: ``engine``)."""
        return self.engine if name == MAIN_STAGE else self.stages[name]

    @property
    def uses_sample_model(self) -> bool:
        return self.engine.model.startswith(SAMPLE_PREFIX)
