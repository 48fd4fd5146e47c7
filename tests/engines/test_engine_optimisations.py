"""The transformers engine's shortcuts never change an answer.

The same rows go through the engine as it runs by default (shared prompt head
computed once, identical greedy prompts answered once, rows ordered by length)
and through one with every shortcut off; greedy results must match row by row,
for choice-constrained, regex-constrained and free text.
"""

from __future__ import annotations

import pytest

from toolkit.engines.transformers.chat_engine import TransformersChatEngine, generate_texts
from toolkit.run.row_steps import engine_sampling_params
from toolkit.samples.customers import customers_batch
from toolkit.spec.jobs.catalog import load_job
from toolkit.spec.loading import load_job_spec

BATCH = 64  # rows per engine call, as Ray Data would hand them over


def job_rows(name: str, rows: int, structured: bool = True) -> list[dict]:
    """Greedy engine input rows for a built-in job over sample customers (names
    repeat, as in real customer tables)."""
    job = load_job(name)
    spec = load_job_spec(job)
    options = job.options_of(spec)
    greedy = spec.sampling.model_copy(update={"temperature": 0.0})
    params = engine_sampling_params(
        greedy, job.main_stage.structured_output(options) if structured else None)
    out = []
    for row in customers_batch(0, rows).to_pylist():
        out.append({**job.main_stage.preprocess(row, options), "sampling_params": params,
                    "error": None})
    return out


def answers(engine: TransformersChatEngine, rows: list[dict]) -> list[dict]:
    out = []
    for start in range(0, len(rows), BATCH):
        out.extend(generate_texts(engine, rows[start: start + BATCH]))
    return out


@pytest.fixture(scope="module")
def fast(tiny_chat_model):
    return TransformersChatEngine(str(tiny_chat_model), {"max_model_len": 256})


@pytest.fixture(scope="module")
def plain(tiny_chat_model):
    return TransformersChatEngine(
        str(tiny_chat_model), {"max_model_len": 256, "enable_prefix_caching": False},
        dedupe=False)


@pytest.mark.parametrize("job, rows, structured", [
    ("text-industry", 320, True),    # choice
    ("date-reformat", 128, True),    # regex
    ("text-industry", 128, False),   # free text, max_tokens new tokens
])
def test_greedy_answers_are_the_same_with_and_without_shortcuts(fast, plain, job, rows, structured):
    rows_in = job_rows(job, rows, structured)
    expected = answers(plain, rows_in)
    got = answers(fast, rows_in)

    assert [r["error"] for r in got] == [None] * rows
    # The same tokens, scored alike: a cached prompt head changes a log-probability's
    # last bits at most.
    got_logprobs = [row.pop("generated_logprob") for row in got]
    assert got_logprobs == pytest.approx([row.pop("generated_logprob") for row in expected],
                                         abs=0.01)
    assert got == expected
    # The shortcuts did run: a cached prompt head, and fewer prompts computed than rows.
    assert fast.prefixes is not None and fast.prefixes._caches
    assert plain.prefixes is None


def test_identical_prompts_are_computed_once(tiny_chat_model):
    engine = TransformersChatEngine(str(tiny_chat_model), {"max_model_len": 256})
    rows = job_rows("text-industry", 200)
    distinct = len({str(r["messages"]) for r in rows})
    assert distinct < len(rows)  # sample company names repeat

    answers(engine, rows)
    assert len(engine._answers) == distinct


def test_sampled_rows_are_not_deduplicated(tiny_chat_model):
    engine = TransformersChatEngine(str(tiny_chat_model), {"max_model_len": 256})
    params = {"temperature": 1.0, "max_tokens": 8, "seed": 1}
    row = job_rows("text-industry", 1, structured=False)[0]
    generate_texts(engine, [{**row, "sampling_params": params}] * 4)
    assert not engine._answers
