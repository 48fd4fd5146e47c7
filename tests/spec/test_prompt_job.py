"""A prompt job (YAML: a prompt and an output shape) through its row hooks: no Ray, no model."""

from __future__ import annotations

import math
import pickle
from typing import Any

import pytest
from pydantic import ValidationError

from toolkit.spec.jobs.prompt_job import (
    PromptJobSpec,
    postprocess,
    preprocess,
    prompt_job_definition,
    prompt_options,
    required_columns,
    result_columns,
    structured_output,
)

SENTIMENT_SYSTEM = "You classify the sentiment of product reviews. Answer with one word."


def spec(prompt: dict[str, Any], output: dict[str, Any] | None = None) -> PromptJobSpec:
    """A full job file as the loader would hand it over, with this prompt and output."""
    document: dict[str, Any] = {
        "job": "sentiment",
        "prompt": prompt,
        "data": {"input": "reviews.csv", "id_column": "review_id", "output": "out/sentiment"},
        "engine": {"kind": "transformers", "model": "sample:tiny-chat", "batch_size": 8},
        "sampling": {"max_tokens": 8},
    }
    if output is not None:
        document["output"] = output
    return PromptJobSpec.model_validate(document)


def options(prompt: dict[str, Any], output: dict[str, Any] | None = None):
    return prompt_options(spec(prompt, output))


SENTIMENT = options(
    {"system": SENTIMENT_SYSTEM, "user": "Review: {{ review }}"},
    {"column": "sentiment", "choice": ["positive", "negative", "neutral"]},
)
PERSON = {
    "type": "object",
    "properties": {
        "name": {"type": "string"},
        "age": {"type": "integer"},
        "score": {"type": "number"},
        "active": {"type": "boolean"},
        "tags": {"type": "array", "items": {"type": "string"}},
        "nickname": {"type": ["string", "null"]},
    },
    "required": ["name", "age"],
}


def answer(text: str) -> dict[str, Any]:
    return {"review_id": 1, "generated_text": text}


# -- prompts -------------------------------------------------------------------


def test_the_prompt_is_rendered_with_the_rows_columns():
    messages = preprocess({"review_id": 1, "review": "Broke after a day."}, SENTIMENT)["messages"]
    assert messages == [
        {"role": "system", "content": SENTIMENT_SYSTEM},
        {"role": "user", "content": "Review: Broke after a day."},
    ]


def test_a_system_prompt_that_reads_no_column_is_the_same_on_every_row():
    choosing = options({"system": "Answer with one of: {{ choices | join(', ') }}.",
                        "user": "Review: {{ review }}"}, {"choice": ["yes", "no"]})
    rows = [preprocess({"review_id": i, "review": f"Review {i}"}, choosing)["messages"]
            for i in range(3)]
    assert {row[0]["content"] for row in rows} == {"Answer with one of: yes, no."}
    assert [row[1]["content"] for row in rows] == ["Review: Review 0", "Review: Review 1",
                                                  "Review: Review 2"]


def test_a_system_prompt_too_long_for_any_row_is_refused_on_each_row_alike():
    long = options({"system": "{{ 'a' * 2000000 }}", "user": "{{ review }}"})
    for i in range(2):
        with pytest.raises(ValueError, match="prompt.system: template output exceeds"):
            preprocess({"review_id": i, "review": "x"}, long)


def test_columns_whose_names_are_not_identifiers_are_read_through_row():
    opts = options({"user": 'Signed up on {{ row["Subscription Date"] }} as {{ name }}.'})
    row = {"review_id": 1, "Subscription Date": "2021-03-04", "name": "Ada"}
    assert preprocess(row, opts)["messages"] == [
        {"role": "user", "content": "Signed up on 2021-03-04 as Ada."}
    ]
    assert required_columns(opts) == ["Subscription Date", "name"]


def test_required_columns_come_from_both_templates_without_context_names():
    opts = options(
        {
            "system": "You answer about {{ product }}. Choose from {{ choices | join(', ') }}.",
            "user": "{% for w in range(2) %}{{ w }}{% endfor %}{{ review }} {{ row['stars'] }}",
        },
        {"choice": ["a", "b"]},
    )
    assert required_columns(opts) == ["product", "review", "stars"]


def test_prompts_can_list_the_choices():
    opts = options(
        {"user": "Answer with one of: {{ choices | join(', ') }}.\n{{ review }}"},
        {"choice": ["positive", "negative"]},
    )
    (user,) = preprocess({"review": "Fine."}, opts)["messages"]
    assert user["content"] == "Answer with one of: positive, negative.\nFine."


def test_a_template_syntax_error_is_reported_with_its_line():
    with pytest.raises(ValidationError) as caught:
        spec({"user": "Review:\n{{ review }}}\n{% if %}"})
    message = str(caught.value)
    assert "prompt.user" in message
    assert "template syntax error at line 3" in message


def test_an_unknown_name_is_a_required_column_so_the_run_stops_before_the_model():
    opts = options({"user": "{{ review }} by {{ author }}"})
    # The pipeline checks these against the input schema before any model loads.
    assert required_columns(opts) == ["author", "review"]
    with pytest.raises(ValueError, match="column 'author' is missing"):
        preprocess({"review": "Great."}, opts)


def test_a_name_found_only_at_render_time_is_an_error_not_a_blank():
    # row.author is not a string subscript, so only rendering can find it missing.
    opts = options({"user": "{{ review }} by {{ row.author }}"})
    assert required_columns(opts) == ["review"]
    with pytest.raises(ValueError, match="user template: 'dict object' has no attribute 'author'"):
        preprocess({"review": "Great."}, opts)


@pytest.mark.parametrize("value", [None, "", "  \n", math.nan])
def test_a_blank_required_column_makes_an_error_row_naming_it(value):
    with pytest.raises(ValueError, match="column 'review' is empty"):
        preprocess({"review_id": 7, "review": value}, SENTIMENT)


def test_a_column_read_with_row_get_is_optional():
    opts = options({"user": "{{ review }}{% if row.get('notes') %} ({{ row.notes }}){% endif %}"})
    assert required_columns(opts) == ["review"]
    assert preprocess({"review": "Ok", "notes": None}, opts)["messages"][0]["content"] == "Ok"
    assert preprocess({"review": "Ok", "notes": "gift"}, opts)["messages"][0]["content"] == (
        "Ok (gift)"
    )


def test_values_are_rendered_as_they_are_apart_from_the_blank_check():
    opts = options({"user": "[{{ review }}] {{ stars }} stars"})
    content = preprocess({"review": "  padded  ", "stars": 4}, opts)["messages"][0]["content"]
    assert content == "[  padded  ] 4 stars"


def test_the_sandbox_does_not_leak_python_internals():
    opts = options({"user": "{{ review }}{{ ''.__class__.__mro__[1].__subclasses__() }}"})
    try:
        content = preprocess({"review": "x"}, opts)["messages"][0]["content"]
    except ValueError as exc:
        assert "unsafe" in str(exc)
    else:
        assert "class" not in content


# -- answers -------------------------------------------------------------------


def test_a_choice_answer_is_stripped_and_must_be_on_the_list():
    assert postprocess(answer(" negative\n"), SENTIMENT) == {"sentiment": "negative",
                                                              "sentiment_confidence": None}
    with pytest.raises(ValueError, match="model answered 'meh', which is not one of the choices"):
        postprocess(answer("meh"), SENTIMENT)
    assert structured_output(SENTIMENT) == {"choice": ["positive", "negative", "neutral"]}
    assert result_columns(SENTIMENT) == {"sentiment": "string", "sentiment_confidence": "double"}


def test_a_regex_answer_must_match_whole():
    opts = options({"user": "{{ date }}"}, {"column": "date_mdy", "regex": r"\d{2}-\d{2}-\d{4}"})
    assert postprocess(answer("03-04-2021\n"), opts) == {"date_mdy": "03-04-2021"}
    with pytest.raises(ValueError, match="does not match"):
        postprocess(answer("03-04-2021 or so"), opts)
    assert structured_output(opts) == {"regex": r"\d{2}-\d{2}-\d{4}"}


def test_free_text_goes_stripped_into_the_result_column():
    opts = options({"user": "Summarise: {{ review }}"})
    assert postprocess(answer("  Short and sweet.\n"), opts) == {"result": "Short and sweet."}
    assert structured_output(opts) is None
    assert result_columns(opts) == {"result": "string"}


def test_a_json_answer_becomes_typed_columns_in_schema_order():
    opts = options({"user": "{{ bio }}"}, {"json_schema": PERSON})
    assert result_columns(opts) == {
        "name": "string",
        "age": "int64",
        "score": "double",
        "active": "bool",
        "tags": "string",
        "nickname": "string",
    }
    assert structured_output(opts) == {"json": PERSON}
    text = '{"name": "Ada", "age": 36.0, "score": 9, "active": true, "tags": ["a", "b"]}'
    assert postprocess(answer(text), opts) == {
        "name": "Ada",
        "age": 36,
        "score": 9.0,
        "active": True,
        "tags": '["a","b"]',
        "nickname": None,
    }


def test_json_values_in_the_wrong_shape_are_coerced_when_unambiguous():
    opts = options({"user": "{{ bio }}"}, {"json_schema": PERSON})
    out = postprocess(answer('{"name": "Ada", "age": "36", "score": "1.5", "active": "False"}'), opts)
    assert (out["age"], out["score"], out["active"]) == (36, 1.5, False)


@pytest.mark.parametrize(
    ("text", "error"),
    [
        ("Ada is 36", "model answer is not JSON"),
        ('["Ada", 36]', "not an object"),
        ('{"name": "Ada"}', "lacks required property 'age'"),
        ('{"name": "Ada", "age": null}', "lacks required property 'age'"),
        ('{"name": "Ada", "age": 36.5}', "property 'age': expected an integer, got 36.5"),
        ('{"name": "Ada", "age": 1, "active": "yes"}', "property 'active': expected a boolean"),
        ('{"name": "Ada", "age": 1, "score": "high"}', "property 'score': expected a number"),
    ],
)
def test_a_json_answer_off_the_schema_is_an_error_row(text, error):
    opts = options({"user": "{{ bio }}"}, {"json_schema": PERSON})
    with pytest.raises(ValueError, match=error):
        postprocess(answer(text), opts)


# -- what the spec refuses -------------------------------------------------------


@pytest.mark.parametrize(
    ("output", "error"),
    [
        ({"choice": ["a", "b"], "regex": "a"}, "at most one of choice, regex and json_schema"),
        ({"regex": "a", "json_schema": PERSON}, "at most one of choice, regex and json_schema"),
        ({"choice": ["yes"]}, "at least 2 items"),
        ({"choice": ["yes", "yes"]}, "choices must be distinct"),
        ({"choice": ["yes", " "]}, "choices must be non-empty"),
        ({"regex": "(unclosed"}, "not a valid regular expression"),
        ({"json_schema": {"type": "array"}}, "json_schema must be {type: object"),
        ({"json_schema": {**PERSON, "required": ["email"]}}, "undeclared properties"),
        ({"column": "person", "json_schema": PERSON}, "column is not used with json_schema"),
        ({"column": "error"}, "reserved by the pipeline"),
        ({"colum": "x"}, "Extra inputs are not permitted"),
    ],
)
def test_an_output_section_that_cannot_work_is_refused(output, error):
    with pytest.raises(ValidationError, match=error):
        spec({"user": "{{ review }}"}, output)


def test_a_prompt_job_takes_no_job_options():
    with pytest.raises(ValidationError, match="Extra inputs are not permitted"):
        PromptJobSpec.model_validate(
            {**spec({"user": "x"}).model_dump(), "options": {"company_column": "Company"}}
        )


# -- on the workers ------------------------------------------------------------------


def test_hooks_and_options_survive_pickling():
    for hook in (preprocess, postprocess, required_columns, structured_output, result_columns):
        assert pickle.loads(pickle.dumps(hook)) is hook
    restored = pickle.loads(pickle.dumps(SENTIMENT))
    assert restored == SENTIMENT
    assert preprocess({"review": "Nice."}, restored) == preprocess({"review": "Nice."}, SENTIMENT)


def test_the_job_definition_wires_the_hooks_and_options():
    job = prompt_job_definition("sentiment", "Classify reviews.", {"engine": {"kind": "vllm"}})
    assert job.spec_model is PromptJobSpec
    assert job.smoke_overrides == {"engine.model": "sample:tiny-chat"}
    assert job.defaults == {"engine": {"kind": "vllm"}}
    opts = job.options_of(spec({"user": "{{ review }}"}, {"choice": ["yes", "no"]}))
    [stage] = job.stages
    assert stage.name == "engine"
    assert stage.required_columns(opts) == ["review"]
    assert stage.structured_output(opts) == {"choice": ["yes", "no"]}
    assert stage.postprocess(answer("yes"), opts) == {"result": "yes", "result_confidence": None}
