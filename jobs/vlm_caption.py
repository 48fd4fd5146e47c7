"""vlm-caption: caption images with a vision-language model.

Each row's image is decoded and resized (225x225 bicubic by default) before the
model sees it; one that doesn't decode is an error row with the reason. The output
keeps the row's id and the caption, never the image bytes.
"""

from __future__ import annotations

from typing import Any

from pydantic import Field

from toolkit.spec.job_definition import JobDefinition
from toolkit.spec.models import JobSpec, StrictModel


class VlmCaptionOptions(StrictModel):
    image_column: str = Field(
        "jpg",
        description=(
            "Column with the image: encoded bytes, or a Hugging Face image dict with "
            "'bytes'. Image folders provide 'bytes'."
        ),
    )
    image_size: tuple[int, int] = Field(
        (225, 225),
        description=(
            "Width and height every image is resized to (bicubic). Smaller images mean "
            "fewer vision tokens: faster and cheaper, less detail."
        ),
    )
    prompt: str = Field(description="What to ask about each image.")


class VlmCaptionSpec(JobSpec):
    options: VlmCaptionOptions


def image_bytes(value: Any) -> bytes:
    if isinstance(value, dict):
        value = value.get("bytes")
    if value is None:
        raise ValueError("no image data")
    return bytes(value)


def preprocess(row: dict[str, Any], options: VlmCaptionOptions) -> dict[str, Any]:
    from toolkit.engines.images import decode_image, image_to_data_url, resize_image

    try:
        image = decode_image(image_bytes(row.get(options.image_column)))
    except ValueError as exc:
        raise ValueError(f"column {options.image_column!r}: {exc}") from None
    url = image_to_data_url(resize_image(image, tuple(options.image_size)))
    return {
        "messages": [
            {
                "role": "user",
                "content": [
                    {"type": "image_url", "image_url": {"url": url}},
                    {"type": "text", "text": options.prompt},
                ],
            }
        ]
    }


def postprocess(row: dict[str, Any], options: VlmCaptionOptions) -> dict[str, Any]:
    return {"generated_caption": str(row["generated_text"]).strip()}


def undecodable_images(table: Any) -> dict[str, int | float]:
    """How many rows were error rows because their image would not decode."""
    errors = [e for e in table["error"].to_pylist() if e]
    return {"undecodable_images": sum(e.startswith("preprocess: column") for e in errors)}


JOB = JobDefinition(
    name="vlm-caption",
    description="Caption images with a vision-language model (HF dataset, folder or parquet).",
    spec_model=VlmCaptionSpec,
    preprocess=preprocess,
    postprocess=postprocess,
    required_columns=lambda options: [options.image_column],
    result_columns=lambda options: {"generated_caption": "string"},
    drop_columns=lambda options: [options.image_column],
    multimodal=True,
    summary_columns=("error",),
    summarize=undecodable_images,
    smoke_overrides={
        "data.input": "sample:images",
        "engine.model": "sample:tiny-vision",
        "engine.batch_size": 16,
        "options.image_column": "bytes",
        "data.id_column": "path",
    },
)

