"""review-triage: label each review's sentiment, then draft a one-line reply that fits it.

Two model stages, each with its own engine section: ``stages.sentiment`` is a
Hugging Face classifier (``task: classify``, the text-classify job's model) whose
label becomes ``sentiment`` / ``sentiment_score``; the main stage, ``engine``, is a
chat model asked for a reply that thanks a happy customer or apologises to an
unhappy one. A blank review fails in the first stage: it is an error row with no
sentiment and no reply, and the chat model never sees it.
"""

from __future__ import annotations

from typing import Any

from pydantic import Field

from toolkit.spec.job_definition import JobDefinition, StageDefinition
from toolkit.spec.models import JobSpec, StrictModel


class ReviewTriageOptions(StrictModel):
    text_column: str = Field("review", description="Input column holding the review text.")
    negative_labels: list[str] = Field(
        ["NEGATIVE", "LABEL_0", "negative"],
        description="Classifier labels that mean an unhappy customer (the reply apologises); "
        "any other label gets a thank-you.",
    )


class ReviewTriageSpec(JobSpec):
    options: ReviewTriageOptions


def review_text(row: dict[str, Any], options: ReviewTriageOptions) -> str:
    text = row.get(options.text_column)
    if text is None or not str(text).strip():
        raise ValueError(f"column {options.text_column!r} is empty")
    return str(text).strip()


# -- stage 1: sentiment (task: classify) ----------------------------------------
def sentiment_inputs(row: dict[str, Any], options: ReviewTriageOptions) -> dict[str, Any]:
    return {"prompt": review_text(row, options)}


def sentiment_columns(row: dict[str, Any], options: ReviewTriageOptions) -> dict[str, Any]:
    return {"sentiment": str(row["label"]), "sentiment_score": float(row["score"])}


# -- main stage: the reply (chat) ------------------------------------------------
def reply_messages(row: dict[str, Any], options: ReviewTriageOptions) -> dict[str, Any]:
    unhappy = row["sentiment"] in options.negative_labels
    task = ("The customer is unhappy: apologise and offer to make it right."
            if unhappy else "The customer is happy: thank them warmly.")
    return {"messages": [
        {"role": "system", "content": "You answer product reviews for a shop in one short "
                                      "sentence, without greetings or sign-offs."},
        {"role": "user", "content": f"{task}\nReview: {review_text(row, options)}"},
    ]}


def reply_columns(row: dict[str, Any], options: ReviewTriageOptions) -> dict[str, Any]:
    return {"reply": " ".join(str(row["generated_text"]).split())}


JOB = JobDefinition(
    name="review-triage",
    description="Label each review's sentiment with a classifier, then draft a one-line reply "
    "that fits it (two model stages).",
    spec_model=ReviewTriageSpec,
    stages=(
        StageDefinition(
            name="sentiment",
            preprocess=sentiment_inputs,
            postprocess=sentiment_columns,
            required_columns=lambda options: [options.text_column],
            result_columns=lambda options: {"sentiment": "string", "sentiment_score": "double"},
        ),
        StageDefinition(
            name="engine",
            preprocess=reply_messages,
            postprocess=reply_columns,
            result_columns=lambda options: {"reply": "string"},
        ),
    ),
    smoke_overrides={
        "data.input": "sample:reviews",
        "stages.sentiment.model": "sample:tiny-classifier",
        "engine.model": "sample:tiny-chat",
        "sampling.max_tokens": 16,
    },
)
