"""The vLLM engine, through Ray Data LLM (``ray.data.llm``).

We only build the processor from the spec; Ray Data LLM owns the stages (chat
template, tokenize, vLLM, detokenize, and for images prepare-multimodal), the
actor pools and the GPU scheduling. vLLM itself is imported on the GPU workers,
so building (and testing) the processor needs neither vLLM nor a GPU.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from toolkit.engines.model_source import ModelLocation, model_location
from toolkit.engines.vllm.row_errors import toolkit_row_error
from toolkit.engines.vllm.settings import CPU_BACKEND_STAGE_CPUS, CPU_KV_CACHE_GIB, VllmSettings
from toolkit.spec.row_contract import (
    GENERATED_LOGPROB_COLUMN,
    RAY_LLM_ERROR_COLUMN,
    SAMPLING_PARAMS_COLUMN,
)

logger = logging.getLogger(__name__)

if TYPE_CHECKING:
    from ray.data import Dataset
    from ray.data.llm import Processor


def build_vllm_processor(
    engine: VllmSettings, multimodal: bool = False, model: ModelLocation | None = None
) -> "Processor":
    """A Ray Data LLM processor for ``engine``; apply it with ``processor(ds)``.

    Rows that fail in the engine come back with ``__inference_error__`` set
    (``should_continue_on_error``) rather than failing the job; the pipeline turns
    that into our ``error`` column. Rows that already failed in preprocess arrive
    with ``__inference_error__`` set and every stage passes them by.

    Our settings mean here what they mean for the transformers engine:

    - ``concurrency``: Ray Data LLM reads a plain ``n`` as an autoscaling pool of
      1 to n engine workers (``ProcessorConfig.get_concurrency``, called with
      ``autoscaling_enabled=True`` in ``vllm_engine_proc.py``), so a fixed pool is
      sent as ``(n, n)``. The CPU stages (chat template, tokenize, detokenize) keep
      Ray's default, autoscaling from 1 up to the engine's upper end.
    - ``num_cpus``: CPUs beside each GPU of a worker, through ``placement_group_config``
      (``bundle_per_worker``, replicated tensor x pipeline parallel times). With no
      accelerator vLLM runs its CPU backend and the bundle is those CPUs alone.
    """
    keep_triton_out_of_the_driver()
    from ray.data.llm import build_processor, vLLMEngineProcessorConfig

    from toolkit.engines.vllm.engine_stage import with_start_check

    for warning in engine.engine_warnings():
        logger.warning(warning)
    cpu_stage = cpu_stage_settings(engine)
    config = vLLMEngineProcessorConfig(
        **vllm_engine_settings(engine, model),
        # Off: the rows' `prompt` goes to the tokenizer as written (/v1/completions).
        chat_template_stage={
            **cpu_stage, "chat_template_kwargs": dict(engine.chat_template_kwargs) or None,
            "enabled": engine.apply_chat_template,
        },
        tokenize_stage=dict(cpu_stage),
        detokenize_stage=dict(cpu_stage),
        prepare_multimodal_stage={**cpu_stage, "enabled": multimodal},
    )
    return with_start_check(build_processor(config), max_restarts=engine.restarts)


def keep_triton_out_of_the_driver() -> None:
    """Let this process (the run's driver: it builds the processor, the workers run
    vLLM) import vLLM without Triton.

    Ray Data LLM's vLLM stage imports vLLM on the driver, and vLLM tries Triton's
    backends there. Where that import fails half-way (vLLM's CPU build beside a CUDA
    Triton: "Triton is installed, but `triton.backends` could not be imported"), the
    objects Triton's nanobind extension made stay alive, and at exit nanobind prints
    some 40 lines of ``nanobind: leaked N instances! ... triton._C.libtriton...``
    after the run's summary. vLLM runs without Triton when it finds none, and the
    driver runs no kernel; the workers import it as usual. A Triton imported already
    is left alone.
    """
    import sys

    sys.modules.setdefault("triton", None)  # find_spec and import see "not installed"


def vllm_engine_settings(
    engine: VllmSettings, model: ModelLocation | None = None
) -> dict[str, Any]:
    """``vLLMEngineProcessorConfig`` arguments for the engine stage itself, the same
    for every task (chat generation, embed, classify); the stages around it differ.
    ``model``: where ``engine.model`` loads from (preflight's; None: ``engine.model``
    itself, not a sample)."""
    low, high = engine.pool_size
    bundle: dict[str, float] = {"CPU": engine.num_cpus}
    engine_kwargs = dict(engine.engine_kwargs)
    model_source = model_location(model or engine.model).path()
    if engine.kv_cache_gib is not None or engine.runs_on_cpu:
        engine_kwargs["kv_cache_memory_bytes"] = int(
            (engine.kv_cache_gib or CPU_KV_CACHE_GIB) * 2**30)
    if engine.runs_on_cpu:
        engine_kwargs.update(cpu_backend_defaults(model_source, engine_kwargs))
    else:
        bundle["GPU"] = 1
    settings: dict[str, Any] = {
        # A sample model is built here on the driver: vLLM workers need a path they
        # can read, which only a shared filesystem or a local head gives them.
        "model_source": model_source,
        "engine_kwargs": engine_kwargs,
        "batch_size": engine.batch_size,
        "concurrency": (low, high),
        "accelerator_type": engine.accelerator_type,
        "placement_group_config": {"bundle_per_worker": bundle},
        "should_continue_on_error": True,
        "log_engine_metrics": engine.engine_metrics,
    }
    if engine.max_concurrent_batches is not None:
        settings["max_concurrent_batches"] = engine.max_concurrent_batches
    return settings


def cpu_backend_defaults(model_source: str, engine_kwargs: dict[str, Any]) -> dict[str, Any]:
    """vLLM arguments for its CPU backend that the user did not set themselves.

    - ``enforce_eager``: vLLM's CPU backend otherwise compiles the model with
      torch inductor before the first row (35 s for a 2-layer model here, minutes
      for a real one); on CPU that rarely pays back within a batch job.
    - ``dtype``: the checkpoint's own, as the transformers engine loads it. vLLM's
      ``auto`` turns float32 weights into bfloat16 on CPU, and the same job would
      give other greedy answers on the two engines.
    """
    defaults: dict[str, Any] = {}
    if "enforce_eager" not in engine_kwargs:
        defaults["enforce_eager"] = True
    if engine_kwargs.get("dtype", "auto") == "auto":
        dtype = checkpoint_dtype(model_source)
        if dtype is not None:
            defaults["dtype"] = dtype
    return defaults


def checkpoint_dtype(model_source: str) -> str | None:
    """``float32``, ``bfloat16``... as the checkpoint's config.json names it (a local
    directory only; None when it says nothing or isn't on this machine)."""
    import json
    from pathlib import Path

    config = Path(model_source) / "config.json"
    try:
        values = json.loads(config.read_text())
    except (OSError, ValueError):
        return None
    dtype = values.get("dtype") or values.get("torch_dtype")
    return dtype if isinstance(dtype, str) else None


def cpu_stage_settings(engine: VllmSettings) -> dict[str, Any]:
    """Ray Data LLM's CPU stages: autoscaling from 1 to the engine's upper end; a
    fraction of a CPU each when the engine itself runs on CPUs."""
    settings: dict[str, Any] = {"concurrency": (1, engine.pool_size[1])}
    if engine.runs_on_cpu:
        settings["num_cpus"] = CPU_BACKEND_STAGE_CPUS
    return settings


def apply_vllm_engine(
    ds: "Dataset",
    engine: VllmSettings,
    multimodal: bool = False,
    model: ModelLocation | None = None,
) -> "Dataset":
    """Chat generation through the processor, with each choice answer's log-probability
    (``generated_logprob``: the job's ``<column>_confidence``)."""
    ds = ds.map(ask_for_choice_logprobs)
    ds = build_vllm_processor(engine, multimodal=multimodal, model=model)(ds)
    return ds.map(finish_vllm_row)


def finish_vllm_row(row: dict[str, Any]) -> dict[str, Any]:
    """A row as vLLM left it, in the toolkit's terms: its answer's log-probability
    (:func:`sum_answer_logprobs`), its error in the words every engine uses."""
    row = sum_answer_logprobs(row)
    if row.get(RAY_LLM_ERROR_COLUMN):
        row[RAY_LLM_ERROR_COLUMN] = toolkit_row_error(row[RAY_LLM_ERROR_COLUMN])
    return row


def ask_for_choice_logprobs(row: dict[str, Any]) -> dict[str, Any]:
    """A row whose answer is one of a list also asks vLLM for its tokens' log-probabilities
    (``logprobs: 0``: the sampled token's alone). vLLM computes them from the logits the
    structured-output mask has already cut to the choices, as the transformers engine does."""
    params = row.get(SAMPLING_PARAMS_COLUMN)
    constraint = params.get("structured_outputs") if isinstance(params, dict) else None
    if isinstance(constraint, dict) and constraint.get("choice") is not None:
        row[SAMPLING_PARAMS_COLUMN] = {**params, "logprobs": 0}
    return row


def sum_answer_logprobs(row: dict[str, Any]) -> dict[str, Any]:
    """``generated_logprob``: the summed log-probabilities of the generated tokens, from
    the ``logprobs`` Ray Data LLM passes on (one ``{token id: {"logprob": ...}}`` per
    token); None where vLLM sent none. The bulky per-token column is dropped here."""
    per_token = row.pop("logprobs", None)
    tokens = row.get("generated_tokens")
    total = None
    if per_token is not None and tokens is not None and len(per_token) == len(tokens):
        try:
            total = float(sum(float(entry[int(token)]["logprob"])
                              for entry, token in zip(per_token, tokens)))
        except (KeyError, TypeError, ValueError):
            total = None
    row[GENERATED_LOGPROB_COLUMN] = total
    return row
