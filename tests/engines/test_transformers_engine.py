"""Our transformers engine on the tiny offline model, called directly (no Ray)."""

from __future__ import annotations

import math
import re

import pytest

from toolkit.engines.transformers.chat_engine import TransformersChatEngine, generate_texts

CHOICES = ["Law Firm", "Healthcare", "Technology", "Retail", "Real Estate", "Other"]


@pytest.fixture(scope="module")
def engine(tiny_chat_model):
    # Without its memory of greedy answers, so a row asked twice is computed twice.
    return TransformersChatEngine(str(tiny_chat_model), {"max_model_len": 256}, dedupe=False)


def chat(text: str) -> list[dict[str, str]]:
    return [{"role": "system", "content": "Classify."}, {"role": "user", "content": text}]


def test_choice_constraint_always_yields_one_of_the_choices(engine):
    params = {"temperature": 0.0, "max_tokens": 16, "structured_outputs": {"choice": CHOICES}}
    rows = [{"messages": chat(f"Company {i}"), "sampling_params": params, "error": None}
            for i in range(12)]
    out = generate_texts(engine, rows)
    assert all(row["error"] is None for row in out)
    assert {row["generated_text"] for row in out} <= set(CHOICES)


def test_choice_constraint_holds_when_sampling_too(engine):
    params = {"temperature": 1.5, "max_tokens": 16, "seed": 3,
              "structured_outputs": {"choice": CHOICES}}
    rows = [{"messages": chat(f"Company {i}"), "sampling_params": params} for i in range(12)]
    assert {row["generated_text"] for row in generate_texts(engine, rows)} <= set(CHOICES)


def test_regex_constraint_shapes_the_answer(engine):
    params = {"temperature": 0.0, "max_tokens": 20,
              "structured_outputs": {"regex": r"\d{2}-\d{2}-\d{4}"}}
    out = generate_texts(engine, [{"messages": chat("Reformat 2021-03-04"), "sampling_params": params}])
    assert re.fullmatch(r"\d{2}-\d{2}-\d{4}", out[0]["generated_text"])


def test_unconstrained_generation_stops_at_max_tokens(engine):
    params = {"temperature": 0.0, "max_tokens": 5}
    out = generate_texts(engine, [{"messages": chat("hello"), "sampling_params": params}])
    assert 1 <= out[0]["num_generated_tokens"] <= 5


def test_over_long_prompts_and_earlier_errors_become_error_rows(engine):
    params = {"temperature": 0.0, "max_tokens": 16, "structured_outputs": {"choice": CHOICES}}
    rows = [
        {"messages": chat("fine"), "sampling_params": params, "error": None},
        {"messages": chat("word " * 400), "sampling_params": params, "error": None},
        {"messages": chat("skipped"), "sampling_params": params, "error": "preprocess: blank"},
    ]
    ok, too_long, earlier = generate_texts(engine, rows)
    assert ok["generated_text"] in CHOICES and ok["error"] is None
    assert too_long["generated_text"] is None
    assert re.match(r"prompt is \d+ tokens, longer than max_model_len 256", too_long["error"])
    assert earlier == {
        "generated_text": None, "num_input_tokens": None, "num_generated_tokens": None,
        "finish_reason": None, "generated_logprob": None, "error": "preprocess: blank"
    }


def test_finish_reason_says_whether_max_tokens_cut_the_answer(engine):
    def answer(max_tokens):
        params = {"temperature": 0.0, "max_tokens": max_tokens,
                  "structured_outputs": {"choice": CHOICES}}
        return generate_texts(engine, [{"messages": chat("Acme"), "sampling_params": params}])[0]

    cut, whole = answer(1), answer(16)
    assert cut["finish_reason"] == "length" and cut["num_generated_tokens"] == 1
    assert cut["generated_text"] not in CHOICES  # the first token of a longer choice
    assert whole["finish_reason"] == "stop" and whole["generated_text"] in CHOICES


def test_a_constrained_answer_has_its_probability_among_the_choices(engine):
    def answer(choices):
        params = {"temperature": 0.0, "max_tokens": 16, "structured_outputs": {"choice": choices}}
        return generate_texts(engine, [{"messages": chat("Acme"), "sampling_params": params}])[0]

    among_all = answer(CHOICES)
    assert 0 < math.exp(among_all["generated_logprob"]) <= 1
    # The mask renormalises each step over what the choices allow: with only the given
    # answer left, the same tokens are at least as likely.
    alone = answer([among_all["generated_text"]])
    assert alone["generated_text"] == among_all["generated_text"]
    assert alone["generated_logprob"] >= among_all["generated_logprob"]


def test_without_the_chat_template_the_prompt_goes_in_as_written(tiny_chat_model):
    raw = TransformersChatEngine(str(tiny_chat_model), {}, apply_chat_template=False)
    params = {"max_tokens": 4, "temperature": 0.0}
    prompt = "Once upon a time"
    [out] = generate_texts(raw, [{"prompt": prompt, "sampling_params": params}])
    # The tokenizer's own special tokens around the text, as vLLM encodes a completion.
    assert out["num_input_tokens"] == len(raw.tokenizer(prompt)["input_ids"])
    assert out["num_generated_tokens"] == 4 and "prompt" not in out
    # Not what the same text gives through the chat template.
    [chatted] = generate_texts(raw.__class__(str(tiny_chat_model), {}),
                               [{"messages": chat(prompt), "sampling_params": params}])
    assert chatted["num_input_tokens"] > out["num_input_tokens"]


def test_a_jobs_messages_are_one_prompt_as_written_without_the_chat_template():
    from toolkit.run.row_steps import messages_as_written, prepare_row

    def preprocess(row, options):
        return {"messages": [{"role": "system", "content": "Answer in one word."},
                             {"role": "user", "content": f"Industry of {row['Company']}?"}]}

    out = prepare_row({"Company": "Acme"}, preprocess, None, {"max_tokens": 8},
                      input_column="prompt")
    assert out["prompt"] == "Answer in one word.\n\nIndustry of Acme?"
    assert "messages" not in out and out["error"] is None
    with pytest.raises(ValueError, match="a message part that is not text needs the chat"):
        messages_as_written([{"role": "user", "content": [{"type": "image_url"}]}])
