"""embed/classify on vLLM are Ray Data LLM processors with ``task_type``. vLLM only
runs on GPU workers, so here: what would be built, Ray Data LLM's own tokenize
stage on our rows (real Ray), and how the engine's ``embeddings`` become our columns."""

from __future__ import annotations

import numpy as np

from toolkit.engines.vllm.task_stages import build_vllm_task_processor, vllm_task_outputs
from toolkit.run.task_rows import prepare_task_row
from toolkit.spec.jobs.catalog import load_job
from toolkit.spec.loading import load_job_spec
from toolkit.spec.row_contract import TASK_CONTRACTS


def embed_spec(model: str):
    return load_job_spec(load_job("embed"), overrides={"engine.model": model})


def test_embed_builds_a_pooling_processor_without_chat_template(local_ray):
    from toolkit.samples.tiny_task_models import tiny_task_model_path

    model = str(tiny_task_model_path("tiny-encoder"))
    processor = build_vllm_task_processor(embed_spec(model).engine)
    assert processor.list_stage_names() == ["TokenizeStage", "vLLMEngineStage"]
    stage = processor.get_stage_by_name("vLLMEngineStage")
    assert stage.fn_constructor_kwargs["task_type"] == "embed"
    assert stage.fn_constructor_kwargs["engine_kwargs"]["max_model_len"] == 512
    assert stage.map_batches_kwargs["accelerator_type"] == "L4"
    assert stage.map_batches_kwargs["compute"].max_size == 4


def test_tokenize_stage_reads_our_prompt_and_passes_error_rows_by(local_ray):
    import ray
    from ray.llm._internal.batch.processor.base import Processor
    from transformers import AutoTokenizer

    from toolkit.samples.tiny_task_models import tiny_task_model_path

    model = str(tiny_task_model_path("tiny-encoder"))
    job = load_job("embed")
    spec = embed_spec(model)
    built = build_vllm_task_processor(spec.engine)
    tokenize_only = Processor(built.config, [built.get_stage_by_name("TokenizeStage")])
    preprocess = job.main_stage.preprocess
    rows = [prepare_task_row(row, preprocess, spec.options, TASK_CONTRACTS["embed"].inputs)
            for row in ({"review_id": 1, "review": "Great kettle."},
                        {"review_id": 2, "review": " "})]
    out = sorted(tokenize_only(ray.data.from_items(rows)).take_all(),
                 key=lambda r: r["review_id"])
    good, blank = out
    assert list(good["tokenized_prompt"]) == AutoTokenizer.from_pretrained(model)(
        "Great kettle.")["input_ids"]
    assert blank["__inference_error__"] == blank["error"] == "preprocess: column 'review' is empty"
    assert blank.get("tokenized_prompt") is None


def test_engine_embeddings_become_our_columns():
    batch = {
        "review_id": np.array([1, 2, 3]),
        "embeddings": np.array([np.array([0.1, 0.7, 0.2], dtype=np.float32), None,
                                np.array([0.6, 0.3, 0.1], dtype=np.float32)], dtype=object),
        "__inference_error__": np.array(["", "preprocess: column 'review' is empty", ""]),
        "error": np.array([None, "preprocess: column 'review' is empty", None], dtype=object),
    }
    embedded = vllm_task_outputs({**batch}, "embed", {})
    assert embedded["embedding"][0] == [np.float32(0.1), np.float32(0.7), np.float32(0.2)]
    assert embedded["embedding"][1] is None and "embeddings" not in embedded
    labelled = vllm_task_outputs({**batch}, "classify", {0: "NEGATIVE", 1: "POSITIVE", 2: "x"})
    assert list(labelled["label"]) == ["POSITIVE", None, "NEGATIVE"]
    assert labelled["score"][2] == np.float32(0.6)
    assert labelled["error"][1] == "preprocess: column 'review' is empty"
