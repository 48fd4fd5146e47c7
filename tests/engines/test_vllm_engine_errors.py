"""vLLM's errors in the toolkit's words: an engine that could not start (read from what
its process printed), a prompt longer than the model takes. The runs themselves are in
tests/on_vllm (test_vllm_faults.py, test_vllm_generate.py)."""

from __future__ import annotations

import pickle

import pydantic
import pytest

from toolkit.engines.vllm.row_errors import toolkit_row_error
from toolkit.engines.vllm.start_failure import (
    engine_start_error,
    engine_start_reason,
    exception_reason,
)
from toolkit.errors import EngineStartError

#: What a vLLM engine actor printed when its KV cache could not hold one request
#: (vLLM 0.29 on CPU; the EngineCore child's lines, then the actor's own).
KV_CACHE_TOO_SMALL = """\
(EngineCore pid=8285) INFO 11-26 14:30:48 [cpu_worker.py:255] Explicitly set (0.0/23.54) GiB for KV cache on node 0.
(EngineCore pid=8285) ERROR 11-26 14:30:48 [core.py:1374] EngineCore failed to start.
(EngineCore pid=8285) ERROR 11-26 14:30:48 [core.py:1374] Traceback (most recent call last):
(EngineCore pid=8285) ERROR 11-26 14:30:48 [core.py:1374]     raise ValueError(
(EngineCore pid=8285) ERROR 11-26 14:30:48 [core.py:1374] ValueError: To serve at least one request with the model's max seq len (256), (0.0 GiB KV cache is needed, which is larger than the available KV cache memory (0.0 GiB). Try increasing `gpu_memory_utilization` or decreasing `max_model_len` when initializing the engine.
Traceback (most recent call last):
RuntimeError: Engine core initialization failed. See root cause above. Failed core proc(s): {}
"""


def test_vllms_own_reason_is_read_from_what_its_engine_printed():
    assert engine_start_reason(KV_CACHE_TOO_SMALL) == (
        "ValueError: To serve at least one request with the model's max seq len (256), (0.0 "
        "GiB KV cache is needed, which is larger than the available KV cache memory (0.0 "
        "GiB). Try increasing `gpu_memory_utilization` or decreasing `max_model_len` when "
        "initializing the engine.")
    assert engine_start_reason("RuntimeError: Engine core initialization failed. See root "
                               "cause above.") is None


def test_a_kv_cache_too_small_names_the_settings_that_change_it():
    reason = engine_start_reason(KV_CACHE_TOO_SMALL)
    error = engine_start_error(reason, {"kv_cache_memory_bytes": 214748, "max_model_len": 256})
    assert error.exit_code == 9
    assert str(error).startswith("The vLLM engine could not start: ValueError: To serve")
    assert ("raise engine.kv_cache_gib (now 0.0002 GiB) or lower "
            "engine.engine_kwargs.max_model_len (now 256)") in error.hint
    # Raised on a Ray worker, it reaches the driver whole.
    copy = pickle.loads(pickle.dumps(error))
    assert isinstance(copy, EngineStartError) and copy.format_message() == error.format_message()


def test_a_kv_cache_larger_than_the_machines_memory_says_to_lower_it():
    reason = ("ValueError: Available memory on node 0 (20.1/23.54 GiB) on kv cache allocation "
              "is less than requested memory for kv (500.0 GiB). Decrease "
              "--kv-cache-memory-bytes, VLLM_CPU_KVCACHE_SPACE, or reduce CPU memory used by "
              "other processes.")
    error = engine_start_error(reason, {"kv_cache_memory_bytes": 500 * 2**30})
    assert error.hint.startswith("Lower engine.kv_cache_gib (now 500 GiB) to what the machine")


def test_an_engine_killed_while_it_started_says_so():
    reason = ("RuntimeError: Engine core initialization failed. See root cause above. Failed "
              "core proc(s): {'EngineCore': -9}")
    assert engine_start_reason(reason) is None  # nothing better: the wrapper is the reason
    error = engine_start_error(reason, {})
    assert error.hint.startswith("vLLM's engine process was killed (signal 9) while it started")


def test_an_engine_that_ended_while_it_started_without_a_reason_is_not_blamed_on_settings():
    # As when the engine process is killed before vLLM starts watching it.
    error = engine_start_error("RuntimeError: Engine core initialization failed. See root "
                               "cause above. Failed core proc(s): {}", {})
    assert error.hint.startswith("vLLM's engine process ended while it started without "
                                 "saying why")
    assert "engine_kwargs" not in error.hint


class ModelConfig(pydantic.BaseModel):
    """As vLLM checks a checkpoint's architecture, in the engine actor itself."""

    architectures: list[str]

    @pydantic.model_validator(mode="after")
    def _supported(self) -> "ModelConfig":
        raise ValueError(f"Model architectures {self.architectures} are not supported for now. "
                         f"Supported architectures: dict_keys({['LlamaForCausalLM'] * 400})")


def test_a_model_vllm_has_no_implementation_of_is_named_in_one_line():
    with pytest.raises(pydantic.ValidationError) as refused:
        ModelConfig(architectures=["MadeUpForCausalLM"])
    reason = exception_reason(refused.value)
    assert reason == ("ValidationError: Model architectures ['MadeUpForCausalLM'] are not "
                      "supported for now.")
    error = engine_start_error(reason, {})
    assert error.hint.startswith("vLLM has no implementation of 'MadeUpForCausalLM' (the "
                                 "architectures in the checkpoint's config.json)")
    assert "--engine transformers" in error.hint
    long = exception_reason(RuntimeError("x" * 5000))
    assert len(long) == 700 and long.endswith("...")


def test_another_failed_start_points_at_vllms_arguments():
    error = engine_start_error("OSError: model.safetensors is not a safetensors file", {})
    assert "engine.engine_kwargs are vLLM's engine arguments" in error.hint


def test_vllm_refusing_a_long_prompt_reads_as_the_transformers_engine_says_it():
    assert toolkit_row_error(
        "VLLMValidationError: The decoder prompt (length 1093) is longer than the maximum "
        "model length of 256. Make sure that `max_model_len` is no smaller than the number "
        "of text tokens.") == "prompt is 1093 tokens, longer than max_model_len 256"
    assert toolkit_row_error(
        "VLLMValidationError: This model's maximum context length is 512 tokens. However, "
        "you requested 0 output tokens and your prompt contains at least 513 input tokens, "
        "for a total of at least 513 tokens.") == (
        "prompt is at least 513 tokens, longer than max_model_len 512")
    within = ("This model's maximum context length is 256 tokens. However, you requested 16 "
              "output tokens and your prompt contains 250 input tokens, for a total of 266.")
    assert toolkit_row_error(within) == within  # its max_tokens is what doesn't fit
