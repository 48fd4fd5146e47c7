"""The http engine: rows to an OpenAI-compatible server, through Ray Data LLM.

Ray Data LLM's HTTP processor (``ray.data.llm.HttpRequestProcessorConfig`` +
``build_processor``; the stage is ``HttpRequestStage`` in
``ray/llm/_internal/batch/stages/http_request_stage.py``) POSTs each row's
``payload`` to one URL from a pool of CPU actors and puts the JSON answer in
``http_response``. We build the payload from the row contract (``messages`` +
``sampling_params``) and read ``generated_text`` and the token counts back, so a
job runs here unchanged against vLLM's server, Ray Serve LLM, ``transformers serve``
or a hosted API.

How our settings and rows map onto it:

- ``base_url`` + ``/chat/completions`` is the URL; ``engine.model`` the ``model``
  sent (a ``sample:`` model is sent as the local path it is built at, which is what
  ``transformers serve`` of that path calls it).
- ``concurrency`` is the pool of request actors (fixed, or a range); each sends
  its batch's requests one after another, at most ``qps`` per second; ``max_retries``
  and ``retry_wait_s`` are the stage's own retries with exponential backoff
  (timeouts, lost connections, 408/429/502/503/504).
- Headers come from environment variables, read by :class:`EnvHeaderSession` in
  the worker that makes the requests: the values never enter the spec, the
  processor config, job.yaml or a log line.
- Error rows (``__inference_error__`` set by the pipeline's preprocess) are skipped
  by the stage and by Ray Data LLM's postprocess wrapper. A request the server
  answers with an error (a 4xx with a JSON body) becomes that row's ``error``. A
  server that stays unreachable after the retries fails the run (the stage raises;
  it has no per-row ``should_continue_on_error``): rerun to resume.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from toolkit.errors import BackendUnavailableError, SpecError
from toolkit.spec.row_contract import (
    ERROR_COLUMN,
    FINISH_REASON_COLUMN,
    GENERATED_LOGPROB_COLUMN,
    GENERATED_TEXT_COLUMN,
    MESSAGES_COLUMN,
    PROMPT_COLUMN,
    RAY_LLM_ERROR_COLUMN,
    SAMPLING_PARAMS_COLUMN,
    plain,
    row_error,
)

if TYPE_CHECKING:
    from ray.data import Dataset
    from ray.data.llm import Processor

    from toolkit.engines.http.settings import HttpSettings
    from toolkit.engines.model_source import ModelLocation

DEFAULT_MAX_RETRIES = 3
DEFAULT_RETRY_WAIT_S = 1.0
#: Seconds one request may take, queueing on the server included.
REQUEST_TIMEOUT_S = 600.0
#: Seconds the driver's reachability check waits for the server.
PREFLIGHT_TIMEOUT_S = 10.0
_PAYLOAD = "payload"
_RESPONSE = "http_response"


def chat_completions_url(base_url: str, apply_chat_template: bool = True) -> str:
    """Where rows are sent: ``/chat/completions``, or ``/completions`` for rows whose
    prompt is sent as written (``apply_chat_template: false``)."""
    return base_url.rstrip("/") + ("/chat/completions" if apply_chat_template else "/completions")


def header_values(api_key_env: str | None, headers_from_env: Mapping[str, str],
                  environ: Mapping[str, str]) -> dict[str, str]:
    """The request headers from the environment ``environ``.

    Raises:
        KeyError: naming the first environment variable that is unset or empty
            (the name only).
    """
    wanted = dict(headers_from_env)
    if api_key_env:
        wanted["Authorization"] = api_key_env
    headers = {}
    for header, variable in wanted.items():
        value = environ.get(variable)
        if not value:
            raise KeyError(variable)
        headers[header] = f"Bearer {value}" if header == "Authorization" and \
            variable == api_key_env else value
    return headers


class EnvHeaderSession:
    """The stage's ``session_factory``: an aiohttp session whose default headers are
    read from this worker's environment when it is created. Only variable names
    travel with it."""

    def __init__(self, api_key_env: str | None, headers_from_env: Mapping[str, str],
                 timeout_s: float = REQUEST_TIMEOUT_S) -> None:
        self.api_key_env = api_key_env
        self.headers_from_env = dict(headers_from_env)
        self.timeout_s = timeout_s

    def __call__(self) -> Any:
        import aiohttp

        try:
            headers = header_values(self.api_key_env, self.headers_from_env, os.environ)
        except KeyError as exc:
            raise RuntimeError(
                f"environment variable {exc.args[0]} (a request header of the http engine) "
                "is not set on this Ray worker; set it where the job runs (toolkit "
                "submit forwards it from your environment)"
            ) from None
        return aiohttp.ClientSession(headers=headers,
                                     timeout=aiohttp.ClientTimeout(total=self.timeout_s))

    def __repr__(self) -> str:  # never the values
        return (f"EnvHeaderSession(api_key_env={self.api_key_env!r}, "
                f"headers_from_env={self.headers_from_env!r})")


def check_endpoint(engine: "HttpSettings", timeout_s: float = PREFLIGHT_TIMEOUT_S) -> None:
    """On the driver: the server answers at ``{base_url}/models``, with our headers.

    Any HTTP answer counts as reachable (some servers have no /models), except 401
    and 403, which mean the key is wrong. Nothing about a header's value is shown.

    Raises:
        SpecError: a header's environment variable is unset here.
        BackendUnavailableError: no connection, or the credentials were refused.
    """
    import urllib.error
    import urllib.request

    assert engine.base_url is not None
    try:
        headers = header_values(engine.api_key_env, engine.headers_from_env, os.environ)
    except KeyError as exc:
        raise SpecError(
            f"engine: environment variable {exc.args[0]} is not set, and the http engine "
            "sends it as a request header.",
            hint=f"export {exc.args[0]}=... before the run (its value is never written "
            "or printed), or remove it from engine.api_key_env / engine.headers_from_env.",
        ) from None
    url = engine.base_url.rstrip("/") + "/models"
    request = urllib.request.Request(url, headers=headers, method="GET")
    try:
        with urllib.request.urlopen(request, timeout=timeout_s):
            return
    except urllib.error.HTTPError as exc:
        if exc.code in (401, 403):
            raise BackendUnavailableError(
                f"engine.base_url: the server at {engine.base_url} refused the credentials "
                f"(HTTP {exc.code} from {url}); no row was read.",
                hint="Check the key in the variable engine.api_key_env names.",
            ) from None
        return  # it answered: reachable
    except (urllib.error.URLError, OSError, ValueError) as exc:
        reason = getattr(exc, "reason", None) or exc
        raise BackendUnavailableError(
            f"engine.base_url: can't reach the OpenAI-compatible server at "
            f"{engine.base_url} ({reason}); no row was read.",
            hint="Start the server (e.g. vllm serve MODEL, or transformers serve MODEL), "
            "check the URL and port, and that this machine can reach it.",
        ) from None


def _structured_output_fields(constraint: Mapping[str, Any], via: str) -> dict[str, Any]:
    """A vLLM-style ``structured_outputs`` constraint as request fields."""
    constraint = {k: v for k, v in constraint.items() if v is not None}
    if not constraint or via == "none":
        return {}
    if "json" in constraint:
        schema = constraint["json"]
        constraint["json"] = json.loads(schema) if isinstance(schema, str) else schema
    if via == "vllm":
        return {"structured_outputs": constraint}
    if set(constraint) == {"json"}:
        return {"response_format": {"type": "json_schema", "json_schema": {
            "name": "output", "schema": constraint["json"], "strict": True}}}
    kind = next(iter(constraint))
    raise ValueError(
        f"the job constrains answers by {kind}, which OpenAI's response_format can't "
        "express; set engine.structured_outputs_via=vllm for a vLLM server, or =none to "
        "only check answers after they come back"
    )


def chat_payload(row: Mapping[str, Any], model: str, via: str | None,
                 chat_template_kwargs: Mapping[str, Any] | None = None,
                 apply_chat_template: bool = True) -> dict[str, Any]:
    """The chat-completions request body for one prepared row (a completions body, its
    ``prompt`` as written, where ``apply_chat_template`` is off).

    Raises:
        ValueError: the row's structured output can't be sent this way (``via``).
    """
    params = {k: v for k, v in (plain(row.get(SAMPLING_PARAMS_COLUMN)) or {}).items()
              if v is not None}
    payload: dict[str, Any] = {"model": model, "messages": plain(row[MESSAGES_COLUMN])} \
        if apply_chat_template else {"model": model, "prompt": str(row[PROMPT_COLUMN])}
    for key in ("max_tokens", "temperature", "top_p", "seed"):
        if key in params:
            payload[key] = params[key]
    payload.update(_structured_output_fields(params.get("structured_outputs") or {},
                                             via or "response_format"))
    if chat_template_kwargs and apply_chat_template:
        payload["chat_template_kwargs"] = dict(chat_template_kwargs)
    return payload


def _server_error(response: Any) -> str | None:
    """What the server said went wrong, or None for a chat completion."""
    if not isinstance(response, Mapping):
        return f"server answered {response!r}"
    choices = response.get("choices")
    if choices:
        return None
    detail = response.get("error") or response.get("detail") or response.get("message")
    if isinstance(detail, Mapping):
        detail = detail.get("message") or json.dumps(plain(detail))
    return f"server error: {detail}" if detail else \
        f"server answered without choices: {json.dumps(plain(response))[:300]}"


class PayloadBuilder:
    """The processor's preprocess: a prepared row plus its request ``payload``.

    A row that already failed keeps ``payload`` null and is skipped by the stage;
    one whose payload can't be built becomes an error row here.
    """

    def __init__(self, model: str, via: str | None,
                 chat_template_kwargs: Mapping[str, Any] | None,
                 apply_chat_template: bool = True) -> None:
        self.model, self.via = model, via
        self.chat_template_kwargs = dict(chat_template_kwargs or {})
        self.apply_chat_template = apply_chat_template

    def __call__(self, row: dict[str, Any]) -> dict[str, Any]:
        if row_error(row.get(ERROR_COLUMN)) or row_error(row.get(RAY_LLM_ERROR_COLUMN)):
            return {_PAYLOAD: None}
        try:
            return {_PAYLOAD: chat_payload(row, self.model, self.via, self.chat_template_kwargs,
                                           self.apply_chat_template)}
        except ValueError as exc:
            message = f"engine: {exc}"
            return {_PAYLOAD: None, ERROR_COLUMN: message, RAY_LLM_ERROR_COLUMN: message}


def read_response(row: dict[str, Any]) -> dict[str, Any]:
    """The processor's postprocess (good rows only): ``generated_text`` and token counts
    from the server's answer, or the server's error as the row's ``error``."""
    out = {k: v for k, v in row.items() if k not in (_PAYLOAD, _RESPONSE)}
    response = plain(row.get(_RESPONSE))
    error = _server_error(response)
    if error is not None:
        return {**out, GENERATED_TEXT_COLUMN: None, "num_input_tokens": None,
                "num_generated_tokens": None, FINISH_REASON_COLUMN: None,
                GENERATED_LOGPROB_COLUMN: None, ERROR_COLUMN: error, RAY_LLM_ERROR_COLUMN: error}
    choice = response["choices"][0] or {}
    message = choice.get("message") or {}
    usage = response.get("usage") or {}
    # A completion's answer is its choice's text; a chat completion's, its message.
    text = choice["text"] if isinstance(choice.get("text"), str) else message.get("content")
    return {**out, GENERATED_TEXT_COLUMN: text or "",
            "num_input_tokens": usage.get("prompt_tokens"),
            "num_generated_tokens": usage.get("completion_tokens"),
            FINISH_REASON_COLUMN: choice.get("finish_reason"),
            GENERATED_LOGPROB_COLUMN: _answer_logprob(choice.get("logprobs"))}


def _answer_logprob(logprobs: Any) -> float | None:
    """The answer's summed token log-probabilities, when the server sent them
    (``choices[0].logprobs.content[].logprob``); None when it did not."""
    content = logprobs.get("content") if isinstance(logprobs, Mapping) else None
    if not content:
        return None
    try:
        return float(sum(float(token["logprob"]) for token in content))
    except (KeyError, TypeError, ValueError):
        return None


def served_model_name(engine: "HttpSettings", model: "ModelLocation | None" = None) -> str:
    """The ``model`` a request names: ``engine.model``, or a sample model's local path
    (``model``: where preflight found it)."""
    if engine.model.startswith("sample:"):
        from toolkit.engines.model_source import model_location

        return model_location(model or engine.model).path()
    return engine.model


def build_http_processor(engine: "HttpSettings", model: "ModelLocation | None" = None
                         ) -> "Processor":
    """A Ray Data LLM HTTP processor for ``engine`` (kind http); apply it with ``processor(ds)``."""
    from ray.data.llm import HttpRequestProcessorConfig, build_processor

    assert engine.base_url is not None
    low, high = engine.pool_size
    config = HttpRequestProcessorConfig(
        url=chat_completions_url(engine.base_url, engine.apply_chat_template),
        batch_size=engine.batch_size,
        concurrency=(low, high),
        qps=engine.qps,
        max_retries=DEFAULT_MAX_RETRIES if engine.max_retries is None else engine.max_retries,
        base_retry_wait_time_in_s=engine.retry_wait_s or DEFAULT_RETRY_WAIT_S,
        session_factory=EnvHeaderSession(engine.api_key_env, engine.headers_from_env),
        http_request_stage={"concurrency": (low, high), "num_cpus": engine.num_cpus},
    )
    return build_processor(
        config,
        preprocess=PayloadBuilder(served_model_name(engine, model),
                                  engine.structured_outputs_via, engine.chat_template_kwargs,
                                  engine.apply_chat_template),
        postprocess=read_response,
    )


def apply_http_engine(ds: "Dataset", engine: "HttpSettings", multimodal: bool = False,
                      model: "ModelLocation | None" = None) -> "Dataset":
    """``ds`` through the http engine. Messages go as they are (OpenAI's format), so
    multimodal rows (image_url parts) work when the server's model takes them."""
    return build_http_processor(engine, model)(ds)
