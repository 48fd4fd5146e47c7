"""Our transformers engine on the tiny offline model, called directly (no Ray)."""

from __future__ import annotations

import re

import pytest

from toolkit.engines.transformers_engine import TransformersChatEngine, generate_texts

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
        "error": "preprocess: blank"
    }


def longest_chat(engine, max_tokens: int) -> list[dict[str, str]]:
    """The chat of repeated words whose prompt is the longest within ``max_tokens``."""
    def tokens(words: int) -> int:
        (prompt,) = engine._prepare_prompts([chat(" ".join(["word"] * words))])
        return 10**6 if isinstance(prompt, ValueError) else len(prompt)

    low, high = 1, 1000
    while low < high:  # the largest word count whose prompt fits
        middle = (low + high + 1) // 2
        low, high = (middle, high) if tokens(middle) <= max_tokens else (low, middle - 1)
    return chat(" ".join(["word"] * low))


def test_a_row_gets_its_own_token_budget_next_to_a_long_row(engine):
    """vLLM's limit per row: min(max_tokens, max_model_len - its own prompt), so a
    short row batched with a ~250-token one answers exactly as it does alone."""
    params = {"temperature": 0.0, "max_tokens": 16}
    short = {"messages": chat("hello there"), "sampling_params": params}
    long_row = {"messages": longest_chat(engine, 252), "sampling_params": params}
    (alone,) = generate_texts(engine, [short])
    together, beside = generate_texts(engine, [short, long_row])

    assert alone["num_generated_tokens"] == 16  # the random tiny model never stops early
    assert together == alone
    assert beside["error"] is None and 245 <= beside["num_input_tokens"] <= 252
    assert 1 <= beside["num_generated_tokens"] <= 256 - beside["num_input_tokens"]


def test_each_row_keeps_its_grammar_when_budgets_differ(engine):
    params = {"temperature": 0.0, "max_tokens": 16, "structured_outputs": {"choice": CHOICES}}
    short = {"messages": chat("Acme"), "sampling_params": params}
    # Its budget (256 - its prompt) may end it mid-choice, as vLLM would.
    long_row = {"messages": longest_chat(engine, 254), "sampling_params": params}
    (alone,) = generate_texts(engine, [short])
    together, beside = generate_texts(engine, [short, long_row])
    assert together == alone and alone["generated_text"] in CHOICES
    assert beside["error"] is None
