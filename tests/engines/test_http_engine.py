"""The http engine's row contract and settings, without a server: what a row sends,
how an answer comes back, and what the spec refuses."""

from __future__ import annotations

import json

import pytest

from toolkit.engines.http.chat_stage import (
    EnvHeaderSession,
    PayloadBuilder,
    build_http_processor,
    chat_payload,
    header_values,
    read_response,
)
from toolkit.errors import SpecError
from toolkit.spec.jobs.catalog import load_job
from toolkit.spec.loading import load_job_spec

MESSAGES = [{"role": "user", "content": "Hi"}]
HTTP = ["engine.kind=http", "engine.accelerator_type=none",
        "engine.base_url=http://127.0.0.1:8000/v1", "engine.model=served-model"]


def row(**params):
    return {"messages": MESSAGES, "error": None, "__inference_error__": "",
            "sampling_params": {"temperature": 0.0, "max_tokens": 16, "top_p": 1.0, **params}}


def test_a_row_becomes_a_chat_completions_request():
    assert chat_payload(row(seed=None), "m", None) == {
        "model": "m", "messages": MESSAGES, "max_tokens": 16, "temperature": 0.0, "top_p": 1.0}


def test_structured_outputs_go_as_the_server_takes_them():
    schema = {"type": "object", "properties": {"a": {"type": "integer"}}}
    as_json = row(structured_outputs={"json": json.dumps(schema)})
    assert chat_payload(as_json, "m", None)["response_format"] == {
        "type": "json_schema", "json_schema": {"name": "output", "schema": schema, "strict": True}}
    choice = row(structured_outputs={"choice": ["a", "b"]})
    assert chat_payload(choice, "m", "vllm")["structured_outputs"] == {"choice": ["a", "b"]}
    assert "structured_outputs" not in chat_payload(choice, "m", "none")
    with pytest.raises(ValueError, match="constrains answers by choice, which OpenAI's "
                                         "response_format can't express"):
        chat_payload(choice, "m", "response_format")


def test_a_row_the_server_cant_be_asked_for_is_an_error_row_and_error_rows_send_nothing():
    build = PayloadBuilder("m", "response_format", None)
    refused = build(row(structured_outputs={"regex": "[0-9]+"}))
    assert refused["payload"] is None and refused["error"].startswith("engine: the job "
                                                                      "constrains answers by regex")
    assert build({**row(), "error": "preprocess: x", "__inference_error__": "preprocess: x"}) == {
        "payload": None}


def test_answers_and_server_errors_come_back_in_the_row_contract():
    answer = {"choices": [{"message": {"content": "Hello"}}],
              "usage": {"prompt_tokens": 7, "completion_tokens": 2}}
    out = read_response({**row(), "payload": {}, "http_response": answer, "Index": 1})
    assert (out["generated_text"], out["num_input_tokens"], out["num_generated_tokens"]) == (
        "Hello", 7, 2)
    assert out["Index"] == 1 and "payload" not in out and "http_response" not in out
    failed = read_response({**row(), "http_response": {"detail": "Unexpected fields"}})
    assert failed["error"] == failed["__inference_error__"] == "server error: Unexpected fields"


def test_headers_are_read_from_the_environment_and_never_kept():
    environ = {"MY_KEY": "sk-123", "ORG": "acme"}
    assert header_values("MY_KEY", {"OpenAI-Organization": "ORG"}, environ) == {
        "Authorization": "Bearer sk-123", "OpenAI-Organization": "acme"}
    with pytest.raises(KeyError, match="MISSING"):
        header_values("MISSING", {}, environ)
    session = EnvHeaderSession("MY_KEY", {"OpenAI-Organization": "ORG"})
    assert "sk-123" not in repr(session) and "sk-123" not in repr(vars(session))


def test_the_processor_is_ray_data_llms_http_stage(local_ray):
    job = load_job("text-industry")
    spec = load_job_spec(job, overrides={"engine.concurrency": "2-3"},
                         sets=[*HTTP, "engine.qps=5", "engine.max_retries=1"])
    processor = build_http_processor(spec.engine)
    assert processor.list_stage_names() == ["HttpRequestStage"]
    stage = processor.get_stage_by_name("HttpRequestStage")
    kwargs = stage.fn_constructor_kwargs
    assert kwargs["url"] == "http://127.0.0.1:8000/v1/chat/completions"
    assert (kwargs["qps"], kwargs["max_retries"], kwargs["additional_header"]) == (5, 1, None)
    pool = stage.map_batches_kwargs["compute"]
    assert (pool.min_size, pool.max_size) == (2, 3)
    assert "num_gpus" not in stage.map_batches_kwargs


@pytest.mark.parametrize("sets, message", [
    (["engine.kind=http", "engine.accelerator_type=none"],
     "engine.base_url is required for kind: http"),
    ([*HTTP, "engine.accelerator_type=L4"], "the http engine can't honour accelerator_type L4"),
    (["engine.qps=3", "engine.base_url=http://x/v1"],
     "engine.base_url only applies to kind: http or batch-api, not vllm; remove it or "
     "set kind: http; engine.qps only applies to kind: http"),
    ([*HTTP, "engine.base_url=127.0.0.1:8000"], "is not an http:// or https:// URL"),
])
def test_settings_that_dont_fit_the_engine_are_refused_by_name(sets, message):
    with pytest.raises(SpecError, match=message):
        load_job_spec(load_job("text-industry"), sets=sets)


def test_http_settings_stay_out_of_other_specs():
    """Unset, they are left out of dumps: existing specs keep their hash (resume, names)."""
    spec = load_job_spec(load_job("text-industry"))
    assert not {"base_url", "qps", "api_key_env", "headers_from_env", "max_retries",
                "retry_wait_s", "structured_outputs_via"} & set(spec.model_dump()["engine"])


def test_submit_forwards_the_header_variables_by_name():
    from toolkit.cluster.backends.base import secret_env

    spec = load_job_spec(load_job("text-industry"), sets=[
        *HTTP, "engine.api_key_env=MY_SERVER_KEY", "engine.headers_from_env={X-Team: TEAM_ID}"])
    assert spec.engine.secret_env_names == ["MY_SERVER_KEY", "TEAM_ID"]
    environ = {"MY_SERVER_KEY": "sk-1", "TEAM_ID": "t-9", "UNRELATED": "x"}
    assert secret_env(environ, names=spec.engine.secret_env_names) == {
        "MY_SERVER_KEY": "sk-1", "TEAM_ID": "t-9"}
    assert "sk-1" not in json.dumps(spec.model_dump(mode="json"))


def test_pacing_and_credentials_can_change_on_resume_but_the_server_cannot():
    from toolkit.run.output.fingerprint import results_fingerprint

    job = load_job("text-industry")
    base = results_fingerprint(load_job_spec(job, sets=[*HTTP, "engine.qps=3"]))
    assert base == results_fingerprint(load_job_spec(job, sets=[
        *HTTP, "engine.qps=10", "engine.max_retries=8", "engine.api_key_env=OTHER_KEY"]))
    assert base != results_fingerprint(load_job_spec(job, sets=[
        *HTTP, "engine.qps=3", "engine.base_url=http://elsewhere:8000/v1"]))


def test_a_rendered_http_job_asks_for_cpu_workers_only():
    from toolkit.cluster.compute_table import worker_instance_type
    from toolkit.cluster.render import anyscale_compute_config

    spec = load_job_spec(load_job("openai-batch"), sets=HTTP)
    assert spec.engine.gpus_per_worker == 0
    [workers] = anyscale_compute_config(spec)["worker_nodes"]
    assert workers["instance_type"] == worker_instance_type(None)  # the CPU worker type
