"""Rough vLLM batch throughput per GPU, for ``toolkit plan`` when no pilot run was measured.

One figure per model size class and GPU: tokens per second that ONE GPU gets
through in offline batch inference with vLLM (prompt and generated tokens
together), BF16 weights, default vLLM settings, many requests in flight. Rows/s
per engine worker is that figure (times the worker's GPUs) divided by the
tokens of one row (its prompt plus its answer).

These are rough, to within about a factor of two, and deliberately so: real
throughput depends on the prompt/answer mix (prompt tokens are much cheaper than
generated ones, so prompt-heavy jobs like text-industry run faster than this,
answer-heavy ones slower), ``max_model_len``, batch size, structured outputs
and the vLLM version. A pilot run (``toolkit plan --from-run DIR``) measures it.

How the figures were set: the 8B-class H100 and A100 figures from public vLLM
benchmarks of Llama 3 / 3.1 8B, rounded down to a middle between prompt-heavy
and chat-like mixes; the other GPUs scaled from those by their datasheet BF16
(FP16 for T4) tensor throughput and memory bandwidth, and smaller models by
parameter count, held back where vLLM's own per-step overhead dominates.
Sources:

- vLLM blog, 2024-09-05, "vLLM v0.6.0: 2.7x Throughput Improvement and 5x
  Latency Reduction" (Llama 3 8B on 1 x H100, ShareGPT):
  https://blog.vllm.ai/2024/09/05/perf-update.html
- Lambda, "vLLM benchmark" (Llama 3.1 8B..405B on A100 and H100; H100 about 2x
  A100): https://github.com/LambdaLabsML/vllm-benchmark
- Microsoft Azure HPC blog, 2025-08-26, "Inference performance of Llama 3.1 8B
  using vLLM across various GPUs and CPUs":
  https://techcommunity.microsoft.com/blog/azurehighperformancecomputingblog/inference-performance-of-llama-3-1-8b-using-vllm-across-various-gpus-and-cpus/4448420
- NVIDIA datasheets (L4, A10, T4, L40S, A100, H100) for the scaling.

A missing entry means the model does not fit that GPU in BF16 (8B on a 16 GB
T4) or the class is not covered: plan then asks for a pilot run.
"""

from __future__ import annotations

import re

#: Model size class -> accelerator (as Ray names it) -> tokens/s per GPU.
TOKENS_PER_SECOND_PER_GPU: dict[str, dict[str, int]] = {
    "1B": {"T4": 4_000, "L4": 9_000, "A10G": 9_000, "L40S": 24_000, "A100": 35_000,
           "H100": 60_000},
    "3B": {"T4": 2_000, "L4": 5_000, "A10G": 5_000, "L40S": 14_000, "A100": 22_000,
           "H100": 40_000},
    "8B": {"L4": 2_000, "A10G": 2_000, "L40S": 6_000, "A100": 10_000, "H100": 20_000},
}

#: Upper bound (billions of parameters) of each size class.
SIZE_CLASSES: tuple[tuple[float, str], ...] = ((1.6, "1B"), (4.5, "3B"), (9.0, "8B"))

_SIZE = re.compile(r"(?<![A-Za-z0-9.])(\d+(?:\.\d+)?)([BbMm])(?![A-Za-z0-9])")


def parameters_from_name(model: str) -> float | None:
    """Billions of parameters as a model's name says them (``Llama-3.1-8B-Instruct``
    -> 8.0, ``Qwen2.5-0.5B`` -> 0.5, ``SmolLM-360M`` -> 0.36), or None."""
    name = model.rstrip("/").rsplit("/", 1)[-1]
    found = None
    for found in _SIZE.finditer(name.replace("_", "-")):
        pass
    if found is None:
        return None
    value = float(found.group(1))
    return value / 1000 if found.group(2) in "Mm" else value


def size_class(model: str) -> str | None:
    """``"1B"``, ``"3B"`` or ``"8B"`` for a model whose name gives its size, else None."""
    billions = parameters_from_name(model)
    if billions is None:
        return None
    return next((name for limit, name in SIZE_CLASSES if billions <= limit), None)


def tokens_per_second_per_gpu(model: str, accelerator: str | None) -> tuple[str, int] | None:
    """(size class, tokens/s per GPU) for ``model`` on ``accelerator``, or None."""
    size = size_class(model)
    if size is None or accelerator is None:
        return None
    figure = TOKENS_PER_SECOND_PER_GPU[size].get(accelerator.upper())
    return (size, figure) if figure else None
