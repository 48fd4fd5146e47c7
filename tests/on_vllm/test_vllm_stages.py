"""vLLM's pooling tasks (classify, then a chat stage, in one two-stage run; embed, as
an embeddings batch file) and a cascade of two vLLM engines: on vLLM's CPU backend,
through the CLI. (A run stopped on vLLM and resumed with every row once: test_vllm_faults.py;
a killed driver's resume is the engine's no matter: tests/faults/test_no_row_lost.py.)"""

from __future__ import annotations

import json

from vllm_cli import read_rows, succeeded, toolkit_run

#: The sample reviews hold one longer than the tiny encoders' 512 positions: vLLM
#: refuses it, an error row in the words the transformers chat engine uses (its
#: classifier truncates it instead).
LONG_REVIEW_ERROR = "longer than max_model_len 512"


def test_review_triage_classifies_and_replies_on_vllm_with_the_labels_of_transformers(tmp_path):
    """Both stages on vLLM: its pooling classifier, then its chat engine on the rows the
    classifier labelled. The labels are those of the transformers classifier on the
    same reviews (text-classify, same tiny model)."""
    out = tmp_path / "triage"
    succeeded(toolkit_run("review-triage", "--smoke", "--rows", "40", "--engine", "vllm",
                          "--set", "stages.sentiment.kind=vllm", "--set", "engine.num_cpus=0.5",
                          "--set", "stages.sentiment.num_cpus=0.5",
                          "--accelerator", "none", "--output", str(out)))
    triaged = read_rows(out, "review_id")
    assert len(triaged) == 40
    ok = [row for row in triaged.values() if row["error"] is None]
    assert len(ok) >= 30
    assert all(row["sentiment"] in ("NEGATIVE", "POSITIVE") and row["reply"] for row in ok)
    for row in triaged.values():
        if row["error"] is not None:  # failed in the classifier: the chat stage skipped it
            assert row["reply"] is None and row["num_generated_tokens"] is None
            assert row["error"].startswith("preprocess:") or LONG_REVIEW_ERROR in row["error"]

    reference = tmp_path / "on-transformers"
    succeeded(toolkit_run("text-classify", "--smoke", "--rows", "40", "--engine",
                          "transformers", "--accelerator", "none", "--output", str(reference)))
    on_transformers = read_rows(reference, "review_id")
    both = [i for i, row in triaged.items()
            if row["error"] is None and on_transformers[i]["error"] is None]
    assert len(both) >= 30
    same = [i for i in both if triaged[i]["sentiment"] == on_transformers[i]["label"]]
    print(f"\nclassify, vLLM vs transformers: {len(same)} of {len(both)} labels the same")
    assert len(same) == len(both)
    assert all(abs(triaged[i]["sentiment_score"] - on_transformers[i]["score"]) < 1e-3
               for i in both)


def test_openai_batch_embeddings_on_vllm(tmp_path):
    """An /v1/embeddings file on vLLM's pooling: one vector per text, and a text longer
    than the encoder takes answered with an error, alone (a tool call on vLLM:
    test_vllm_generate.py; both on transformers: tests/test_openai_batch_conformance.py;
    the embed job writes the same stage's vectors, tests/tasks)."""
    embeddings = tmp_path / "embeddings.jsonl"
    texts = [f"text number {i}" for i in range(3)] + ["word " * 700]
    embeddings.write_text("".join(json.dumps({
        "custom_id": f"e{i}", "method": "POST", "url": "/v1/embeddings",
        "body": {"model": "emb", "input": text}}) + "\n" for i, text in enumerate(texts)))
    succeeded(toolkit_run("openai-batch", "--smoke", "--engine", "vllm", "--accelerator",
                          "none", "--input", str(embeddings), "--output",
                          str(tmp_path / "emb"), "--served-model-name", "emb"))
    lines = {line["custom_id"]: line for line in map(
        json.loads, (tmp_path / "emb" / "_batch_output.jsonl").read_text().splitlines())}
    assert sorted(lines) == ["e0", "e1", "e2", "e3"]
    for custom_id in ("e0", "e1", "e2"):
        body = lines[custom_id]["response"]["body"]
        assert body["object"] == "list" and len(body["data"][0]["embedding"]) == 64
        assert body["usage"]["prompt_tokens"] > 0
    too_long = json.dumps(lines["e3"])
    assert LONG_REVIEW_ERROR in too_long, too_long[:1000]


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
