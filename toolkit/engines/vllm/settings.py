"""engine.kind vllm's settings: batches in flight, the KV cache, and what they mean
for GPUs and for vLLM's CPU backend; checked as the spec loads."""

from __future__ import annotations

from typing import Any

from pydantic import Field

from toolkit.spec.engine_settings import (
    EngineSettings,
    apply_chat_template_field,
    chat_template_kwargs_field,
    max_restarts_field,
    restarts,
)

#: Ray Data LLM's default batches in flight per vLLM worker (``max_concurrent_batches``).
VLLM_DEFAULT_MAX_CONCURRENT_BATCHES = 8
#: vLLM's default ``max_num_seqs``: requests it schedules at once.
VLLM_DEFAULT_MAX_NUM_SEQS = 256
#: RAM for the KV cache of a vLLM worker on CPU when ``engine.kv_cache_gib`` is unset.
CPU_KV_CACHE_GIB = 1.0
#: CPUs each of Ray Data LLM's CPU stages (chat template, tokenize, detokenize) asks
#: for beside a vLLM engine on CPU. They are light; at Ray's default of one CPU each
#: they and the engine's own bundle need more CPUs than a small machine has, and the
#: run waits for resources forever.
CPU_BACKEND_STAGE_CPUS = 0.25


class VllmSettings(EngineSettings):
    gpus_detail = "vLLM: tensor x pipeline parallel size"

    # Left out of dumps while unset (exclude_if), so specs written before these
    # fields existed keep their hash: rendered job names and resume fingerprints.
    max_concurrent_batches: int | None = Field(
        None,
        gt=0,
        exclude_if=lambda value: value is None,
        description=(
            "Batches each engine worker works on at once (unset: Ray Data LLM's default, "
            "8). vLLM schedules up to max_num_seqs requests (256 unless engine_kwargs "
            "says) from what it has been given, so batch_size x this should reach "
            "max_num_seqs or the GPU idles; more rows in flight cost memory and lose "
            "more work if a worker dies."
        ),
    )
    kv_cache_gib: float | None = Field(
        None,
        gt=0,
        exclude_if=lambda value: value is None,
        description=(
            "Memory each engine worker sets aside for its KV cache, in GiB (vLLM's "
            "kv_cache_memory_bytes). More lets vLLM keep more rows in flight; less leaves "
            "room for other processes. On CPU it is RAM, and unset means "
            f"{CPU_KV_CACHE_GIB:g} GiB: vLLM's own default (gpu_memory_utilization 0.92 of "
            "the machine's RAM) refuses to start on a machine that runs anything else. "
            "On GPUs unset leaves it to gpu_memory_utilization."
        ),
    )
    # Left out of dumps while on (Ray Data LLM's default), so specs keep their hash.
    engine_metrics: bool = Field(
        True,
        exclude_if=lambda value: value is True,
        description=(
            "Export vLLM's engine metrics (time to first token, time per output token, "
            "KV-cache use, prefix-cache hits, running and waiting requests) to Ray's "
            "metrics, where the Ray Dashboard's Metrics view, Prometheus and Anyscale's "
            "Grafana show them (Ray Data LLM's log_engine_metrics); false turns them off."
        ),
    )
    max_restarts: int | None = max_restarts_field("vLLM engine")
    chat_template_kwargs: dict[str, Any] = chat_template_kwargs_field()
    apply_chat_template: bool = apply_chat_template_field()

    @property
    def restarts(self) -> int:
        """``max_restarts``, or its default when unset."""
        return restarts(self.max_restarts)

    @property
    def gpus_per_worker(self) -> int:
        """Tensor x pipeline parallel size with an accelerator; none on vLLM's CPU backend."""
        if self.accelerator_type is None:
            return 0
        return int(self.engine_kwargs.get("tensor_parallel_size", 1)) * int(
            self.engine_kwargs.get("pipeline_parallel_size", 1))

    @property
    def runs_on_cpu(self) -> bool:
        """vLLM's CPU backend: no accelerator."""
        return self.accelerator_type is None

    @property
    def helper_cpus(self) -> float:
        """On CPU, Ray Data LLM's chat-template, tokenize and detokenize stages."""
        return 3 * CPU_BACKEND_STAGE_CPUS if self.runs_on_cpu else 0.0

    def engine_warnings(self) -> list[str]:
        if self.runs_on_cpu:
            return []
        batches = self.max_concurrent_batches or VLLM_DEFAULT_MAX_CONCURRENT_BATCHES
        max_num_seqs = int(self.engine_kwargs.get("max_num_seqs") or VLLM_DEFAULT_MAX_NUM_SEQS)
        if self.batch_size * batches >= max_num_seqs:
            return []
        return [
            f"engine.batch_size {self.batch_size} x max_concurrent_batches {batches} "
            f"= {self.batch_size * batches} rows in flight per worker, fewer than "
            f"vLLM's max_num_seqs {max_num_seqs}: the GPU will wait for work. Raise "
            "engine.batch_size or engine.max_concurrent_batches."
        ]

    def plan_notes(self) -> list[str]:
        if not self.runs_on_cpu:
            return []
        return ["vLLM on CPU workers (no engine.accelerator_type): far slower than on "
                "GPUs for real models; set --accelerator (e.g. L4) for GPU workers."]
