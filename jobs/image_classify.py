"""image-classify: label each image with an image-classification model.

Each image is decoded and resized in a CPU stage ahead of the model, so GPU
workers only normalise and classify; one that doesn't decode is an error row
with the reason. Results: ``label`` and ``score``; the image bytes are not written.
"""

from __future__ import annotations

from typing import Any

from pydantic import Field

from toolkit.spec.job_definition import JobDefinition
from toolkit.spec.models import JobSpec, StrictModel
from toolkit.spec.row_contract import engine_results


class ImageOptions(StrictModel):
    image_column: str = Field(
        "jpg",
        description="Column with the image: encoded bytes, or a Hugging Face image dict "
        "with 'bytes'. Image folders provide 'bytes'.",
    )
    image_size: tuple[int, int] = Field(
        (224, 224),
        description="Width and height every image is resized to (bicubic) before the model; "
        "224x224 is what ResNet-50 and ViT-base were trained on.",
    )


class ImageClassifySpec(JobSpec):
    options: ImageOptions


def preprocess(row: dict[str, Any], options: ImageOptions) -> dict[str, Any]:
    from toolkit.engines.images import decode_image, resize_image

    value = row.get(options.image_column)
    if isinstance(value, dict):
        value = value.get("bytes")
    try:
        if value is None:
            raise ValueError("no image data")
        image = resize_image(decode_image(bytes(value)), tuple(options.image_size))
    except ValueError as exc:
        raise ValueError(f"column {options.image_column!r}: {exc}") from None
    return {"image": image.tobytes(), "image_size": list(image.size)}


def postprocess(row: dict[str, Any], options: ImageOptions) -> dict[str, Any]:
    return engine_results(row, ("label", "score"))


JOB = JobDefinition(
    name="image-classify",
    description="Label each image with an image-classification model (ResNet-50 by default).",
    spec_model=ImageClassifySpec,
    preprocess=preprocess,
    postprocess=postprocess,
    required_columns=lambda options: [options.image_column],
    result_columns=lambda options: {"label": "string", "score": "double"},
    drop_columns=lambda options: [options.image_column],
    smoke_overrides={
        "data.input": "sample:images",
        "engine.model": "sample:tiny-image-classifier",
        "engine.batch_size": 16,
        "options.image_column": "bytes",
        "options.image_size": [64, 64],
        "data.id_column": "path",
    },
)
