"""text-industry is a YAML prompt job; its hooks are plain Python: no Ray, no model."""

from __future__ import annotations

import pytest

from toolkit.spec.jobs.catalog import load_job
from toolkit.spec.loading import load_job_spec

JOB = load_job("text-industry")
STAGE = JOB.main_stage
OPTIONS = JOB.options_of(load_job_spec(JOB))
preprocess, postprocess = STAGE.preprocess, STAGE.postprocess


def test_preprocess_asks_about_the_company_and_lists_the_choices():
    out = preprocess({"Index": 1, "Company": "Vega, Gibson and Rowland"}, OPTIONS)
    system, user = out["messages"]
    assert system["role"] == "system" and user["role"] == "user"
    assert user["content"] == (
        "Choose one of: Law Firm, Healthcare, Technology, Retail, Consulting, Manufacturing, "
        "Finance, Real Estate, Other. Which industry does this company most likely belong "
        "to? Company: Vega, Gibson and Rowland")
    assert "Law Firm, Healthcare, Technology" in user["content"]


@pytest.mark.parametrize("company", [None, "", "   "])
def test_a_blank_company_is_rejected_with_the_column_named(company):
    with pytest.raises(ValueError, match="column 'Company' is empty"):
        preprocess({"Index": 1, "Company": company}, OPTIONS)


def test_postprocess_keeps_only_allowed_answers():
    # Its confidence comes from the engine's log-probability, when it reports one.
    assert postprocess({"generated_text": " Finance\n"}, OPTIONS) == {
        "inferred_industry": "Finance", "inferred_industry_confidence": None}
    assert postprocess({"generated_text": "Finance", "generated_logprob": 0.0},
                       OPTIONS)["inferred_industry_confidence"] == 1.0
    with pytest.raises(ValueError, match="not one of the choices"):
        postprocess({"generated_text": "Banking"}, OPTIONS)


def test_the_constraint_is_the_choice_list():
    assert STAGE.structured_output(OPTIONS) == {"choice": OPTIONS.output.choice}
    assert STAGE.required_columns(OPTIONS) == ["Company"]
