"""The OpenAI Batch API file format as pure functions: lines in, rows, output lines out."""

from __future__ import annotations

import json

import pytest

from toolkit.run.input.openai_batch import batch_output_line, chat_request, parse_request_line


def request(custom_id="req-1", url="/v1/chat/completions", **body):
    body.setdefault("model", "gpt-4o-mini")
    body.setdefault("messages", [{"role": "user", "content": "Hi"}])
    return json.dumps({"custom_id": custom_id, "method": "POST", "url": url, "body": body})


def test_a_request_line_is_a_row_keyed_on_its_custom_id():
    row = parse_request_line(request("req-9", max_tokens=5), line=4)
    assert row["custom_id"] == "req-9" and row["line"] == 4 and row["request_error"] is None
    assert json.loads(row["body"])["max_tokens"] == 5


@pytest.mark.parametrize("text, row_id, message", [
    ('{"custom_id": "a", broken', "line-3", "line 3: not valid JSON (Expecting property name"),
    ('[1, 2]', "line-3", "line 3: expected a JSON object, got list"),
    (json.dumps({"url": "/v1/chat/completions", "body": {}}), "line-3", "line 3: no custom_id"),
    (request(custom_id=7), "line-3", "line 3: custom_id 7 is not a string"),
    (request(url="/v1/embeddings"), "req-1",
     "line 3: url '/v1/embeddings' is not supported; only /v1/chat/completions"),
])
def test_a_bad_line_is_an_error_row_named_by_its_line(text, row_id, message):
    row = parse_request_line(text, line=3)
    assert row["custom_id"] == row_id
    assert row["request_error"].startswith(message)
    assert row["body"] is None


def test_the_body_becomes_messages_and_this_rows_sampling_params():
    schema = {"type": "object", "properties": {"a": {"type": "integer"}}}
    row = parse_request_line(request(
        messages=[{"role": "developer", "content": "Be brief."},
                  {"role": "user", "content": [{"type": "text", "text": "Hi "},
                                               {"type": "text", "text": "there"}]}],
        max_tokens=50, max_completion_tokens=20, temperature=0.7, seed=3,
        response_format={"type": "json_schema", "json_schema": {"name": "x", "schema": schema}},
    ), line=1)
    messages, params = chat_request(row["body"])
    assert messages == [{"role": "system", "content": "Be brief."},
                        {"role": "user", "content": "Hi there"}]
    assert params == {"max_tokens": 20, "temperature": 0.7, "top_p": None, "seed": 3,
                      "structured_outputs": {"json": json.dumps(schema, separators=(",", ":"))}}


def test_unset_fields_leave_the_specs_values():
    _, params = chat_request(json.dumps({"messages": [{"role": "user", "content": "x"}]}))
    assert params == dict.fromkeys(["max_tokens", "temperature", "top_p", "seed",
                                    "structured_outputs"])


@pytest.mark.parametrize("body, message", [
    ({"tools": [], "stop": ["\n"]}, "body.stop is not supported by this toolkit (nor tools)"),
    ({"n": 2}, "body.n 2: one answer per request only"),
    ({"temperature": 5}, "body.temperature must be between 0 and 2, not 5"),
    ({"max_tokens": "ten"}, "body.max_tokens must be a whole number, not 'ten'"),
    ({"messages": []}, "body.messages must be a non-empty list"),
    ({"messages": [{"role": "user", "content": [{"type": "image_url"}]}]},
     "body.messages[0].content: 'image_url' parts are not supported"),
    ({"response_format": {"type": "json_schema", "json_schema": {}}},
     "body.response_format.json_schema.schema must be a JSON schema object"),
])
def test_what_the_toolkit_cant_honour_is_refused_by_name(body, message):
    body = {"messages": [{"role": "user", "content": "x"}], **body}
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)")
                       .replace("[", r"\[").replace("]", r"\]").replace(".", r"\.")):
        chat_request(json.dumps(body))


def test_output_lines_have_the_batch_apis_shape():
    ok = batch_output_line("req-1", "Hello", "stop", 9, 3, None, "my-model", created=100)
    assert ok["custom_id"] == "req-1" and ok["error"] is None
    assert ok["id"].startswith("batch_req_")
    assert ok["response"]["status_code"] == 200
    body = ok["response"]["body"]
    assert body["object"] == "chat.completion" and body["model"] == "my-model"
    assert body["choices"] == [{"index": 0, "finish_reason": "stop",
                                "message": {"role": "assistant", "content": "Hello"}}]
    assert body["usage"] == {"prompt_tokens": 9, "completion_tokens": 3, "total_tokens": 12}

    failed = batch_output_line("line-3", None, None, None, None,
                               "preprocess: line 3: not valid JSON", "m", created=100)
    assert failed["response"] is None
    assert failed["error"] == {"code": "invalid_request",
                               "message": "preprocess: line 3: not valid JSON"}
    assert batch_output_line("r", None, None, None, None, "engine error: boom", "m",
                             created=1)["error"]["code"] == "inference_error"
