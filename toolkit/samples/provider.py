"""The samples a smoke run reads and loads, as the pipeline asks for them by name.

Light to import (no torch): the tiny models are built only when an engine asks.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ray.data import Dataset

DEFAULT_SAMPLE_ROWS = 1000
DEFAULT_SAMPLE_IMAGES = 50
# Results are written (and progress moves) a block at a time; a few hundred rows a
# block shows progress on a small smoke run without a task per handful of rows.
ROWS_PER_SAMPLE_BLOCK = 256
MAX_SAMPLE_BLOCKS = 64
#: Tiny models for the non-chat tasks (toolkit.samples.tiny_task_models).
TASK_MODELS = ("tiny-classifier", "tiny-encoder", "tiny-image-classifier", "tiny-tabular")


class BuiltinSamples:
    """``sample:customers``, ``sample:images``, ``sample:reviews``, ``sample:accounts``;
    ``sample:tiny-chat`` (and ``sample:tiny-chat-small``, a cascade's small model),
    ``sample:tiny-vision`` and the tiny task models."""

    input_names = ("customers", "images", "reviews", "accounts")
    model_names = ("tiny-chat", "tiny-chat-small", "tiny-vision", *TASK_MODELS)
    default_rows = {"customers": DEFAULT_SAMPLE_ROWS, "images": DEFAULT_SAMPLE_IMAGES,
                    "reviews": DEFAULT_SAMPLE_ROWS, "accounts": DEFAULT_SAMPLE_ROWS}

    def open_input(self, name: str, rows: int | None, seed: int,
                   partitions: int | None) -> "Dataset":
        import ray.data

        if name == "customers":
            from toolkit.samples.customers_datasource import CustomersDatasource

            rows = rows or DEFAULT_SAMPLE_ROWS
            blocks = partitions or max(1, min(MAX_SAMPLE_BLOCKS,
                                              math.ceil(rows / ROWS_PER_SAMPLE_BLOCK)))
            return ray.data.read_datasource(CustomersDatasource(rows, seed),
                                            override_num_blocks=blocks)
        if name == "images":
            from toolkit.run.input.reading import read_image_folder

            return read_image_folder(str(sample_images_folder(rows or DEFAULT_SAMPLE_IMAGES, seed)))
        if name in ("reviews", "accounts"):
            from toolkit.samples.table_datasource import GeneratedTableDatasource

            rows = rows or DEFAULT_SAMPLE_ROWS
            blocks = partitions or max(1, min(MAX_SAMPLE_BLOCKS,
                                              math.ceil(rows / ROWS_PER_SAMPLE_BLOCK)))
            return ray.data.read_datasource(GeneratedTableDatasource(name, rows, seed),
                                            override_num_blocks=blocks)
        raise ValueError(f"no sample input {name!r}")

    def model_path(self, name: str) -> str:
        if name in ("tiny-chat", "tiny-chat-small"):
            from toolkit.samples.tiny_model import tiny_chat_model_path

            return str(tiny_chat_model_path(shape=name))
        if name == "tiny-vision":
            from toolkit.samples.tiny_vision_model import tiny_vision_model_path

            return str(tiny_vision_model_path())
        if name in TASK_MODELS:
            from toolkit.samples.tiny_task_models import tiny_task_model_path

            return str(tiny_task_model_path(name))
        raise ValueError(f"no sample model {name!r}")


def sample_images_folder(count: int, seed: int) -> Path:
    """Generated pictures (1 in 25 deliberately broken) in the sample cache."""
    from toolkit.samples.image_files import write_sample_images
    from toolkit.samples.tiny_model import sample_cache_dir

    corrupt = max(1, count // 25)
    directory = sample_cache_dir() / "samples" / f"images-{count}-corrupt{corrupt}-seed{seed}"
    if not (directory / ".complete").exists():
        write_sample_images(directory, count=count, corrupt=corrupt, seed=seed)
        (directory / ".complete").touch()
    return directory


SAMPLES = BuiltinSamples()
