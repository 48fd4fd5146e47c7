"""Image classification on transformers (``engine.task: image-classify``).

The job's preprocess (a CPU ``map`` ahead of this stage) decodes and resizes each
picture and hands over raw RGB bytes plus their size, so this stage, on the GPU
worker when ``accelerator_type`` is set, only normalises (the model's own
``image_mean``/``image_std`` from ``preprocessor_config.json``) and runs
``AutoModelForImageClassification`` on the whole batch: the GPU never waits on
JPEG decoding. Output: ``label`` (``id2label`` of the top class) and ``score``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from toolkit.engines.batch_stage import ModelStage, stage_resources, torch_device
from toolkit.spec.row_contract import TASK_CONTRACTS

if TYPE_CHECKING:
    from ray.data import Dataset

    from toolkit.spec.engine_settings import EngineSettings
    from toolkit.engines.model_source import ModelLocation

_IMAGENET_MEAN, _IMAGENET_STD = [0.485, 0.456, 0.406], [0.229, 0.224, 0.225]


class ImageClassifier(ModelStage):
    """``image`` (raw RGB bytes) + ``image_size`` -> ``label``, ``score``."""

    input_columns = TASK_CONTRACTS["image-classify"].inputs
    output_columns = tuple(TASK_CONTRACTS["image-classify"].outputs)

    def __init__(self, model_source: "str | ModelLocation", engine_kwargs: dict[str, Any],
                 use_gpu: bool = False, num_threads: int = 1) -> None:
        import torch
        from transformers import AutoModelForImageClassification
        from transformers.image_processing_base import ImageProcessingMixin

        from toolkit.engines.model_source import model_location

        self.torch = torch
        self.device = torch_device(use_gpu, num_threads)
        path = model_location(model_source).path()
        self.model = AutoModelForImageClassification.from_pretrained(
            path, dtype=engine_kwargs.get("dtype", "auto"))
        self.model.to(self.device).eval()
        try:  # Only the numbers: the processor classes may want torchvision.
            settings = ImageProcessingMixin.get_image_processor_dict(path)[0]
        except Exception:  # noqa: BLE001 - no preprocessor config: ImageNet's statistics
            settings = {}
        mean = settings.get("image_mean", _IMAGENET_MEAN)
        std = settings.get("image_std", _IMAGENET_STD)
        if not settings.get("do_normalize", True):
            mean, std = [0.0, 0.0, 0.0], [1.0, 1.0, 1.0]
        self.mean = torch.tensor(mean, dtype=torch.float32, device=self.device).view(1, 3, 1, 1)
        self.std = torch.tensor(std, dtype=torch.float32, device=self.device).view(1, 3, 1, 1)
        self.labels = dict(self.model.config.id2label or {})

    def predict(self, inputs: list[tuple[Any, ...]]) -> list[dict[str, Any]]:
        torch = self.torch
        pixels = np.stack([
            np.frombuffer(bytes(data), dtype=np.uint8).reshape(int(size[1]), int(size[0]), 3)
            for data, size in inputs
        ])
        x = torch.from_numpy(pixels).to(self.device).permute(0, 3, 1, 2).float() / 255.0
        x = ((x - self.mean) / self.std).to(self.model.dtype)
        with torch.inference_mode():
            probs = self.model(pixel_values=x).logits.float().softmax(dim=-1)
        scores, ids = probs.max(dim=-1)
        return [{"label": str(self.labels.get(int(i), int(i))), "score": float(s)}
                for i, s in zip(ids.tolist(), scores.tolist())]


def apply_image_stage(ds: "Dataset", engine: "EngineSettings",
                      model: "ModelLocation | None" = None) -> "Dataset":
    return ds.map_batches(
        ImageClassifier,
        fn_constructor_kwargs={
            "model_source": model or engine.model, "engine_kwargs": dict(engine.engine_kwargs),
            "use_gpu": engine.accelerator_type is not None,
            "num_threads": max(1, int(engine.num_cpus)),
        },
        **stage_resources(engine),
    )
