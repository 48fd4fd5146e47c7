"""vLLM's own `run_batch` request files through `toolkit run openai-batch --smoke`, every
output line checked against OpenAI's response types (the official `openai` package's
models) and, for function calls, the function's `parameters` schema.

The request lines below are vLLM's test data, copied as data from vllm-project/vllm
`tests/entrypoints/openai/test_run_batch.py` at commit
09cdc7d1f08fe9c4f9c1443341c6ed83bffae6a5 (INPUT_BATCH, INPUT_EMBEDDING_BATCH,
WEATHER_TOOL, INPUT_TOOL_CALLING_BATCH); lines of our own are added beside them for
what vLLM's files don't ask (a named function, tool_choice none/auto, mixed endpoints,
/v1/completions). One run per endpoint, shared by the tests of that endpoint.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import jsonschema
import pytest
from openai.types import Completion, CreateEmbeddingResponse
from openai.types.chat import ChatCompletion

CHAT_MODEL_NAME = "hmellor/tiny-random-LlamaForCausalLM"
EMBEDDING_MODEL_NAME = "intfloat/multilingual-e5-small"
REASONING_MODEL_NAME = "Qwen/Qwen3-0.6B"


def _chat(custom_id: str, system: str, model: str = CHAT_MODEL_NAME, url: str =
          "/v1/chat/completions", **extra) -> dict:
    return {"custom_id": custom_id, "method": "POST", "url": url, "body": {
        **extra, "model": model, "messages": [
            {"role": "system", "content": system}, {"role": "user", "content": "Hello world!"}],
        "max_tokens": 1000}}


# vLLM's INPUT_BATCH (its max_tokens 1000 kept: the tiny model runs them in seconds).
VLLM_CHAT_LINES = [
    _chat("request-1", "You are a helpful assistant."),
    _chat("request-2", "You are an unhelpful assistant."),
    _chat("request-3", "You are an unhelpful assistant.", model="NonExistModel"),
    _chat("request-4", "You are an unhelpful assistant.", url="/bad_url"),
    _chat("request-5", "You are an unhelpful assistant.", stream="True"),
]
VLLM_EMBEDDING_LINES = [
    {"custom_id": f"request-{i}", "method": "POST", "url": "/v1/embeddings",
     "body": {"model": model, "input": text}}
    for i, (model, text) in enumerate([
        (EMBEDDING_MODEL_NAME, "You are a helpful assistant."),
        (EMBEDDING_MODEL_NAME, "You are an unhelpful assistant."),
        (EMBEDDING_MODEL_NAME, "Hello world!"),
        ("NonExistModel", "Hello world!")], start=1)
]
WEATHER_TOOL = {
    "type": "function",
    "function": {
        "name": "get_current_weather",
        "description": "Get the current weather in a given location",
        "parameters": {
            "type": "object",
            "properties": {
                "location": {"type": "string",
                             "description": "The city and state, e.g. San Francisco, CA"},
                "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
            },
            "required": ["location"],
        },
    },
}
# vLLM's INPUT_TOOL_CALLING_BATCH (its custom_id request-1 renamed: INPUT_BATCH has one).
VLLM_TOOL_LINE = {
    "custom_id": "tool-required", "method": "POST", "url": "/v1/chat/completions",
    "body": {"model": REASONING_MODEL_NAME,
             "messages": [{"role": "user", "content": "What is the weather in San Francisco?"}],
             "tools": [WEATHER_TOOL], "tool_choice": "required", "max_tokens": 1000},
}
CLOCK_TOOL = {"type": "function", "function": {
    "name": "get_time", "description": "The time in a time zone",
    "parameters": {"type": "object", "properties": {
        "zone": {"type": "string", "enum": ["UTC", "CET"]}, "hours_ahead": {"type": "integer"}},
        "required": ["zone", "hours_ahead"]}}}


def _with_tools(custom_id: str, tools: list, tool_choice=None) -> dict:
    line = json.loads(json.dumps(VLLM_TOOL_LINE))
    line["custom_id"] = custom_id
    line["body"].update(tools=tools, max_tokens=200)
    if tool_choice is None:
        del line["body"]["tool_choice"]
    else:
        line["body"]["tool_choice"] = tool_choice
    return line


OUR_TOOL_LINES = [
    _with_tools("tool-named", [WEATHER_TOOL, CLOCK_TOOL],
                {"type": "function", "function": {"name": "get_time"}}),
    _with_tools("tool-required-of-two", [WEATHER_TOOL, CLOCK_TOOL], "required"),
    _with_tools("tool-none", [WEATHER_TOOL], "none"),
    _with_tools("tool-auto", [WEATHER_TOOL], "auto"),
    _with_tools("tool-default", [WEATHER_TOOL]),
]
TOOLS = {tool["function"]["name"]: tool["function"]["parameters"]
         for tool in (WEATHER_TOOL, CLOCK_TOOL)}


def run_file(tmp: Path, lines: list[dict], *served: str) -> dict[str, dict]:
    """`toolkit run openai-batch --smoke` of ``lines``; its output lines by custom_id."""
    requests = tmp / "requests.jsonl"
    requests.write_text("".join(json.dumps(line) + "\n" for line in lines))
    names = [arg for name in served for arg in ("--served-model-name", name)]
    done = subprocess.run(
        ["toolkit", "run", "openai-batch", "--input", str(requests), "--smoke",
         "--output", str(tmp / "out"), *names], capture_output=True, text=True, timeout=600,
        env={**os.environ, "RAY_ADDRESS": ""})
    assert done.returncode == 0, done.stdout + done.stderr
    with open(tmp / "out" / "_batch_output.jsonl", encoding="utf-8") as output:
        answered = [json.loads(line) for line in output]
    assert [line["custom_id"] for line in answered] == [line["custom_id"] for line in lines]
    return {line["custom_id"]: line for line in answered}


@pytest.fixture(scope="module")
def embeddings(tmp_path_factory) -> dict[str, dict]:
    """vLLM's embeddings file, with a chat line, a three-text line and a /v1/score line."""
    lines = [*VLLM_EMBEDDING_LINES,
             {**VLLM_CHAT_LINES[0], "custom_id": "chat-in-embeddings",
              "body": {**VLLM_CHAT_LINES[0]["body"], "model": EMBEDDING_MODEL_NAME}},
             {"custom_id": "three-texts", "method": "POST", "url": "/v1/embeddings",
              "body": {"model": EMBEDDING_MODEL_NAME, "input": ["one", "two", "Hello world!"]}},
             {"custom_id": "score", "method": "POST", "url": "/v1/score",
              "body": {"model": EMBEDDING_MODEL_NAME, "queries": "q", "documents": ["d"]}}]
    return run_file(tmp_path_factory.mktemp("embeddings"), lines, EMBEDDING_MODEL_NAME)


@pytest.fixture(scope="module")
def chat(tmp_path_factory) -> dict[str, dict]:
    """vLLM's chat and tool-calling files, with tool lines of our own."""
    return run_file(tmp_path_factory.mktemp("chat"),
                    [*VLLM_CHAT_LINES, VLLM_TOOL_LINE, *OUR_TOOL_LINES],
                    CHAT_MODEL_NAME, REASONING_MODEL_NAME)


def _completion(custom_id: str, prompt, **extra) -> dict:
    return {"custom_id": custom_id, "method": "POST", "url": "/v1/completions",
            "body": {"model": CHAT_MODEL_NAME, "prompt": prompt, **extra}}


COMPLETION_LINES = [
    _completion("once", "Once upon a time", max_tokens=12, temperature=0),
    _completion("two-prompts", ["The capital of France is", "2 + 2 ="], max_tokens=5),
    _completion("default-length", "Write a long story about a lighthouse."),
    _completion("echo", "Hello", echo=True),
    _completion("tokens", [[1, 2, 3]]),
    {**VLLM_CHAT_LINES[0], "custom_id": "chat-in-completions"},
]


@pytest.fixture(scope="module")
def completions(tmp_path_factory) -> dict[str, dict]:
    """Completions lines (OpenAI's legacy endpoint: a prompt as written, no chat
    template), with lines it refuses and a chat line."""
    return run_file(tmp_path_factory.mktemp("completions"), COMPLETION_LINES, CHAT_MODEL_NAME)


def assert_failed(line: dict, status: int, *words: str) -> None:
    """OpenAI's error-file line: its HTTP status and body.error; vLLM's error beside."""
    response = line["response"]
    assert response["status_code"] == status
    error = response["body"]["error"]
    assert set(error) == {"message", "type", "param", "code"}
    assert all(word in error["message"] for word in words), error["message"]
    assert line["error"]["code"] == error["code"]


def test_an_embeddings_file_is_answered_with_openais_embedding_bodies(embeddings):
    for custom_id in ("request-1", "request-2", "request-3"):
        line = embeddings[custom_id]
        assert line["response"]["status_code"] == 200 and line["error"] is None
        body = CreateEmbeddingResponse.model_validate(line["response"]["body"])
        assert body.object == "list" and body.model == EMBEDDING_MODEL_NAME
        [item] = body.data
        assert item.object == "embedding" and item.index == 0
        assert len(item.embedding) == 64  # sample:tiny-encoder's hidden size
        assert body.usage.prompt_tokens == body.usage.total_tokens > 0
    vectors = [embeddings[f"request-{i}"]["response"]["body"]["data"][0]["embedding"]
               for i in (1, 2, 3)]
    assert vectors[0] != vectors[1]
    # Several texts: one vector each, in input order (the third is request-3's text).
    body = CreateEmbeddingResponse.model_validate(embeddings["three-texts"]["response"]["body"])
    assert [item.index for item in body.data] == [0, 1, 2]
    assert body.data[2].embedding == pytest.approx(vectors[2])
    assert body.data[0].embedding != body.data[1].embedding
    assert body.usage.prompt_tokens > embeddings["request-3"]["response"]["body"]["usage"][
        "prompt_tokens"]


def test_embeddings_lines_that_cant_run_carry_their_status(embeddings):
    assert_failed(embeddings["request-4"], 404, "The model `NonExistModel` does not exist.")
    assert_failed(embeddings["chat-in-embeddings"], 400, "/v1/chat/completions",
                  "this run answers /v1/embeddings")
    assert_failed(embeddings["score"], 400, "url '/v1/score' is not supported")


def test_vllms_chat_lines_are_chat_completions_or_errors_with_their_status(chat):
    for custom_id in ("request-1", "request-2"):
        body = ChatCompletion.model_validate(chat[custom_id]["response"]["body"])
        assert body.model == CHAT_MODEL_NAME and body.choices[0].message.content is not None
    assert_failed(chat["request-3"], 404, "The model `NonExistModel` does not exist.")
    assert_failed(chat["request-4"], 400, "url '/bad_url' is not supported")
    assert_failed(chat["request-5"], 400, "body.stream")


@pytest.mark.parametrize("custom_id, function", [
    ("tool-required", "get_current_weather"),   # vLLM's line: one tool, required
    ("tool-named", "get_time"),
    ("tool-required-of-two", None),              # either, as the answer names it
])
def test_a_required_or_named_tool_choice_is_answered_with_a_valid_function_call(
        chat, custom_id, function):
    line = chat[custom_id]
    assert line["response"]["status_code"] == 200, line["response"]
    body = ChatCompletion.model_validate(line["response"]["body"])
    [choice] = body.choices
    assert choice.finish_reason == "tool_calls" and choice.message.content is None
    [call] = choice.message.tool_calls
    assert call.type == "function" and call.id.startswith("call_")
    assert call.function.name == (function or call.function.name)
    arguments = json.loads(call.function.arguments)
    jsonschema.validate(arguments, TOOLS[call.function.name])
    assert set(TOOLS[call.function.name]["required"]) <= set(arguments)


def test_tool_choice_none_answers_as_chat_and_auto_is_refused_by_name(chat):
    body = ChatCompletion.model_validate(chat["tool-none"]["response"]["body"])
    assert body.choices[0].message.tool_calls is None
    assert isinstance(body.choices[0].message.content, str)
    for custom_id in ("tool-auto", "tool-default"):
        assert_failed(chat[custom_id], 400, "tool_choice 'auto'", "is not supported")
        assert chat[custom_id]["response"]["body"]["error"]["param"] == "tool_choice"


def test_a_completions_file_is_answered_with_text_completions(completions):
    from transformers import AutoTokenizer

    from toolkit.samples.tiny_model import tiny_chat_model_path

    tokenizer = AutoTokenizer.from_pretrained(tiny_chat_model_path())
    for custom_id, prompts, most in (("once", ["Once upon a time"], 12),
                                     ("two-prompts", ["The capital of France is", "2 + 2 ="], 5),
                                     ("default-length", [COMPLETION_LINES[2]["body"]["prompt"]],
                                      16)):  # OpenAI's and vLLM's default max_tokens
        line = completions[custom_id]
        assert line["response"]["status_code"] == 200, line["response"]
        body = Completion.model_validate(line["response"]["body"])
        assert body.object == "text_completion" and body.model == CHAT_MODEL_NAME
        assert [choice.index for choice in body.choices] == list(range(len(prompts)))
        assert all(isinstance(choice.text, str) for choice in body.choices)
        # Each prompt as written, with the tokenizer's special tokens, as vLLM reads it.
        assert body.usage.prompt_tokens == sum(len(tokenizer(p)["input_ids"]) for p in prompts)
        assert 0 < body.usage.completion_tokens <= most * len(prompts)
        assert body.usage.total_tokens == body.usage.prompt_tokens + body.usage.completion_tokens


def test_completions_lines_that_cant_run_carry_their_status(completions):
    assert_failed(completions["echo"], 400, "body.echo is not supported")
    assert_failed(completions["tokens"], 400, "body.prompt: token arrays are not supported")
    assert_failed(completions["chat-in-completions"], 400, "this run answers /v1/completions",
                  "engine.apply_chat_template")
