"""engine.kind batch-api's settings: the provider's address and key (by environment
variable name, never the value), its completion window, its file limits and how
often it is polled; checked as the spec loads."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, ValidationInfo, field_validator, model_validator

from toolkit.engines.http.settings import no_credentials_in_url
from toolkit.spec.engine_settings import EngineSettings, apply_chat_template_field
from toolkit.spec.env_names import check_env_name

#: OpenAI's Batch API limits on one input file (https://platform.openai.com/docs/guides/batch):
#: "up to 50,000 requests, and can be up to 200 MB in size".
PROVIDER_MAX_REQUESTS = 50_000
PROVIDER_MAX_BYTES = 200 * 1024 * 1024


class BatchApiSettings(EngineSettings):
    # False: prompts go to /v1/completions as written, as the http engine sends them.
    apply_chat_template: bool = apply_chat_template_field()
    # Left out of dumps while unset, as the http engine's, so the two read alike.
    base_url: str | None = Field(
        None,
        exclude_if=lambda value: value is None,
        description=(
            "The provider's OpenAI API root, e.g. https://api.openai.com/v1, "
            "https://api.groq.com/openai/v1, or http://127.0.0.1:8000/v1 for toolkit "
            "serve. Files go to {base_url}/files and batches to {base_url}/batches; the run "
            "checks the provider answers before reading any row. A URL holding "
            "credentials is refused: use api_key_env."
        ),
    )
    api_key_env: str | None = Field(
        None,
        exclude_if=lambda value: value is None,
        description=(
            "name of the environment variable holding the provider's API key (e.g. "
            "OPENAI_API_KEY), read where the batches are made and never written into the "
            "spec, job.yaml, the run folder or logs."
        ),
    )
    completion_window: str = Field(
        "24h",
        pattern=r"^[1-9][0-9]*[hd]$",
        exclude_if=lambda value: value == "24h",
        description=(
            "The batches' completion_window (OpenAI takes only 24h). A batch the provider "
            "expires at the end of it keeps its finished lines; the rest are sent again."
        ),
    )
    requests_per_file: int = Field(
        PROVIDER_MAX_REQUESTS,
        gt=0,
        le=PROVIDER_MAX_REQUESTS,
        exclude_if=lambda value: value == PROVIDER_MAX_REQUESTS,
        description=(
            "Rows per provider batch (one input file, one Ray task that waits for it). "
            "The provider's limit (50,000) makes the fewest batches; fewer rows per file "
            "show progress sooner, since a batch's rows are written only once it ends."
        ),
    )
    bytes_per_file: int = Field(
        PROVIDER_MAX_BYTES,
        gt=0,
        exclude_if=lambda value: value == PROVIDER_MAX_BYTES,
        description=(
            "Bytes of one uploaded request file at most (the provider's limit: 200 MB); "
            "a task's rows that need more go as several files and batches."
        ),
    )
    poll_interval_s: float = Field(
        10.0,
        gt=0,
        exclude_if=lambda value: value == 10.0,
        description=(
            "Seconds between the first polls of a batch, grown by half each poll up to "
            "max_poll_interval_s: quick batches are seen ending soon, long ones cost few "
            "requests."
        ),
    )
    max_poll_interval_s: float = Field(
        60.0,
        gt=0,
        exclude_if=lambda value: value == 60.0,
        description="The longest wait between two polls of one batch, in seconds.",
    )
    structured_outputs_via: Literal["response_format", "none"] | None = Field(
        None,
        exclude_if=lambda value: value is None,
        description=(
            "how a job's output constraint reaches the provider: 'response_format' (unset) "
            "sends a JSON schema as OpenAI's response_format (a choice or regex constraint "
            "is refused, the API has no field for it); 'none' sends nothing and the job's "
            "postprocess only checks the answers."
        ),
    )

    @field_validator("base_url", "api_key_env")
    @classmethod
    def _a_plain_url_and_a_variable_name(cls, value: str | None,
                                         info: ValidationInfo) -> str | None:
        if value is None or info.field_name == "base_url":
            return no_credentials_in_url(value, "engine.api_key_env")
        return check_env_name(value)

    @model_validator(mode="after")
    def _a_provider_and_no_gpu(self) -> "BatchApiSettings":
        if not self.base_url or not self.base_url.startswith(("http://", "https://")):
            raise ValueError(
                "engine.base_url is required for kind: batch-api: the provider's OpenAI "
                "API root (http:// or https://), e.g. --set "
                "engine.base_url=https://api.openai.com/v1"
            )
        if self.accelerator_type is not None:
            raise ValueError(f"the batch-api engine can't honour accelerator_type "
                             f"{self.accelerator_type} (the provider holds the model; add "
                             "--accelerator none)")
        return self

    @property
    def gpus_per_worker(self) -> int:
        return 0

    @property
    def window_s(self) -> float:
        """The completion window in seconds."""
        count, unit = int(self.completion_window[:-1]), self.completion_window[-1]
        return count * (3600.0 if unit == "h" else 86400.0)

    @property
    def secret_env_names(self) -> list[str]:
        """The variable the provider's key is read from."""
        return [self.api_key_env] if self.api_key_env else []

    @property
    def headers_from_env(self) -> dict[str, Any]:
        """No extra headers (the http engine's reachability check reads them)."""
        return {}
