"""What the engines accept, checked while a spec loads instead of after a model has loaded.

- ``engine_kwargs``: the transformers engines read :data:`TRANSFORMERS_ENGINE_KWARGS`;
  vLLM takes its engine arguments (:data:`VLLM_ENGINE_ARGS`). On kind transformers a
  vLLM argument is accepted and not used (with a note, unless it only tunes vLLM's
  memory or scheduling: :data:`VLLM_TUNING_KWARGS`), so one job file serves both
  engines; a key neither engine knows is refused by name.
- structured-output regexes: both engines compile them with xgrammar (vLLM's
  default backend), which has no lookaround, backreferences, word boundaries,
  conditional, atomic or named groups, possessive quantifiers or inline flags.
  Python's ``re`` accepts all of these, so without :func:`regex_problem` a job
  would load, start its workers, and fail every row.

Example:
    >>> unknown_transformers_kwargs({"max_model_len": 512, "max_num_seqs": 8, "max_len": 1})
    ['max_len']
    >>> regex_problem("[0-9]+(?>px)")
    'an atomic group (?>...) is not supported by structured outputs (xgrammar)'
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

#: What the transformers engines (chat, vision, classify, embed, image-classify) read.
TRANSFORMERS_ENGINE_KWARGS: tuple[str, ...] = ("max_model_len", "dtype", "enable_prefix_caching")

#: vLLM settings that only tune its memory and scheduling: never an answer. The
#: transformers engine has nothing to tune with them, so they pass without a note
#: (``toolkit.run.run_directory.RESULT_NEUTRAL_ENGINE_KWARGS`` is the same idea).
VLLM_TUNING_KWARGS: tuple[str, ...] = (
    "gpu_memory_utilization", "enable_chunked_prefill", "max_num_batched_tokens",
    "max_num_seqs", "swap_space", "disable_log_stats", "block_size", "kv_cache_memory_bytes",
    "enforce_eager", "max_num_partial_prefills", "long_prefill_token_threshold",
    "num_gpu_blocks_override", "cpu_offload_gb", "max_seq_len_to_capture",
    "max_cudagraph_capture_size", "cudagraph_capture_sizes", "compilation_config",
    "disable_custom_all_reduce", "distributed_executor_backend", "max_parallel_loading_workers",
    "use_tqdm_on_load", "scheduling_policy", "async_scheduling", "stream_interval",
    "tensor_parallel_size", "pipeline_parallel_size", "data_parallel_size",
    "enable_expert_parallel", "max_num_scheduled_tokens", "max_num_queued_reqs",
    "max_num_queued_tokens", "prefix_caching_hash_algo", "disable_cascade_attn",
)

#: vLLM's engine arguments (the fields of ``vllm.engine.arg_utils.EngineArgs``, vLLM
#: 0.29, plus a few older names still in use), for telling a vLLM setting from a typo.
VLLM_ENGINE_ARGS: frozenset[str] = frozenset("""
model enable_return_routed_experts return_sampling_mask model_weights served_model_name
tokenizer hf_config_path runner convert task skip_tokenizer_init enable_prompt_embeds
tokenizer_mode trust_remote_code allowed_local_media_path allowed_media_domains download_dir
safetensors_load_strategy safetensors_prefetch_num_threads safetensors_prefetch_block_size
load_format config_format dtype kv_cache_dtype seed max_model_len cudagraph_capture_sizes
max_cudagraph_capture_size ir_op_priority distributed_executor_backend pipeline_parallel_size
master_addr master_port nnodes node_rank distributed_timeout_seconds
cpu_distributed_timeout_seconds numa_bind numa_bind_nodes numa_bind_cpus device_ids
tensor_parallel_size prefill_context_parallel_size decode_context_parallel_size
dcp_comm_backend dcp_q_replicate dcp_kv_cache_interleave_size cp_kv_cache_interleave_size
data_parallel_size data_parallel_rank data_parallel_start_rank data_parallel_size_local
data_parallel_address data_parallel_rpc_port data_parallel_hybrid_lb data_parallel_external_lb
data_parallel_multi_port_external_lb data_parallel_backend enable_expert_parallel
enable_batch_sharded_sampling enable_ep_weight_filter moe_backend linear_backend
all2all_backend enable_elastic_ep enable_dbo ubatch_size dbo_decode_token_threshold
dbo_prefill_token_threshold disable_nccl_for_dp_synchronization eplb_config enable_eplb
expert_placement_strategy max_parallel_loading_workers block_size enable_prefix_caching
prefix_caching_hash_algo prefix_cache_retention_interval disable_sliding_window
disable_cascade_attn offload_backend cpu_offload_gb cpu_offload_params offload_group_size
offload_num_in_group offload_prefetch_step offload_params gpu_memory_utilization
kv_cache_memory_bytes max_num_batched_tokens max_num_scheduled_tokens
long_prefill_token_threshold max_num_seqs max_num_queued_reqs max_num_queued_tokens
max_logprobs logprobs_mode use_fp64_gumbel enable_trace_replay disable_log_stats
aggregate_engine_logging revision code_revision hf_token hf_overrides model_class_overrides
tokenizer_revision quantization quantization_config allow_deprecated_quantization
enforce_eager disable_custom_all_reduce language_model_only limit_mm_per_prompt
enable_mm_embeds interleave_mm_strings media_io_kwargs mm_processor_kwargs
mm_processor_cache_gb mm_processor_cache_type mm_hasher_algorithm
mm_shm_cache_max_object_size_mb mm_encoder_only mm_encoder_tp_mode mm_encoder_attn_backend
mm_encoder_attn_dtype mm_encoder_fp8_scale_path mm_encoder_fp8_scale_save_path
mm_encoder_fp8_scale_save_margin io_processor_plugin renderer_num_workers skip_mm_profiling
video_pruning_rate video_pruning_method mm_tensor_ipc mm_processor_device
mm_ipc_gpu_memory_gb mm_device_do_normalize enable_lora max_loras max_lora_rank
default_mm_loras fully_sharded_loras max_cpu_loras lora_dtype lora_target_modules
enable_tower_connector_lora specialize_active_lora enable_mixed_moe_lora_format
enable_moe_shared_loras ray_workers_use_nsight num_gpu_blocks_override
model_loader_extra_config ignore_patterns enable_chunked_prefill disable_chunked_mm_input
scheduler_reserve_full_isl prefill_schedule_interval watermark
disable_hybrid_kv_cache_manager structured_outputs_config reasoning_parser
reasoning_parser_plugin speculative_config spec_method spec_model spec_tokens
diffusion_config show_hidden_metrics_for_version otlp_traces_endpoint collect_detailed_traces
per_request_spec_decode_metrics kv_cache_metrics kv_cache_metrics_sample cudagraph_metrics
enable_layerwise_nvtx_tracing enable_mfu_metrics enable_logging_iteration_details
jit_monitor_mode jit_monitor_verbose enable_mm_processor_stats scheduling_policy
scheduler_cls pooler_config compilation_config attention_config mamba_config kernel_config
enable_flashinfer_autotune enable_bf16x3_router_gemm worker_cls worker_extension_cls
profiler_config kv_transfer_config kv_events_config ec_transfer_config ec_manager_config
reasoning_config generation_config enable_sleep_mode enable_cumem_allocator
override_generation_config model_impl attention_backend kv_cache_dtype_skip_layers
mamba_cache_dtype mamba_ssm_cache_dtype mamba_block_size prefix_match_unit mamba_cache_mode
replayssm_buffer_len use_replayssm mamba_backend mamba_ssu_algorithm
enable_mamba_cache_stochastic_rounding mamba_cache_philox_rounds additional_config
use_tqdm_on_load pt_load_map_location logits_processors async_scheduling stream_interval
kv_sharing_fast_prefill optimization_level performance_mode fault_tolerance_config
enable_fault_tolerance kv_offloading_size kv_offloading_backend tokens_only shutdown_timeout
weight_transfer_config fail_on_environ_validation gdn_prefill_backend kda_prefill_backend
swap_space max_seq_len_to_capture max_num_partial_prefills guided_decoding_backend
disable_log_requests rope_scaling rope_theta task_type
""".split())


def unknown_transformers_kwargs(kwargs: Mapping[str, Any]) -> list[str]:
    """Keys of ``engine_kwargs`` that neither the transformers engine nor vLLM knows."""
    return sorted(k for k in kwargs if k not in TRANSFORMERS_ENGINE_KWARGS
                  and k not in VLLM_ENGINE_ARGS)


def unused_vllm_kwargs(kwargs: Mapping[str, Any]) -> list[str]:
    """vLLM arguments the transformers engine won't use, leaving out mere tuning."""
    return sorted(k for k in kwargs if k in VLLM_ENGINE_ARGS
                  and k not in TRANSFORMERS_ENGINE_KWARGS and k not in VLLM_TUNING_KWARGS)


# -- structured-output regexes ----------------------------------------------------------

_REGEX_OPS = {
    "ASSERT": "lookahead (?=...)",
    "ASSERT_NOT": "negative lookahead (?!...)",
    "GROUPREF": "a backreference (\\1, (?P=name))",
    "GROUPREF_EXISTS": "a conditional group (?(1)...|...)",
    "ATOMIC_GROUP": "an atomic group (?>...)",
    "POSSESSIVE_REPEAT": "a possessive quantifier (a++, a*+, a?+)",
}
_REGEX_AT = {"AT_BOUNDARY": "a word boundary \\b", "AT_NON_BOUNDARY": "a non-boundary \\B"}
_REGEX_FIX = {
    "ASSERT": "match the text itself instead",
    "GROUPREF": "repeat the group's pattern instead",
    "named": "use a plain group (...)",
    "flags": "spell both cases out, e.g. [Yy]es",
}


def _parsed(pattern: str) -> Any:
    try:
        from re import _parser as parser  # type: ignore[attr-defined]  # Python 3.11+
    except ImportError:  # pragma: no cover - Python 3.10
        import sre_parse as parser  # type: ignore[no-redef]
    return parser.parse(pattern)


def _ops(sub: Any, kind: type) -> Iterator[tuple[str, Any]]:
    for op, av in sub:
        yield getattr(op, "name", str(op)), av
        stack = [av]
        while stack:
            item = stack.pop()
            if isinstance(item, kind):
                yield from _ops(item, kind)
            elif isinstance(item, (list, tuple)):
                stack.extend(item)


def regex_problem(pattern: str) -> str | None:
    """Why structured outputs can't use ``pattern`` (one that ``re`` compiles), or None."""
    try:
        parsed = _parsed(pattern)
    except Exception:  # noqa: BLE001 - re.compile reports a broken pattern itself
        return None
    if parsed.state.groupdict:
        name = next(iter(parsed.state.groupdict))
        return (f"the named group (?P<{name}>...) is not supported by structured outputs "
                f"(xgrammar); {_REGEX_FIX['named']}")
    import re

    if parsed.state.flags & ~(re.UNICODE | re.U):
        return ("inline flags such as (?i) are not supported by structured outputs "
                f"(xgrammar); {_REGEX_FIX['flags']}")
    for name, av in _ops(parsed, type(parsed)):
        if name in _REGEX_OPS:
            what = _REGEX_OPS[name]
            if name.startswith("ASSERT") and isinstance(av, tuple) and av and av[0] == -1:
                what = what.replace("ahead (?", "behind (?<")
            fix = _REGEX_FIX.get(name.removesuffix("_NOT"), "")
            return (f"{what} is not supported by structured outputs (xgrammar)"
                    + (f"; {fix}" if fix else ""))
        if name == "AT" and getattr(av, "name", str(av)) in _REGEX_AT:
            return (f"{_REGEX_AT[getattr(av, 'name', str(av))]} is not supported by structured "
                    "outputs (xgrammar)")
        if name == "SUBPATTERN" and isinstance(av, tuple) and len(av) == 4 and (av[1] or av[2]):
            return ("inline flags such as (?i:...) are not supported by structured outputs "
                    f"(xgrammar); {_REGEX_FIX['flags']}")
    return None
