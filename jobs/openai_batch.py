"""openai-batch: run an OpenAI Batch API request file and write the Batch API output file.

Each request line (``{"custom_id", "method", "url", "body"}``) is a row keyed on its
``custom_id``; ``body.messages`` are the row's chat messages and the body's sampling
fields (``max_tokens`` / ``max_completion_tokens``, ``temperature``, ``top_p``,
``seed``, ``response_format``) override the spec's ``sampling`` for that row. The
answer is the ``content`` column, and a finished run also writes
``<output>/_batch_output.jsonl`` in the Batch API's output format. ``body.model``
must be one of ``options.served_model_names`` (``--served-model-name``; by default
``engine.model``), and is the answer's ``model``. Requests that can't run as given
(another url, a model not served, a field the toolkit can't honour) are error rows
named by their line, with the status they are answered with (``error_status``).
"""

from __future__ import annotations

from typing import Any

from pydantic import Field

from toolkit.run.input.openai_batch import (
    BODY_COLUMN,
    REQUEST_ERROR_COLUMN,
    URL_COLUMN,
    OpenAIBatchOptions,
    chat_request,
)
from toolkit.spec.job_definition import JobDefinition
from toolkit.spec.models import JobSpec


class OpenAIBatchSpec(JobSpec):
    options: OpenAIBatchOptions = Field(default_factory=OpenAIBatchOptions,
                                        description="The served model names.")


def preprocess(row: dict[str, Any], options: OpenAIBatchOptions) -> dict[str, Any]:
    """The request's messages, and its own sampling params on top of the spec's (the
    request was checked when its file was read: one refused then fails here)."""
    if row.get(REQUEST_ERROR_COLUMN):
        raise ValueError(row[REQUEST_ERROR_COLUMN])
    try:
        messages, params = chat_request(row[BODY_COLUMN])
    except ValueError as exc:
        raise ValueError(f"line {row.get('line')}: {exc}") from None
    return {"messages": messages, "sampling_params": params}


def postprocess(row: dict[str, Any], options: OpenAIBatchOptions) -> dict[str, Any]:
    """The answer as it came (not stripped). Why it stopped is the pipeline's
    ``finish_reason`` column, which the Batch API output file reads."""
    return {"content": str(row["generated_text"])}


JOB = JobDefinition(
    name="openai-batch",
    description="Run an OpenAI Batch API request file (JSONL); write the Batch API output file.",
    spec_model=OpenAIBatchSpec,
    preprocess=preprocess,  # each request's response_format is its own structured output
    postprocess=postprocess,
    required_columns=lambda options: [BODY_COLUMN, REQUEST_ERROR_COLUMN],
    result_columns=lambda options: {"content": "string"},
    drop_columns=lambda options: [BODY_COLUMN, URL_COLUMN, REQUEST_ERROR_COLUMN],
    smoke_overrides={"engine.model": "sample:tiny-chat"},
)
