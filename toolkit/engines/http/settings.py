"""engine.kind http's settings: the server's address, its key (by environment
variable name, never the value), request concurrency and retries; checked as the
spec loads."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, field_validator, model_validator

from toolkit.redaction import redact
from toolkit.spec.engine_settings import (
    EngineSettings,
    apply_chat_template_field,
    chat_template_kwargs_field,
)
from toolkit.spec.env_names import check_env_name


def no_credentials_in_url(value: str | None, instead: str) -> str | None:
    """``value``, a server's URL, unless it carries credentials (which would be written
    into the run's files); ``instead`` says where the key goes.

    Raises:
        ValueError: it does (shown redacted).
    """
    if value is not None and redact(value) != value:
        raise ValueError(
            f"{redact(value)} carries credentials in the URL, which would be written "
            "into the run's files; put the key in an environment variable and name "
            f"it in {instead} instead"
        )
    return value


class HttpSettings(EngineSettings):
    # Sent with each request (vLLM's server reads it).
    chat_template_kwargs: dict[str, Any] = chat_template_kwargs_field()
    apply_chat_template: bool = apply_chat_template_field()
    # Left out of dumps while unset, so specs keep their hash.
    base_url: str | None = Field(
        None,
        exclude_if=lambda value: value is None,
        description=(
            "The server's OpenAI API root, e.g. http://127.0.0.1:8000/v1 (vLLM, "
            "Ray Serve LLM, transformers serve) or https://api.openai.com/v1. Rows go to "
            "{base_url}/chat/completions; the run checks {base_url}/models first and stops "
            "before reading any row when the server can't be reached. A URL holding "
            "credentials (user:password@, ?api_key=...) is refused: use api_key_env."
        ),
    )
    api_key_env: str | None = Field(
        None,
        exclude_if=lambda value: value is None,
        description=(
            "name of the environment variable holding the API key, sent as "
            "'Authorization: Bearer ...' (e.g. OPENAI_API_KEY). The key itself is read "
            "where the requests are made and never written into the spec, job.yaml or logs; "
            "a value that looks like a key rather than a name is refused."
        ),
    )
    headers_from_env: dict[str, str] = Field(
        default_factory=dict,
        exclude_if=lambda value: not value,
        description=(
            "extra request headers, each read from an environment variable at "
            "run time: {Header-Name: ENV_VAR}, e.g. {OpenAI-Organization: OPENAI_ORG}."
        ),
    )

    @field_validator("base_url")
    @classmethod
    def _no_credentials_in_url(cls, value: str | None) -> str | None:
        return no_credentials_in_url(value, "engine.api_key_env (sent as 'Authorization: "
                                            "Bearer ...') or engine.headers_from_env")

    @field_validator("api_key_env")
    @classmethod
    def _api_key_env_is_a_name(cls, value: str | None) -> str | None:
        return None if value is None else check_env_name(value)

    @field_validator("headers_from_env")
    @classmethod
    def _header_envs_are_names(cls, value: dict[str, str]) -> dict[str, str]:
        for header, name in value.items():
            try:
                check_env_name(name)
            except ValueError as exc:
                raise ValueError(f"header {header!r}: {exc}") from None
        return value
    qps: int | None = Field(
        None,
        gt=0,
        exclude_if=lambda value: value is None,
        description=(
            "requests per second each engine worker may send (the server's "
            "rate limit divided by engine.concurrency). Unset: as fast as answers come."
        ),
    )
    max_retries: int | None = Field(
        None,
        ge=0,
        exclude_if=lambda value: value is None,
        description=(
            "retries of a request that timed out, lost its connection or got "
            "429/408/502/503/504 (unset: 3), with exponential backoff from retry_wait_s. "
            "More retries ride out a busy server; a server that stays down fails the run "
            "(rerun to resume) once they are spent."
        ),
    )
    retry_wait_s: float | None = Field(
        None,
        gt=0,
        exclude_if=lambda value: value is None,
        description="seconds before the first retry, doubled on each next one "
        "(unset: 1).",
    )
    structured_outputs_via: Literal["response_format", "vllm", "none"] | None = Field(
        None,
        exclude_if=lambda value: value is None,
        description=(
            "how a job's output constraint reaches the server. "
            "'response_format' (unset): a JSON schema as OpenAI's response_format "
            "(OpenAI, vLLM and most servers); a choice or regex constraint is refused, "
            "since the OpenAI API has no field for it. 'vllm': every constraint (choice, "
            "regex, json) as vLLM's structured_outputs request field, for a vLLM server. "
            "'none': nothing is sent and the job's postprocess only checks answers (an "
            "answer off the list becomes an error row), for servers that take neither "
            "(transformers serve)."
        ),
    )

    @model_validator(mode="after")
    def _a_server_and_no_gpu(self) -> "HttpSettings":
        if not self.base_url:
            raise ValueError(
                "engine.base_url is required for kind: http: the server's OpenAI API root, "
                "e.g. --set engine.base_url=http://127.0.0.1:8000/v1"
            )
        if not self.base_url.startswith(("http://", "https://")):
            raise ValueError(f"engine.base_url: {self.base_url!r} is not an http:// or "
                             "https:// URL")
        refused = []
        if self.accelerator_type is not None:
            refused.append(f"accelerator_type {self.accelerator_type} (the server holds the "
                           "model; add --accelerator none)")
        if any(k in self.engine_kwargs for k in ("tensor_parallel_size", "pipeline_parallel_size")):
            refused.append("engine_kwargs.tensor_parallel_size / pipeline_parallel_size "
                           "(the server decides its own parallelism)")
        if refused:
            raise ValueError("the http engine can't honour " + " or ".join(refused))
        return self

    @property
    def gpus_per_worker(self) -> int:
        return 0

    @property
    def secret_env_names(self) -> list[str]:
        """The variables request headers are read from."""
        return [name for name in (self.api_key_env, *self.headers_from_env.values()) if name]
