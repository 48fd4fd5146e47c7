"""The transformers engine on a CUDA GPU answers as it does on CPU (no Ray).

Runs only where torch sees a GPU (CI has none). Last run on an NVIDIA H200 (torch
2.11.0+cu130, transformers 5.17.0, 2026-11-27): float32 greedy answers equal to the
CPU's on every row for choice, regex, JSON-schema and free text, both tiny shapes;
bfloat16 within a few rows (its kernels round differently), constraints always held.
"""

from __future__ import annotations

import json
import re

import pytest

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")

from toolkit.engines.transformers.chat_engine import TransformersChatEngine, generate_texts  # noqa: E402

CHOICES = ["Law Firm", "Healthcare", "Technology", "Retail", "Real Estate", "Other"]
CONSTRAINTS = {
    "choice": {"choice": CHOICES},
    "regex": {"regex": r"\d{2}-\d{2}-\d{4}"},
    "json": {"json": {"type": "object", "properties": {"a": {"type": "integer"}},
                      "required": ["a"]}},
    "free": None,
}


def rows(constraint: dict | None) -> list[dict]:
    params = {"temperature": 0.0, "max_tokens": 32,
              **({"structured_outputs": constraint} if constraint else {})}
    # Every 16th prompt is over max_model_len: an error row on either device.
    return [{"messages": [{"role": "system", "content": "Classify."}, {"role": "user", "content":
             "word " * 400 if i % 16 == 0 else f"Company {i} Holdings"}],
             "sampling_params": params, "error": None} for i in range(64)]


@pytest.fixture(scope="module")
def engines(tiny_chat_model):
    make = lambda gpu: TransformersChatEngine(  # noqa: E731
        str(tiny_chat_model), {"max_model_len": 256, "dtype": "float32"}, use_gpu=gpu,
        dedupe=False)
    return make(False), make(True)


@pytest.mark.parametrize("name", CONSTRAINTS)
def test_greedy_answers_on_the_gpu_equal_the_cpus(engines, name):
    cpu, gpu = engines
    assert gpu.device == "cuda" and next(gpu.model.parameters()).is_cuda
    on_cpu, on_gpu = (generate_texts(engine, rows(CONSTRAINTS[name])) for engine in engines)
    assert [row["generated_text"] for row in on_gpu] == [row["generated_text"] for row in on_cpu]
    assert [row["error"] for row in on_gpu] == [row["error"] for row in on_cpu]
    finished = [row["generated_text"] for row in on_gpu
                if row["error"] is None and row["finish_reason"] == "stop"]
    if name == "choice":
        assert finished and set(finished) <= set(CHOICES)
    elif name == "regex":
        assert finished and all(re.fullmatch(r"\d{2}-\d{2}-\d{4}", text) for text in finished)
    elif name == "json":
        assert all(isinstance(json.loads(text)["a"], int) for text in finished)
