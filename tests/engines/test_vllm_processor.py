"""The vLLM engine is Ray Data LLM's processor built from our spec. vLLM itself only
runs on GPU workers, so here we check what would be built, against a local model."""

from __future__ import annotations

from toolkit.engines.vllm_engine import build_vllm_processor
from toolkit.spec.catalog import load_job
from toolkit.run.pipeline import engine_sampling_params
from toolkit.spec.loading import load_job_spec


def test_text_industry_builds_the_seed_processor(local_ray, tiny_chat_model):
    job = load_job("text-industry")
    spec = load_job_spec(job, overrides={"engine.model": str(tiny_chat_model)})
    processor = build_vllm_processor(spec.engine)

    assert processor.list_stage_names() == [
        "ChatTemplateStage", "TokenizeStage", "vLLMEngineStage", "DetokenizeStage"
    ]
    stage = processor.get_stage_by_name("vLLMEngineStage")
    assert stage.fn_constructor_kwargs["model"] == str(tiny_chat_model)
    assert stage.fn_constructor_kwargs["engine_kwargs"]["max_model_len"] == 256
    assert stage.fn_constructor_kwargs["batch_size"] == 256
    assert stage.fn_constructor_kwargs["should_continue_on_error"] is True
    assert stage.map_batches_kwargs["accelerator_type"] == "L4"
    assert stage.map_batches_kwargs["num_gpus"] == 1
    assert stage.map_batches_kwargs["compute"].max_size == 4


def test_rows_ask_vllm_for_one_of_the_choices():
    job = load_job("text-industry")
    spec = load_job_spec(job)
    params = engine_sampling_params(spec.sampling, job.structured_output(job.options_of(spec)))
    assert params == {
        "temperature": 0.0,
        "max_tokens": 16,
        "top_p": 1.0,
        "structured_outputs": {"choice": spec.output.choice},
    }


def test_vlm_caption_adds_the_multimodal_stage(local_ray):
    from toolkit.samples.tiny_vision_model import tiny_vision_model_path

    job = load_job("vlm-caption")
    model = str(tiny_vision_model_path())
    spec = load_job_spec(job, overrides={"engine.model": model})
    processor = build_vllm_processor(spec.engine, multimodal=job.multimodal)

    assert processor.list_stage_names()[0] == "PrepareMultimodalStage"
    assert "vLLMEngineStage" in processor.list_stage_names()
    stage = processor.get_stage_by_name("vLLMEngineStage")
    assert stage.fn_constructor_kwargs["engine_kwargs"]["max_model_len"] == 8192
    assert stage.fn_constructor_kwargs["batch_size"] == 16


def test_date_reformat_processor_keeps_the_chunked_prefill_settings(local_ray, tiny_chat_model):
    job = load_job("date-reformat")
    spec = load_job_spec(job, overrides={"engine.model": str(tiny_chat_model)})
    stage = build_vllm_processor(spec.engine).get_stage_by_name("vLLMEngineStage")
    kwargs = stage.fn_constructor_kwargs["engine_kwargs"]
    assert (kwargs["enable_chunked_prefill"], kwargs["max_num_batched_tokens"]) == (True, 1024)
    assert kwargs["gpu_memory_utilization"] == 0.85
