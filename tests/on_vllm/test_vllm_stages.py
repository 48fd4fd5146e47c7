"""vLLM's pooling tasks (embed, classify), a vLLM chat stage after a classifier, an
embeddings batch file and a cascade of two vLLM engines: on vLLM's CPU backend, through
the CLI. (A run stopped on vLLM and resumed with every row once: test_vllm_faults.py;
a killed driver's resume is the engine's no matter: tests/faults/test_no_row_lost.py.)"""

from __future__ import annotations

import json

from vllm_cli import read_rows, succeeded, toolkit_run

#: The sample reviews hold one longer than the tiny encoders' 512 positions: vLLM
#: refuses it, an error row in the words the transformers chat engine uses (its
#: classifier truncates it instead).
LONG_REVIEW_ERROR = "longer than max_model_len 512"


def test_embed_on_vllm_writes_one_vector_per_text(tmp_path):
    out = tmp_path / "embed"
    succeeded(toolkit_run("embed", "--smoke", "--rows", "60", "--engine", "vllm",
                          "--accelerator", "none", "--output", str(out)))
    rows = list(read_rows(out, "review_id").values())
    ok = [row for row in rows if row["error"] is None]
    assert len(rows) == 60 and len(ok) >= 50
    assert {len(row["embedding"]) for row in ok} == {64}
    for row in rows:
        if row["error"] is not None:
            assert row["error"].startswith("preprocess:") or LONG_REVIEW_ERROR in row["error"]


def test_classify_on_vllm_labels_like_the_transformers_classifier(tmp_path):
    labels = {}
    for engine in ("vllm", "transformers"):
        out = tmp_path / engine
        succeeded(toolkit_run("text-classify", "--smoke", "--rows", "60", "--engine", engine,
                              "--accelerator", "none", "--output", str(out)))
        labels[engine] = read_rows(out, "review_id")
    on_vllm, on_transformers = labels["vllm"], labels["transformers"]
    both = [i for i, row in on_vllm.items()
            if row["error"] is None and on_transformers[i]["error"] is None]
    assert len(both) >= 50
    assert {on_vllm[i]["label"] for i in both} <= {"NEGATIVE", "POSITIVE"}
    same = [i for i in both if on_vllm[i]["label"] == on_transformers[i]["label"]]
    print(f"\nclassify, vLLM vs transformers: {len(same)} of {len(both)} labels the same")
    assert len(same) == len(both)
    assert all(abs(on_vllm[i]["score"] - on_transformers[i]["score"]) < 1e-3 for i in both)


def test_review_triage_runs_its_chat_stage_on_vllm(tmp_path):
    out = tmp_path / "triage"
    succeeded(toolkit_run("review-triage", "--smoke", "--rows", "40", "--engine", "vllm",
                          "--accelerator", "none", "--output", str(out)))
    rows = list(read_rows(out, "review_id").values())
    assert len(rows) == 40
    ok = [row for row in rows if row["error"] is None]
    assert len(ok) >= 30
    assert all(row["sentiment"] in ("NEGATIVE", "POSITIVE") and row["reply"] for row in ok)
    for row in rows:
        if row["error"] is not None:  # failed in the classifier: the chat stage skipped it
            assert row["reply"] is None and row["num_generated_tokens"] is None


def test_openai_batch_embeddings_on_vllm(tmp_path):
    """An /v1/embeddings file on vLLM's pooling (a tool call on vLLM:
    test_vllm_generate.py; both on transformers: tests/test_openai_batch_conformance.py)."""
    embeddings = tmp_path / "embeddings.jsonl"
    embeddings.write_text("".join(json.dumps({
        "custom_id": f"e{i}", "method": "POST", "url": "/v1/embeddings",
        "body": {"model": "emb", "input": f"text number {i}"}}) + "\n" for i in range(3)))
    succeeded(toolkit_run("openai-batch", "--smoke", "--engine", "vllm", "--accelerator",
                          "none", "--input", str(embeddings), "--output",
                          str(tmp_path / "emb"), "--served-model-name", "emb"))
    for text in (tmp_path / "emb" / "_batch_output.jsonl").read_text().splitlines():
        body = json.loads(text)["response"]["body"]
        assert body["object"] == "list" and len(body["data"][0]["embedding"]) == 64
        assert body["usage"]["prompt_tokens"] > 0


def test_a_cascade_on_vllm_sends_only_the_unsure_rows_to_the_big_model(tmp_path):
    """Small model first, on two vLLM engines (half a CPU each: both fit beside each
    other on a small machine)."""
    out = tmp_path / "cascade"
    threshold = 0.06  # about the tiny small model's median confidence: both outcomes
    succeeded(toolkit_run("text-industry", "--smoke", "--rows", "60", "--engine", "vllm",
                          "--accelerator", "none", "--cascade-model", "sample:tiny-chat-small",
                          "--escalate-below", str(threshold), "--set", "engine.num_cpus=0.5",
                          "--set", "cascade.num_cpus=0.5", "--output", str(out)))
    rows = list(read_rows(out, "Index").values())
    assert sorted(int(row["Index"]) for row in rows) == list(range(1, 61))
    kept = [row for row in rows if row["answered_by"] == "sample:tiny-chat-small"]
    escalated = [row for row in rows if row["answered_by"] == "sample:tiny-chat"]
    assert kept and escalated and len(kept) + len(escalated) == 60
    assert all(row["inferred_industry_confidence"] >= threshold for row in kept)
    assert all(row["inferred_industry_first_confidence"] < threshold for row in escalated)
    summary = json.loads((out / "_summary.json").read_text())
    assert summary["cascade"]["escalated"] == len(escalated)
