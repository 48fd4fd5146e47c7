"""The vLLM engine is Ray Data LLM's processor built from our spec. vLLM itself only
runs on GPU workers, so here we check what would be built, against a local model."""

from __future__ import annotations

from toolkit.engines.vllm.chat_stage import build_vllm_processor
from toolkit.run.row_steps import engine_sampling_params
from toolkit.spec.jobs.catalog import load_job
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
    # Ray Data would restart an engine worker without end; a worker that keeps dying stops.
    assert stage.map_batches_kwargs["max_restarts"] == 3
    endless = load_job_spec(job, overrides={"engine.model": str(tiny_chat_model),
                                            "engine.max_restarts": -1})
    stage = build_vllm_processor(endless.engine).get_stage_by_name("vLLMEngineStage")
    assert stage.map_batches_kwargs["max_restarts"] == -1
    # Prompts as written (/v1/completions): no chat template stage; the rows' prompt
    # goes to the tokenizer.
    raw = load_job_spec(job, overrides={"engine.model": str(tiny_chat_model),
                                        "engine.apply_chat_template": False})
    assert build_vllm_processor(raw.engine).list_stage_names() == [
        "TokenizeStage", "vLLMEngineStage", "DetokenizeStage"]


def test_vllm_engine_metrics_are_exported_unless_switched_off(local_ray, tiny_chat_model):
    job = load_job("text-industry")
    spec = load_job_spec(job, overrides={"engine.model": str(tiny_chat_model)})
    stage = build_vllm_processor(spec.engine).get_stage_by_name("vLLMEngineStage")
    assert stage.fn_constructor_kwargs["log_engine_metrics"] is True
    quiet = load_job_spec(job, overrides={"engine.model": str(tiny_chat_model),
                                          "engine.engine_metrics": False})
    stage = build_vllm_processor(quiet.engine).get_stage_by_name("vLLMEngineStage")
    assert stage.fn_constructor_kwargs["log_engine_metrics"] is False
    # On by default: a spec that doesn't say keeps the fingerprint it had.
    assert "engine_metrics" not in spec.engine.model_dump()


def test_rows_ask_vllm_for_one_of_the_choices():
    job = load_job("text-industry")
    spec = load_job_spec(job)
    constraint = job.main_stage.structured_output(job.options_of(spec))
    params = engine_sampling_params(spec.sampling, constraint)
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
    processor = build_vllm_processor(spec.engine, multimodal=job.main_stage.multimodal)

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


def test_settings_mean_the_same_on_vllm(local_ray, tiny_chat_model):
    """A plain concurrency is a fixed pool of engine workers (Ray Data LLM alone would
    autoscale 1..n); num_cpus, max_concurrent_batches and chat_template_kwargs reach
    the stages that use them."""
    job = load_job("text-industry")
    spec = load_job_spec(job, overrides={
        "engine.model": str(tiny_chat_model), "engine.num_cpus": 3,
        "engine.max_concurrent_batches": 2,
        "engine.chat_template_kwargs": {"enable_thinking": False},
    })
    processor = build_vllm_processor(spec.engine)
    engine_stage = processor.get_stage_by_name("vLLMEngineStage")
    pool = engine_stage.map_batches_kwargs["compute"]
    assert (pool.min_size, pool.max_size) == (4, 4)
    assert engine_stage.map_batches_kwargs["num_cpus"] == 3
    assert engine_stage.map_batches_kwargs["num_gpus"] == 1
    assert engine_stage.map_batches_kwargs["max_concurrency"] == 2
    assert engine_stage.fn_constructor_kwargs["max_concurrent_batches"] == 2
    chat_stage = processor.get_stage_by_name("ChatTemplateStage")
    assert chat_stage.fn_constructor_kwargs["chat_template_kwargs"] == {"enable_thinking": False}
    cpu_pool = chat_stage.map_batches_kwargs["compute"]
    assert (cpu_pool.min_size, cpu_pool.max_size) == (1, 4)

    ranged = load_job_spec(job, overrides={"engine.model": str(tiny_chat_model),
                                           "engine.concurrency": "2-6"})
    pool = build_vllm_processor(ranged.engine).get_stage_by_name(
        "vLLMEngineStage").map_batches_kwargs["compute"]
    assert (pool.min_size, pool.max_size) == (2, 6)


def test_ray_data_llm_stages_template_good_rows_and_pass_error_rows_by(local_ray, tiny_chat_model):
    """Ray Data LLM's own chat-template and tokenize stages, on real Ray, on the rows
    our prepare step makes: what would reach vLLM, and error rows left alone."""
    import ray
    from ray.llm._internal.batch.processor.base import Processor
    from transformers import AutoTokenizer

    from toolkit.run.row_steps import prepare_row

    job = load_job("text-industry")
    spec = load_job_spec(job, overrides={"engine.model": str(tiny_chat_model)})
    options = job.options_of(spec)
    params = engine_sampling_params(spec.sampling, job.main_stage.structured_output(options))
    built = build_vllm_processor(spec.engine)
    # The processor as built, less the vLLM engine stage (vLLM runs on GPU workers only)
    # and detokenize (which reads the engine's output).
    before_engine = Processor(built.config, [
        built.get_stage_by_name("ChatTemplateStage"), built.get_stage_by_name("TokenizeStage")
    ])
    inputs = [{"Index": "1", "Company": "Acme"}, {"Index": "2", "Company": ""},
              {"Index": "3", "Company": "Globex"}]
    rows = [prepare_row(row, job.main_stage.preprocess, options, params) for row in inputs]
    out = sorted(before_engine(ray.data.from_items(rows)).take_all(), key=lambda r: r["Index"])

    tokenizer = AutoTokenizer.from_pretrained(str(tiny_chat_model))
    acme, blank, globex = out
    for row, prepared in ((acme, rows[0]), (globex, rows[2])):
        expected = tokenizer.apply_chat_template(
            prepared["messages"], add_generation_prompt=True, tokenize=False)
        assert row["prompt"] == expected
        assert list(row["tokenized_prompt"]) == tokenizer(expected)["input_ids"]
        assert row["sampling_params"]["structured_outputs"] == {"choice": spec.output.choice}
        assert row["sampling_params"]["max_tokens"] == 16
        assert row["__inference_error__"] == "" and row["error"] is None
    assert blank["__inference_error__"] == blank["error"] == "preprocess: column 'Company' is empty"
    assert blank.get("prompt") is None and blank.get("tokenized_prompt") is None


def rows_before_the_engine(processor, stage_names, rows):
    """Run the named stages of a built processor on ``rows`` with real Ray."""
    import ray
    from ray.llm._internal.batch.processor.base import Processor

    stages = [processor.get_stage_by_name(name) for name in stage_names]
    return Processor(processor.config, stages)(ray.data.from_items(rows)).take_all()


def test_date_reformat_rows_ask_vllm_for_the_date_pattern(local_ray, tiny_chat_model):
    from toolkit.run.row_steps import prepare_row

    job = load_job("date-reformat")
    spec = load_job_spec(job, overrides={"engine.model": str(tiny_chat_model)})
    options = job.options_of(spec)
    stage = job.main_stage
    params = engine_sampling_params(spec.sampling, stage.structured_output(options))
    row = prepare_row({"Index": "7", "Subscription Date": "2021-03-04"}, stage.preprocess,
                      options, params)
    (out,) = rows_before_the_engine(
        build_vllm_processor(spec.engine), ["ChatTemplateStage", "TokenizeStage"], [row])

    assert "2021-03-04" in out["prompt"] and len(out["tokenized_prompt"]) > 0
    assert out["sampling_params"]["structured_outputs"] == stage.structured_output(options)
    assert out["sampling_params"]["temperature"] == spec.sampling.temperature


def test_vlm_caption_rows_carry_their_image_to_vllm(local_ray, tmp_path):
    """The rows vlm-caption hands to Ray Data LLM, after a trip through Ray's blocks:
    chat messages with the resized image as an OpenAI ``image_url`` data URL, the form
    vLLM's multimodal stage (the processor's first) parses. That stage imports vLLM
    and the chat template runs on its output, so neither runs here."""
    import ray

    import base64
    import io

    from PIL import Image

    from toolkit.run.row_steps import prepare_row
    from toolkit.samples.image_files import write_sample_images
    from toolkit.samples.tiny_vision_model import tiny_vision_model_path

    job = load_job("vlm-caption")
    model = str(tiny_vision_model_path())
    spec = load_job_spec(job, overrides={"engine.model": model})
    options = job.options_of(spec)
    params = engine_sampling_params(spec.sampling, job.main_stage.structured_output(options))
    (picture,) = write_sample_images(tmp_path, count=1)
    row = prepare_row({"id": "img-0", options.image_column: picture.read_bytes()},
                      job.main_stage.preprocess, options, params)
    processor = build_vllm_processor(spec.engine, multimodal=job.main_stage.multimodal)
    assert processor.list_stage_names()[:2] == ["PrepareMultimodalStage", "ChatTemplateStage"]
    (out,) = ray.data.from_items([row]).take_all()

    parts = [part for message in out["messages"] if not isinstance(message["content"], str)
             for part in message["content"]]
    (image_part,) = [part for part in parts if part["type"] == "image_url"]
    header, data = image_part["image_url"]["url"].split(",", 1)
    assert header.startswith("data:image/")
    assert Image.open(io.BytesIO(base64.b64decode(data))).size == tuple(options.image_size)
    assert any(part["type"] == "text" and part["text"] == options.prompt for part in parts)
    assert out["__inference_error__"] == "" and out["error"] is None


def test_without_an_accelerator_vllm_runs_its_cpu_backend(local_ray, tiny_chat_model):
    """--accelerator none: the engine worker holds CPUs only, vLLM gets a bounded KV
    cache in RAM, no compile step and the checkpoint's dtype; the CPU stages beside
    it ask for a fraction of a CPU, so a 2-core machine runs the whole processor."""
    job = load_job("text-industry")
    spec = load_job_spec(job, overrides={"engine.model": str(tiny_chat_model),
                                         "engine.accelerator_type": "none",
                                         "engine.num_cpus": 2})
    processor = build_vllm_processor(spec.engine)
    engine_stage = processor.get_stage_by_name("vLLMEngineStage")
    assert engine_stage.map_batches_kwargs["num_cpus"] == 2
    assert "num_gpus" not in engine_stage.map_batches_kwargs
    assert engine_stage.map_batches_kwargs.get("accelerator_type") is None
    engine_kwargs = engine_stage.fn_constructor_kwargs["engine_kwargs"]
    assert engine_kwargs["kv_cache_memory_bytes"] == 2**30
    assert engine_kwargs["enforce_eager"] is True
    assert engine_kwargs["dtype"] == "float32"  # as the checkpoint is, and transformers loads it
    for name in ("ChatTemplateStage", "TokenizeStage", "DetokenizeStage"):
        assert processor.get_stage_by_name(name).map_batches_kwargs["num_cpus"] == 0.25


def test_cpu_backend_settings_are_the_users_to_change(local_ray, tiny_chat_model):
    job = load_job("text-industry")
    spec = load_job_spec(job, overrides={
        "engine.model": str(tiny_chat_model), "engine.accelerator_type": "none",
        "engine.kv_cache_gib": 3, "engine.engine_kwargs.enforce_eager": False,
        "engine.engine_kwargs.dtype": "bfloat16"})
    engine_kwargs = build_vllm_processor(spec.engine).get_stage_by_name(
        "vLLMEngineStage").fn_constructor_kwargs["engine_kwargs"]
    assert engine_kwargs["kv_cache_memory_bytes"] == 3 * 2**30
    assert (engine_kwargs["enforce_eager"], engine_kwargs["dtype"]) == (False, "bfloat16")


def test_a_local_run_shrinks_cpu_pools_this_machine_cannot_hold():
    """The templates' 4 workers are sized for GPU clusters; on a 4-CPU local Ray, 1-CPU
    vLLM workers leave room for 2 beside its CPU stages and the reads and writes."""
    from toolkit.run.driver import fit_pools_to_this_machine

    job = load_job("text-industry")
    spec = load_job_spec(job, overrides={"engine.accelerator_type": "none"})
    fitted, notices = fit_pools_to_this_machine(spec, cpus=4)
    assert (spec.engine.concurrency, fitted.engine.concurrency) == (4, 2)
    assert notices == [
        "engine.concurrency 4 is more CPU workers (1 CPU each) than the Ray started here "
        "holds (4 CPUs, 1 kept for reading and writing): running 2. Set --concurrency to choose."]
    assert fit_pools_to_this_machine(spec, cpus=16) == (spec, [])
    on_gpus = load_job_spec(job)
    assert fit_pools_to_this_machine(on_gpus, cpus=4) == (on_gpus, [])


def test_the_vllm_stage_stops_the_run_on_a_failed_start_and_keeps_its_resources(
        local_ray, tiny_chat_model):
    job = load_job("text-industry")
    overrides = {"engine.model": str(tiny_chat_model), "engine.accelerator_type": "none"}
    stage = build_vllm_processor(load_job_spec(job, overrides=overrides).engine) \
        .get_stage_by_name("vLLMEngineStage")
    assert stage.fn.__module__ == "toolkit.engines.vllm.engine_stage"
    assert stage.fn.__name__ == "vLLMEngineStageUDF"  # Ray Data's operator keeps its name
    assert stage.map_batches_kwargs["num_cpus"] == 1
    assert "num_gpus" not in stage.map_batches_kwargs
