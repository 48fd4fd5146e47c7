"""The job spec: one validated Pydantic object that a run, a render and a submit share.

A spec has five sections: ``options`` (the job's own settings, a model each job
declares), ``data`` (where rows come from and go to), ``engine`` (which inference
engine, model and how many workers), ``sampling`` and ``compute`` (the cluster a
rendered job asks for). Every model forbids unknown keys, so a typo fails here,
locally, instead of on a cluster an hour later.
"""

from __future__ import annotations

import re
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, BeforeValidator, ConfigDict, Field, field_validator

SAMPLE_PREFIX = "sample:"

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
    """A regular expression that compiles (for structured outputs)."""
    try:
        re.compile(pattern)
    except re.error as exc:
        raise ValueError(f"not a valid regular expression: {exc}") from None
    return pattern


Regex = Annotated[str, AfterValidator(check_regex)]


class StrictModel(BaseModel):
    """Base for every spec section: unknown keys are errors, assignments are validated."""

    model_config = ConfigDict(extra="forbid", validate_assignment=True)


class DataConfig(StrictModel):
    input: str = Field(
        description=(
            "Where rows come from: a local path, a directory, an http(s):// or s3:// URL, "
            "hf://NAME for a Hugging Face dataset, or 'sample:customers' / 'sample:images' "
            "for generated rows (offline smoke runs). On a multi-node "
            "cluster a local path must exist on every node; prefer s3:// or shared storage."
        )
    )
    format: Literal["auto", "csv", "parquet", "json", "images", "huggingface"] = Field(
        "auto",
        description=(
            "Input format; 'auto' picks by extension (.csv, .parquet, .json/.jsonl), a "
            "folder of pictures is 'images', and hf://NAME is a streamed Hugging Face dataset."
        ),
    )
    id_column: str = Field(
        description=(
            "Input column that identifies a row (unique per row). Resume, error rows and "
            "the output are keyed on it; it is kept in every output row."
        )
    )
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
    output_format: Literal["parquet", "csv", "json"] = Field(
        "parquet",
        description="Parquet keeps types and compresses well; csv/json are easier to eyeball.",
    )
    seed: int = Field(0, description="Seed for generated sample input ('sample:' inputs only).")


class EngineConfig(StrictModel):
    kind: Literal["vllm", "transformers"] = Field(
        description=(
            "'vllm' (Ray Data LLM + vLLM; GPUs, highest throughput) or 'transformers' "
            "(our own actor pool over Hugging Face transformers; runs on CPU and small "
            "GPUs, slower). Both take the same messages and give the same output."
        )
    )
    model: str = Field(
        description=(
            "Hugging Face model id, local checkpoint directory, or 'sample:tiny-chat' / "
            "'sample:tiny-vision' for a tiny random-weight model built offline (its "
            "outputs are not meaningful; it proves the pipeline works)."
        )
    )
    engine_kwargs: dict[str, Any] = Field(
        default_factory=dict,
        description=(
            "Passed to the engine. For vLLM these are vLLM engine arguments (max_model_len, "
            "gpu_memory_utilization, enable_chunked_prefill, ...). The transformers engine "
            "reads max_model_len (longer prompts become error rows) and dtype."
        ),
    )
    batch_size: int = Field(
        gt=0,
        description=(
            "Rows per batch sent to one engine worker. Larger batches keep the GPU busy; "
            "smaller ones lose less work when a worker fails and show progress sooner."
        ),
    )
    concurrency: int = Field(
        1,
        gt=0,
        description=(
            "Number of engine workers (model replicas). Each holds one copy of the model "
            "and, with an accelerator, one GPU."
        ),
    )
    accelerator_type: str | None = Field(
        None,
        description=(
            "GPU type each engine worker needs, e.g. 'L4', 'A10G', 'H100'. 'none' (or "
            "unset) runs the engine on CPU (transformers engine only)."
        ),
    )
    @field_validator("accelerator_type", mode="before")
    @classmethod
    def _none_means_cpu(cls, value: Any) -> Any:
        if isinstance(value, str) and value.strip().lower() in ("", "none", "cpu", "null"):
            return None
        return value

    num_cpus: float = Field(
        1.0,
        gt=0,
        description=(
            "CPUs reserved per engine worker. On CPU-only machines this is also the "
            "number of threads the model uses."
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
    cloud: str | None = Field(None, description="Anyscale cloud name; unset uses the default.")


class JobSpec(StrictModel):
    """Everything one run needs. Jobs subclass it to give ``options`` their own model."""

    job: str = Field(description="The job template name, e.g. 'text-industry'.")
    options: StrictModel = Field(
        default_factory=StrictModel, description="The job's own options."
    )
    data: DataConfig
    engine: EngineConfig
    sampling: SamplingConfig
    compute: ComputeConfig = Field(default_factory=ComputeConfig)
    strict: bool = Field(
        False,
        description=(
            "Fail the run at the first row that errors, naming it. Off (the default), "
            "failed rows are written with their 'error' and the run goes on."
        ),
    )

    @property
    def uses_sample_model(self) -> bool:
        return self.engine.model.startswith(SAMPLE_PREFIX)

    @property
    def uses_sample_input(self) -> bool:
        return self.data.input.startswith(SAMPLE_PREFIX)
