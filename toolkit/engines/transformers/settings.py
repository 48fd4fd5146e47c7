"""engine.kind transformers's settings, checked as the spec loads.

Its ``engine_kwargs``: it reads :data:`TRANSFORMERS_ENGINE_KWARGS`; a vLLM engine
argument is accepted and not used (with a note, unless it only tunes vLLM's memory or
scheduling), so one job file serves both engines; a key neither engine knows is
refused by name.

Example:
    >>> unknown_transformers_kwargs({"max_model_len": 512, "max_num_seqs": 8, "max_len": 1})
    ['max_len']
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pydantic import model_validator

from toolkit.engines.vllm.engine_args import VLLM_ENGINE_ARGS, VLLM_TUNING_KWARGS
from toolkit.spec.engine_settings import (
    EngineSettings,
    apply_chat_template_field,
    chat_template_kwargs_field,
    max_restarts_field,
    restarts,
)


#: What the transformers engines (chat, vision, classify, embed, image-classify) read.
TRANSFORMERS_ENGINE_KWARGS: tuple[str, ...] = ("max_model_len", "dtype", "enable_prefix_caching")

def unknown_transformers_kwargs(kwargs: Mapping[str, Any]) -> list[str]:
    """Keys of ``engine_kwargs`` that neither the transformers engine nor vLLM knows."""
    return sorted(k for k in kwargs if k not in TRANSFORMERS_ENGINE_KWARGS
                  and k not in VLLM_ENGINE_ARGS)


def unused_vllm_kwargs(kwargs: Mapping[str, Any]) -> list[str]:
    """vLLM arguments the transformers engine won't use, leaving out mere tuning."""
    return sorted(k for k in kwargs if k in VLLM_ENGINE_ARGS
                  and k not in TRANSFORMERS_ENGINE_KWARGS and k not in VLLM_TUNING_KWARGS)


class TransformersSettings(EngineSettings):
    max_restarts: int | None = max_restarts_field("model process")
    chat_template_kwargs: dict[str, Any] = chat_template_kwargs_field()
    apply_chat_template: bool = apply_chat_template_field()

    @property
    def restarts(self) -> int:
        """``max_restarts``, or its default when unset."""
        return restarts(self.max_restarts)

    @model_validator(mode="after")
    def _what_it_can_honour(self) -> "TransformersSettings":
        parallel = int(self.engine_kwargs.get("tensor_parallel_size", 1)) * int(
            self.engine_kwargs.get("pipeline_parallel_size", 1))
        if self.accelerator_type is not None and parallel > 1:
            raise ValueError(
                "the transformers engine can't honour engine_kwargs.tensor_parallel_size / "
                "pipeline_parallel_size (a transformers worker uses one GPU); remove it or "
                "use kind: vllm"
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

    def engine_warnings(self) -> list[str]:
        unused = unused_vllm_kwargs(self.engine_kwargs)
        if not unused:
            return []
        return [
            f"engine.engine_kwargs {', '.join(unused)}: vLLM "
            f"setting{'s' if len(unused) > 1 else ''} the transformers engine doesn't use "
            f"(it reads {', '.join(TRANSFORMERS_ENGINE_KWARGS)}); "
            f"{'they apply' if len(unused) > 1 else 'it applies'} with kind: vllm."
        ]
