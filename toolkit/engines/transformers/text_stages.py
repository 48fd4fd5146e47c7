"""Text classification and text embeddings on transformers (``engine.kind: transformers``).

- ``classify``: Hugging Face's ``pipeline("text-classification")`` per actor, fed the
  whole Ray batch at once (``batch_size`` = the batch), so the model is loaded once
  per actor and runs batched, on the worker's GPU when ``accelerator_type`` is set.
  Texts longer than the model's limit are truncated, as classifiers are trained.
- ``embed``: ``AutoModel`` + mean pooling over the attention mask, L2-normalised,
  one ``float32`` list per row.

Both read ``prompt`` and skip error rows; vLLM runs the same tasks through Ray
Data LLM (``toolkit.engines.vllm.task_stages``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from toolkit.engines.batch_stage import ModelStage, stage_resources, torch_device
from toolkit.spec.row_contract import TASK_CONTRACTS

if TYPE_CHECKING:
    from ray.data import Dataset

    from toolkit.spec.engine_settings import EngineSettings
    from toolkit.engines.model_source import ModelLocation


def model_max_length(model: Any, engine_kwargs: dict[str, Any]) -> int:
    """Tokens a text is truncated to: ``engine_kwargs.max_model_len``, never more than
    the model's own positions (the toolkit's default 4096 is for chat models)."""
    limit = int(getattr(model.config, "max_position_embeddings", None) or 512)
    wanted = engine_kwargs.get("max_model_len")
    return min(int(wanted), limit) if wanted else limit


class TextClassifier(ModelStage):
    """``prompt`` -> ``label``, ``score`` (the top class and its probability)."""

    input_columns = TASK_CONTRACTS["classify"].inputs
    output_columns = tuple(TASK_CONTRACTS["classify"].outputs)

    def __init__(self, model_source: "str | ModelLocation", engine_kwargs: dict[str, Any],
                 use_gpu: bool = False, num_threads: int = 1) -> None:
        from transformers import pipeline

        from toolkit.engines.model_source import model_location

        device = torch_device(use_gpu, num_threads)
        self.pipe = pipeline("text-classification", model=model_location(model_source).path(),
                             device=device, dtype=engine_kwargs.get("dtype", "auto"))
        self.max_length = model_max_length(self.pipe.model, engine_kwargs)

    def predict(self, inputs: list[tuple[Any, ...]]) -> list[dict[str, Any]]:
        texts = [str(text) for (text,) in inputs]
        results = self.pipe(texts, truncation=True, max_length=self.max_length,
                            batch_size=len(texts))
        return [{"label": str(r["label"]), "score": float(r["score"])} for r in results]


class TextEncoder(ModelStage):
    """``prompt`` -> ``embedding``: masked mean of the last hidden states, unit length;
    and ``num_input_tokens``, the tokens it read (an embeddings API's usage)."""

    input_columns = TASK_CONTRACTS["embed"].inputs
    output_columns = (*TASK_CONTRACTS["embed"].outputs, "num_input_tokens")

    def __init__(self, model_source: "str | ModelLocation", engine_kwargs: dict[str, Any],
                 use_gpu: bool = False, num_threads: int = 1) -> None:
        import torch
        from transformers import AutoModel, AutoTokenizer

        from toolkit.engines.model_source import model_location

        self.torch = torch
        self.device = torch_device(use_gpu, num_threads)
        path = model_location(model_source).path()
        self.tokenizer = AutoTokenizer.from_pretrained(path)
        self.model = AutoModel.from_pretrained(path, dtype=engine_kwargs.get("dtype", "auto"))
        self.model.to(self.device).eval()
        self.max_length = model_max_length(self.model, engine_kwargs)

    def predict(self, inputs: list[tuple[Any, ...]]) -> list[dict[str, Any]]:
        torch = self.torch
        encoded = self.tokenizer([str(text) for (text,) in inputs], padding=True, truncation=True,
                                 max_length=self.max_length, return_tensors="pt").to(self.device)
        with torch.inference_mode():
            hidden = self.model(**encoded).last_hidden_state
        mask = encoded["attention_mask"].unsqueeze(-1).to(hidden.dtype)
        pooled = (hidden * mask).sum(dim=1) / mask.sum(dim=1).clamp(min=1)
        pooled = torch.nn.functional.normalize(pooled.float(), dim=-1).cpu().numpy()
        tokens = encoded["attention_mask"].sum(dim=1).tolist()
        return [{"embedding": vector.tolist(), "num_input_tokens": int(count)}
                for vector, count in zip(pooled, tokens)]


def apply_text_stage(ds: "Dataset", engine: "EngineSettings",
                     model: "ModelLocation | None" = None) -> "Dataset":
    udf = TextClassifier if engine.task == "classify" else TextEncoder
    return ds.map_batches(
        udf,
        fn_constructor_kwargs={
            "model_source": model or engine.model, "engine_kwargs": dict(engine.engine_kwargs),
            "use_gpu": engine.accelerator_type is not None,
            "num_threads": max(1, int(engine.num_cpus)),
        },
        **stage_resources(engine),
    )
