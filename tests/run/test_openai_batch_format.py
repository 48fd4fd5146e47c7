"""The OpenAI Batch API file format as pure functions: lines in, rows, output lines out."""

from __future__ import annotations

import json

import pytest

from toolkit.run.input.openai_batch import (
    UnusableLine,
    batch_output_line,
    chat_request,
    completion_request,
    embedding_request,
    parse_request_line,
    text_rows,
    tool_call,
)


def request(custom_id="req-1", url="/v1/chat/completions", **body):
    body.setdefault("model", "gpt-4o-mini")
    body.setdefault("messages", [{"role": "user", "content": "Hi"}])
    return json.dumps({"custom_id": custom_id, "method": "POST", "url": url, "body": body})


def test_a_request_line_is_a_row_keyed_on_its_custom_id():
    row = parse_request_line(request("req-9", max_tokens=5), line=4)
    assert row["custom_id"] == "req-9" and row["line"] == 4 and row["request_error"] is None
    assert json.loads(row["body"])["max_tokens"] == 5


@pytest.mark.parametrize("text, message", [
    ('{"custom_id": "a", broken', "line 3: not valid JSON (Expecting property name"),
    ('[1, 2]', "line 3: expected a JSON object, got list"),
    (json.dumps({"url": "/v1/chat/completions", "body": {}}), "line 3: no custom_id"),
    (request(custom_id=7), "line 3: custom_id 7 is not a string"),
])
def test_a_line_that_cant_be_matched_to_an_answer_is_refused_naming_it(text, message):
    with pytest.raises(UnusableLine) as refused:
        parse_request_line(text, line=3)
    assert str(refused.value).startswith(message) and refused.value.line == 3


@pytest.mark.parametrize("text, status, message", [
    (request(url="/v1/audio/speech"), 400,
     "line 3: url '/v1/audio/speech' is not supported; only /v1/chat/completions, "
     "/v1/completions, /v1/embeddings"),
    (request(url="/v1/completions"), 400,
     "line 3: url '/v1/completions': this run answers /v1/chat/completions, and a run puts "
     "every prompt through the chat template or none"),
    (request(url="/v1/embeddings"), 400,
     "line 3: url '/v1/embeddings' needs a model for engine.task embed; this run answers "
     "/v1/chat/completions"),
    (request(n=2), 400, "line 3: body.n 2: one answer per request only"),
    (request(model="gpt-5"), 404, "line 3: The model `gpt-5` does not exist."),
])
def test_a_request_that_cant_run_is_an_error_row_with_its_status(text, status, message):
    row = parse_request_line(text, line=3, served=["gpt-4o-mini", "tiny"])
    assert row["custom_id"] == "req-1"
    assert row["request_error"].startswith(message)
    assert row["error_status"] == status and row["body"] is None


def test_a_line_asks_for_one_of_the_served_names_or_gets_the_first():
    served = ["gpt-4o-mini", "tiny"]
    assert parse_request_line(request(model="tiny"), 1, served)["served_model"] == "tiny"
    line = json.dumps({"custom_id": "a", "url": "/v1/chat/completions",
                       "body": {"messages": [{"role": "user", "content": "Hi"}]}})
    assert parse_request_line(line, 1, served)["served_model"] == "gpt-4o-mini"


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
    ({"logit_bias": {}, "stop": ["\n"]},
     "body.logit_bias is not supported by this toolkit (nor stop)"),
    ({"tools": [{"type": "function", "function": {"name": "f"}}], "tool_choice": "auto"},
     "body.tool_choice 'auto' (the default with tools) is not supported"),
    ({"tools": [{"type": "function", "function": {"name": "f"}}]},
     "body.tool_choice 'auto' (the default with tools) is not supported"),
    ({"tools": [{"type": "function", "function": {"name": "f"}}],
      "tool_choice": {"type": "function", "function": {"name": "g"}}},
     "body.tool_choice names the function 'g', which is not in body.tools"),
    ({"tools": [{"type": "code_interpreter"}], "tool_choice": "required"},
     "body.tools[0] must be"),
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


@pytest.mark.parametrize("text, reasoning, content", [
    ("<think>Acme sells shoes.</think>\n\nRetail", "Acme sells shoes.", "Retail"),
    # Qwen3's chat template opens the thinking in the prompt: only the close comes back.
    ("Acme sells shoes.\n</think>\n\nRetail", "Acme sells shoes.", "Retail"),
    ("<think>Acme sells shoes, or maybe", "Acme sells shoes, or maybe", ""),  # cut off
    ("Retail", None, "Retail"),
])
def test_a_reasoning_models_thinking_is_its_own_field_as_vllm_answers_it(text, reasoning,
                                                                         content):
    line = batch_output_line("r", text, "stop", 9, 30, None, "qwen3", created=1)
    message = line["response"]["body"]["choices"][0]["message"]
    assert message["content"] == content
    assert message.get("reasoning") == reasoning
    assert ("reasoning" in message) == (reasoning is not None)


@pytest.mark.parametrize("error, status, expected", [
    ("preprocess: line 3: body.temperature must be between 0 and 2, not 5", 400,
     (400, "invalid_request_error", "temperature", "invalid_request")),
    ("preprocess: line 3: The model `gpt-5` does not exist.", 404,
     (404, "invalid_request_error", "model", "model_not_found")),
    ("truncated: the answer was cut off at max_tokens=4 ('{\"a\":'); raise "
     "sampling.max_tokens", None, (400, "invalid_request_error", "max_tokens", "truncated")),
    ("engine error: CUDA out of memory", None, (500, "server_error", None, "inference_error")),
])
def test_a_failed_line_carries_its_status_and_error_as_openais_error_file(
        error, status, expected):
    line = batch_output_line("req-3", None, None, None, None, error, "m", created=100,
                             error_status=status)
    response = line["response"]
    [body_error] = response["body"].values()
    assert (response["status_code"], body_error["type"], body_error["param"],
            body_error["code"]) == expected
    assert body_error["message"] == error.removeprefix("preprocess: ")
    assert response["request_id"]
    assert line["error"] == {"code": expected[3], "message": error}  # vLLM's field


WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "The weather in a city.",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                   "required": ["city"]}}}
CLOCK = {"type": "function", "function": {
    "name": "get_time", "parameters": {"type": "object", "properties": {
        "zone": {"enum": ["UTC", "CET"]}}, "required": ["zone"]}}}


def test_a_named_function_holds_the_answer_to_its_parameters_schema():
    body = {"messages": [{"role": "user", "content": "Weather in Oslo?"}],
            "tools": [WEATHER, CLOCK],
            "tool_choice": {"type": "function", "function": {"name": "get_weather"}}}
    messages, params = chat_request(json.dumps(body))
    schema = json.loads(params["structured_outputs"]["json"])
    assert schema["properties"] == {"city": {"type": "string"}}
    assert schema["required"] == ["city"]
    assert messages[0]["role"] == "system" and "get_weather" in messages[0]["content"]
    assert messages[1:] == body["messages"]
    call = tool_call(body)
    assert call.answer('{ "city" : "Oslo" }') == ("get_weather", '{"city": "Oslo"}')


def test_required_with_several_functions_answers_one_of_them_by_name():
    body = {"messages": [{"role": "user", "content": "x"}], "tools": [WEATHER, CLOCK],
            "tool_choice": "required"}
    call = tool_call(body)
    names = [option["properties"]["name"]["enum"] for option in call.schema["anyOf"]]
    assert names == [["get_weather"], ["get_time"]]
    assert call.answer('{"name": "get_time", "parameters": {"zone": "CET"}}') == (
        "get_time", '{"zone": "CET"}')
    with pytest.raises(ValueError, match="names none of the request's functions"):
        call.answer('{"name": "other", "parameters": {}}')


def test_tool_choice_none_is_a_plain_answer():
    body = {"messages": [{"role": "user", "content": "x"}], "tools": [WEATHER],
            "tool_choice": "none"}
    assert tool_call(body) is None
    assert chat_request(json.dumps(body))[1]["structured_outputs"] is None


def test_a_cap_on_arguments_bounds_only_what_the_schema_leaves_open():
    call = tool_call({"tools": [WEATHER, CLOCK], "tool_choice": "required"}, 16)
    weather, clock = (option["properties"]["parameters"] for option in call.schema["anyOf"])
    assert weather["properties"]["city"] == {"type": "string", "maxLength": 16}
    assert clock["properties"]["zone"] == {"enum": ["UTC", "CET"]}


def test_an_embeddings_body_is_the_text_it_embeds():
    assert embedding_request(json.dumps({"model": "m", "input": "Hi"})) == ["Hi"]
    assert embedding_request(json.dumps({"input": ["Hi", "there"],
                                         "encoding_format": "float"})) == ["Hi", "there"]
    for body, message in (
            ({"input": ["a"] * 2049}, "body.input holds 2,049 texts; at most 2,048"),
            ({"input": [1, 2, 3]}, "body.input: token arrays are not supported"),
            ({"input": ""}, "body.input must be a non-empty string or a list of them"),
            ({"input": ["a", ""]}, "body.input must be a non-empty string or a list of them"),
            ({"input": "a", "dimensions": 8}, "body.dimensions is not supported"),
            ({"input": "a", "encoding_format": "base64"}, "body.encoding_format 'base64'")):
        with pytest.raises(ValueError, match=message.replace(".", r"\.")):
            embedding_request(json.dumps(body))


def test_an_embeddings_line_of_several_texts_is_a_row_per_text():
    line = json.dumps({"custom_id": "e", "url": "/v1/embeddings",
                       "body": {"model": "m", "input": ["a", "b", "c"]}})
    rows = text_rows(parse_request_line(line, 2, ["m"], endpoint="/v1/embeddings"))
    assert [(r["custom_id"], r["input_index"], r["input_count"]) for r in rows] == [
        ("e[0]", 0, 3), ("e[1]", 1, 3), ("e[2]", 2, 3)]


def test_an_embeddings_line_in_an_embeddings_run_is_a_row():
    line = json.dumps({"custom_id": "e", "url": "/v1/embeddings",
                       "body": {"model": "m", "input": "Hi"}})
    row = parse_request_line(line, 2, ["m"], endpoint="/v1/embeddings")
    assert row["request_error"] is None and row["url"] == "/v1/embeddings"
    chat = parse_request_line(request(model="m"), 3, ["m"], endpoint="/v1/embeddings")
    assert chat["error_status"] == 400 and "this run answers /v1/embeddings" in (
        chat["request_error"])


def test_embedding_and_function_call_output_lines_have_openais_shape():
    vector = batch_output_line("e", None, None, 5, None, None, "emb", created=1,
                               url="/v1/embeddings", embeddings=[[0.5, -0.25], [1.0, 0.0]])
    assert vector["response"]["body"] == {
        "object": "list", "model": "emb",
        "data": [{"object": "embedding", "index": 0, "embedding": [0.5, -0.25]},
                 {"object": "embedding", "index": 1, "embedding": [1.0, 0.0]}],
        "usage": {"prompt_tokens": 5, "total_tokens": 5}}
    call = batch_output_line("t", '{"city": "Oslo"}', "stop", 9, 6, None, "m", created=1,
                             url="/v1/chat/completions", tool_name="get_weather")
    [choice] = call["response"]["body"]["choices"]
    assert choice["finish_reason"] == "tool_calls"
    assert choice["message"]["content"] is None
    [made] = choice["message"]["tool_calls"]
    assert made["type"] == "function" and made["id"].startswith("call_")
    assert made["function"] == {"name": "get_weather", "arguments": '{"city": "Oslo"}'}


def test_a_completions_body_is_its_prompts_as_written_and_their_params():
    assert completion_request(json.dumps({"model": "m", "prompt": "Once upon"})) == (
        ["Once upon"], {"max_tokens": 16, "temperature": None, "top_p": None, "seed": None,
                        "structured_outputs": None})  # 16: OpenAI's and vLLM's default
    prompts, params = completion_request(json.dumps(
        {"prompt": ["a", "b"], "max_tokens": 3, "temperature": 0, "seed": 1}))
    assert prompts == ["a", "b"] and (params["max_tokens"], params["seed"]) == (3, 1)
    for body, message in (
            ({"prompt": [[1, 2]]}, "body.prompt: token arrays are not supported"),
            ({"prompt": ""}, "body.prompt must be a non-empty string or a list of them"),
            ({"prompt": "a", "echo": True}, "body.echo is not supported"),
            ({"prompt": "a", "suffix": "z", "stop": ["."]}, "body.stop is not supported by "
                                                            "this toolkit (nor suffix)"),
            ({"prompt": "a", "n": 2}, "body.n 2: one answer per prompt only"),
            ({"prompt": "a", "max_tokens": 0}, "body.max_tokens must be between 1")):
        with pytest.raises(ValueError, match=message.replace(".", r"\.").replace("(", r"\(")
                           .replace(")", r"\)")):
            completion_request(json.dumps(body))


def test_a_completions_line_of_several_prompts_is_a_row_per_prompt_answered_as_choices():
    line = json.dumps({"custom_id": "c", "url": "/v1/completions",
                       "body": {"model": "m", "prompt": ["a", "b"]}})
    rows = text_rows(parse_request_line(line, 2, ["m"], endpoint="/v1/completions"))
    assert [(r["custom_id"], r["input_index"]) for r in rows] == [("c[0]", 0), ("c[1]", 1)]
    answered = batch_output_line("c", None, None, 7, 5, None, "m", created=1,
                                 url="/v1/completions",
                                 completions=[(" upon a time", "length"), (" = 4", "stop")])
    body = answered["response"]["body"]
    assert body["object"] == "text_completion" and body["id"].startswith("cmpl-")
    assert body["choices"] == [
        {"index": 0, "text": " upon a time", "logprobs": None, "finish_reason": "length"},
        {"index": 1, "text": " = 4", "logprobs": None, "finish_reason": "stop"}]
    assert body["usage"] == {"prompt_tokens": 7, "completion_tokens": 5, "total_tokens": 12}
