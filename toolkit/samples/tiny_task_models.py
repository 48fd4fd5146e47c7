"""Tiny random-weight models for the non-chat model stages, built locally in seconds.

- ``sample:tiny-classifier``: a 2-layer BERT sequence classifier (NEGATIVE/POSITIVE)
  that ``pipeline("text-classification")`` loads;
- ``sample:tiny-encoder``: the same BERT body without a head (mean-pooled embeddings);
- ``sample:tiny-image-classifier``: a 2-stage ResNet with 10 labels and a
  ``preprocessor_config.json`` (mean/std), no torchvision needed;
- ``sample:tiny-tabular``: a scikit-learn logistic regression fitted on the
  generated ``sample:accounts`` table, saved with joblib as ``model.joblib``.

Like the tiny chat model, their answers are noise; they prove the pipeline runs.
Each is published once per cache directory with :func:`build_once`.
"""

from __future__ import annotations

import json
import pathlib
from typing import Any

from toolkit.samples.model_cache import build_once
from toolkit.samples.tiny_model import build_tokenizer, reinitialise, sample_cache_dir

_FORMAT_VERSION = 3
SENTIMENT_LABELS = {0: "NEGATIVE", 1: "POSITIVE"}
IMAGE_LABELS = {i: name for i, name in enumerate(
    ("cat", "dog", "car", "tree", "house", "boat", "bird", "flower", "chair", "cup"))}
#: The generated table's feature columns, in the order the tabular model reads them.
TABLE_FEATURES = ("age", "income", "tenure_months", "visits")
TABULAR_MODEL_FILE = "model.joblib"


def tiny_task_model_path(name: str, seed: int = 0) -> pathlib.Path:
    """The cached tiny model ``name`` (``tiny-classifier``, ...), built first if needed."""
    builders = {
        "tiny-classifier": lambda d: _build_text_model(d, seed, head=True),
        "tiny-encoder": lambda d: _build_text_model(d, seed, head=False),
        "tiny-image-classifier": lambda d: _build_image_classifier(d, seed),
        "tiny-tabular": lambda d: _build_tabular(d, seed),
    }
    if name not in builders:
        raise ValueError(f"no tiny task model {name!r}")
    marker = {"format": _FORMAT_VERSION, "kind": name, "seed": seed}
    target = sample_cache_dir() / "models" / f"{name}-seed{seed}"
    # An older toolkit's build of the same model is replaced, not refused: the cache is ours.
    return build_once(target, marker, lambda staging: _quietly(builders[name], staging),
                      replace_older_formats=True)


def _quietly(build: Any, directory: pathlib.Path) -> None:
    """A library call should not draw transformers' "Writing model shards" bar."""
    from transformers.utils import logging as hf_logging

    enabled = hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()
    try:
        build(directory)
    finally:
        if enabled:
            hf_logging.enable_progress_bar()


def _bert_config(tokenizer: Any, **extra: Any) -> Any:
    from transformers import BertConfig

    # head_dim 64 / 2 = 32: the smallest vLLM's CPU attention runs (16 is refused).
    return BertConfig(
        vocab_size=len(tokenizer), hidden_size=64, num_hidden_layers=2, num_attention_heads=2,
        intermediate_size=64, max_position_embeddings=512, type_vocab_size=1,
        pad_token_id=tokenizer.pad_token_id, **extra,
    )


def _build_text_model(directory: pathlib.Path, seed: int, head: bool) -> None:
    import torch
    from transformers import BertForSequenceClassification, BertModel

    tokenizer = build_tokenizer()
    tokenizer.padding_side = "right"
    tokenizer.model_max_length = 512
    if head:
        config = _bert_config(tokenizer, id2label=SENTIMENT_LABELS,
                              label2id={v: k for k, v in SENTIMENT_LABELS.items()})
        model_class: Any = BertForSequenceClassification
    else:
        config = _bert_config(tokenizer)
        model_class = BertModel
    with torch.random.fork_rng(devices=[]):
        model = model_class(config).float()
    reinitialise(model, seed)
    model.save_pretrained(directory)
    tokenizer.save_pretrained(directory)


def _build_image_classifier(directory: pathlib.Path, seed: int) -> None:
    import torch
    from transformers import ResNetConfig, ResNetForImageClassification

    config = ResNetConfig(
        embedding_size=8, hidden_sizes=[8, 16], depths=[1, 1], layer_type="basic",
        id2label=IMAGE_LABELS, label2id={v: k for k, v in IMAGE_LABELS.items()},
    )
    with torch.random.fork_rng(devices=[]):
        model = ResNetForImageClassification(config).float()
    reinitialise(model, seed, std=0.05)
    model.eval().save_pretrained(directory)
    # What the engine reads to normalise pixels (ImageNet's mean and std, as ResNet-50's).
    (directory / "preprocessor_config.json").write_text(json.dumps({
        "image_processor_type": "ConvNextImageProcessor", "do_normalize": True,
        "image_mean": [0.485, 0.456, 0.406], "image_std": [0.229, 0.224, 0.225],
        "do_rescale": True, "rescale_factor": 1 / 255, "size": {"shortest_edge": 224},
    }, indent=2) + "\n")


def sample_table(rows: int, seed: int) -> Any:
    """The generated ``sample:accounts`` table: ``account_id``, the features, ``churned``.

    One row in 50 lacks a feature (null ``income``), which the tabular job turns
    into an error row.
    """
    import numpy as np
    import pyarrow as pa

    rng = np.random.default_rng(seed)
    age = rng.integers(18, 80, rows).astype(float)
    income = rng.normal(60_000, 20_000, rows).round(2)
    tenure = rng.integers(0, 120, rows).astype(float)
    visits = rng.poisson(5, rows).astype(float)
    churned = (visits < 3) | (tenure < 6)
    income_column = [None if i % 50 == 49 else float(v) for i, v in enumerate(income)]
    return pa.table({
        "account_id": pa.array(range(1, rows + 1), pa.int64()),
        "age": age, "income": pa.array(income_column, pa.float64()),
        "tenure_months": tenure, "visits": visits, "churned": churned,
    })


def _build_tabular(directory: pathlib.Path, seed: int) -> None:
    import joblib
    import numpy as np
    from sklearn.linear_model import LogisticRegression
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    table = sample_table(500, seed + 1).to_pandas().dropna()
    features = np.asarray(table[list(TABLE_FEATURES)], dtype=float)
    labels = np.where(table["churned"], "churn", "stay")
    model = make_pipeline(StandardScaler(), LogisticRegression()).fit(features, labels)
    joblib.dump(model, directory / TABULAR_MODEL_FILE)


_REVIEW_OPENINGS = ("I loved", "I hated", "Honestly,", "Not sure about", "Five stars for",
                    "Returned", "Would buy again:", "Disappointed by")
_REVIEW_THINGS = ("the blender", "these headphones", "the desk lamp", "this backpack",
                  "the coffee grinder", "the running shoes", "this phone case", "the kettle")
_REVIEW_ENDINGS = ("Works as described.", "Broke after a week.", "Great value.",
                   "Shipping was slow.", "Exactly what I needed.", "Too noisy.")


def sample_reviews(rows: int, seed: int) -> Any:
    """The generated ``sample:reviews`` table: ``review_id``, ``review``, ``stars``.

    One review in 25 is blank, which text jobs turn into an error row; one in 100 is
    far longer than a BERT-sized model reads (it must be truncated, not fail).
    """
    import numpy as np
    import pyarrow as pa

    rng = np.random.default_rng(seed)
    texts = []
    for i in range(rows):
        if i % 25 == 24:
            texts.append("")
            continue
        if i % 100 == 12:
            texts.append("I kept using this every day and here is everything about it. " * 60)
            continue
        texts.append(" ".join((_REVIEW_OPENINGS[rng.integers(len(_REVIEW_OPENINGS))],
                               _REVIEW_THINGS[rng.integers(len(_REVIEW_THINGS))] + ".",
                               _REVIEW_ENDINGS[rng.integers(len(_REVIEW_ENDINGS))])))
    return pa.table({
        "review_id": pa.array(range(1, rows + 1), pa.int64()),
        "review": pa.array(texts, pa.string()),
        "stars": pa.array(rng.integers(1, 6, rows), pa.int64()),
    })
