"""The row functions around the engine, without Ray: every failure shape becomes `error`."""

from __future__ import annotations

import pyarrow as pa

from toolkit.run.row_steps import finish_batch, output_schema, prepare_row
from toolkit.spec.jobs.catalog import load_job
from toolkit.spec.loading import load_job_spec

JOB = load_job("text-industry")
STAGE = JOB.main_stage
OPTIONS = JOB.options_of(load_job_spec(JOB))
INPUT = pa.schema([("Index", pa.string()), ("Company", pa.string())])
RESULT_COLUMNS = STAGE.result_columns(OPTIONS)
SCHEMA = output_schema(INPUT, RESULT_COLUMNS)


def finish(rows: list[dict]) -> list[dict]:
    table = pa.Table.from_pylist(rows)
    return finish_batch(table, STAGE.postprocess, OPTIONS, SCHEMA,
                        list(RESULT_COLUMNS)).to_pylist()


def test_prepare_row_keeps_the_input_and_adds_the_prompt():
    out = prepare_row({"Index": "1", "Company": "Acme"}, STAGE.preprocess, OPTIONS,
                      {"max_tokens": 4})
    assert out["Index"] == "1" and out["error"] is None
    assert out["sampling_params"] == {"max_tokens": 4}
    assert "Acme" in out["messages"][1]["content"]


def test_every_error_shape_lands_in_one_error_column():
    rows = finish([
        # ok
        {"Index": "1", "Company": "Acme", "generated_text": "Retail", "error": None,
         "__inference_error__": ""},
        # Ray Data LLM's should_continue_on_error shape: defaults + __inference_error__
        {"Index": "2", "Company": "Beta", "generated_text": "", "error": None,
         "__inference_error__": "ValueError: prompt too long"},
        # rejected by preprocess, before the engine
        {"Index": "3", "Company": "", "generated_text": "Other", "error": "preprocess: blank",
         "__inference_error__": ""},
        # answer off the list: postprocess rejects it
        {"Index": "4", "Company": "Gamma", "generated_text": "Banking", "error": None,
         "__inference_error__": ""},
    ])
    assert [r["error"] for r in rows] == [
        None,
        "ValueError: prompt too long",
        "preprocess: blank",
        "postprocess: model answered 'Banking', which is not one of the choices",
    ]
    assert [r["inferred_industry"] for r in rows] == ["Retail", None, None, None]
    assert list(rows[0]) == ["Index", "Company", "inferred_industry",
                             "inferred_industry_confidence", "num_input_tokens",
                             "num_generated_tokens", "error"]


def test_an_all_null_batch_still_has_the_output_types():
    table = finish_batch(
        pa.Table.from_pylist([{"Index": "1", "Company": "", "generated_text": None,
                               "error": "preprocess: blank"}]),
        STAGE.postprocess, OPTIONS, SCHEMA, list(RESULT_COLUMNS),
    )
    assert table.schema == SCHEMA
    assert table.schema.field("inferred_industry").type == pa.string()


def test_a_cascade_writes_who_answered_and_the_small_models_answer_after_the_results():
    from toolkit.run.cascade_rows import cascade_columns

    schema = output_schema(INPUT, {**RESULT_COLUMNS, **cascade_columns(RESULT_COLUMNS)},
                           checked=True)
    assert schema.names == ["Index", "Company", "inferred_industry",
                            "inferred_industry_confidence", "answered_by",
                            "inferred_industry_first", "inferred_industry_first_confidence",
                            "num_input_tokens_first", "num_generated_tokens_first",
                            "finish_reason", "failed_checks", "num_input_tokens",
                            "num_generated_tokens", "error"]
    assert schema.field("inferred_industry_first_confidence").type == pa.float64()
