"""date-reformat's row functions and accuracy figure, without Ray."""

from __future__ import annotations

import re
import sys

import pyarrow as pa
import pytest

from toolkit.spec.jobs.catalog import load_job
from toolkit.spec.loading import load_job_spec

JOB = load_job("date-reformat")
STAGE = JOB.main_stage
CODE = sys.modules[STAGE.preprocess.__module__]  # the built-in's own Python file
accuracy, postprocess, preprocess = CODE.accuracy, CODE.postprocess, CODE.preprocess
reference_date = CODE.reference_date
SPEC = load_job_spec(JOB)
OPTIONS = SPEC.options


def test_template_holds_the_seed_engine_settings():
    assert SPEC.engine.engine_kwargs == {
        "max_model_len": 4096, "enable_chunked_prefill": True,
        "max_num_batched_tokens": 1024, "gpu_memory_utilization": 0.85,
    }
    assert (SPEC.sampling.temperature, SPEC.sampling.max_tokens) == (0.3, 150)
    assert OPTIONS.system_prompt == "You are a helpful assistant."


@pytest.mark.parametrize("source, expected", [
    ("2020-08-24", "08-24-2020"), ("08/24/2020", "08-24-2020"),
    ("24.08.2020", "08-24-2020"), ("August 24, 2020", "08-24-2020"),
])
def test_reference_dates_parse_deterministically(source, expected):
    assert reference_date(source, OPTIONS.input_formats) == expected


def test_unparseable_dates_are_row_errors_naming_the_column():
    with pytest.raises(ValueError, match="column 'Subscription Date': 'soon' matches none"):
        preprocess({"Subscription Date": "soon"}, OPTIONS)
    with pytest.raises(ValueError, match="the date is empty"):
        preprocess({"Subscription Date": None}, OPTIONS)


def test_the_prompt_carries_the_date_and_the_answer_is_checked():
    row = {"Index": 7, "Subscription Date": "2021-01-31"}
    prepared = preprocess(row, OPTIONS)
    assert "2021-01-31" in prepared["messages"][1]["content"]
    assert prepared["reference"] == "01-31-2021"
    ok = postprocess({**prepared, "generated_text": "01-31-2021"}, OPTIONS)
    assert ok == {"resp": "01-31-2021", "reference": "01-31-2021", "matches_reference": True}
    wrong = postprocess({**prepared, "generated_text": "31-01-2021"}, OPTIONS)
    assert wrong["matches_reference"] is False


def test_the_constraint_only_admits_mm_dd_yyyy():
    pattern = STAGE.structured_output(OPTIONS)["regex"]
    assert re.fullmatch(pattern, "12-31-2021")
    assert not re.fullmatch(pattern, "13-01-2021")
    assert not re.fullmatch(pattern, "2021-12-31")


def test_accuracy_counts_error_rows_as_misses():
    table = pa.table({"matches_reference": [True, False, None, True]})
    assert accuracy(table) == {"accuracy": 0.5, "matching_rows": 2}
