"""A tiny random-weight LLaVA-style vision-language model, built locally in seconds.

Like ``tiny_model`` it is useless for quality but real in every way a pipeline
cares about: ``AutoProcessor`` and ``AutoModelForImageTextToText`` load it, its
chat template renders OpenAI-style ``{"type": "image"}`` / ``{"type":
"image_url"}`` / ``{"type": "text"}`` content parts, and ``generate`` on a batch
of pictures takes milliseconds on a CPU.

Why LLaVA and not Qwen2.5-VL (the family of the production vision template):
in transformers 5 every Qwen2-VL/Qwen2.5-VL processor requires a video
processor, and video processors require torchvision. Without torchvision
``Qwen2_5_VLProcessor(...)`` and ``AutoProcessor.from_pretrained`` both fail
(``VIDEO_PROCESSOR_MAPPING has no attribute '_extra_content'``), so such a
sample could not load in the CPU install. ``LlavaProcessor`` needs only a
tokenizer and a CLIP image processor, which has a Pillow backend; the
architecture (CLIP vision tower -> MLP projector -> Llama decoder) is also
served by vLLM. Engines treat both families alike: image parts in the chat
template, ``processor(text=..., images=...)``, ``generate``.

The text side reuses ``tiny_model``'s byte-level tokenizer and chat format,
plus one ``<image>`` token that the processor expands into one placeholder per
vision patch (16 for the 56x56 input here).

Layout written into the target directory::

    config.json  generation_config.json  model.safetensors
    tokenizer.json  tokenizer_config.json  processor_config.json  chat_template.jinja
    .complete    # JSON marker, written last: {"format": ..., "kind": ..., "seed": ...}
"""

from __future__ import annotations

import os
import pathlib
from typing import TYPE_CHECKING

from toolkit.samples.model_cache import build_once
from toolkit.samples.tiny_model import (
    build_tokenizer,
    chat_template,
    sample_cache_dir,
    save_tiny_model,
    seeded_model,
    tiny_llama_config,
)

if TYPE_CHECKING:
    from transformers import LlavaProcessor, PreTrainedModel, PreTrainedTokenizerFast

__all__ = [
    "IMAGE_SIZE",
    "IMAGE_TOKEN",
    "IMAGE_TOKENS_PER_IMAGE",
    "VISION_CHAT_TEMPLATE",
    "build_tiny_vision_model",
    "tiny_vision_model_path",
]

# Bump when the build changes what is written, so stale directories are detected.
_FORMAT_VERSION = 1
_KIND = "tiny-vision-llava"

IMAGE_TOKEN = "<image>"
# Pictures are resized and centre-cropped to IMAGE_SIZE square; 14-pixel patches
# give a 4x4 grid, so each picture costs 16 prompt tokens.
IMAGE_SIZE = 56
PATCH_SIZE = 14
IMAGE_TOKENS_PER_IMAGE = (IMAGE_SIZE // PATCH_SIZE) ** 2

# tiny_model's Llama-3 style format, with each image part rendered as the image
# token on its own line (LLaVA's convention).
VISION_CHAT_TEMPLATE = chat_template(IMAGE_TOKEN)


def tiny_vision_model_path(seed: int = 0) -> pathlib.Path:
    """Path of the cached tiny vision model for ``seed``, building it first if needed."""
    return build_tiny_vision_model(
        sample_cache_dir() / "models" / f"tiny-vision-seed{seed}", seed
    )


def build_tiny_vision_model(directory: str | os.PathLike[str], seed: int = 0) -> pathlib.Path:
    """Build the tiny random-weight vision-language model and its processor into ``directory``.

    Returns ``directory`` as a path. If it already holds a complete build for
    ``seed`` it is returned at once. Otherwise the model is built in a
    temporary directory beside it and renamed into place, so concurrent
    builders (say, several Ray actors on one node) never see a half-written
    model. The same seed always gives a byte-identical ``model.safetensors``.

    Raises:
        FileExistsError: ``directory`` exists and is not empty but is not a
            complete build for this seed (nothing there is deleted).
    """
    marker = {"format": _FORMAT_VERSION, "kind": _KIND, "seed": seed}
    # The "kind" key keeps a chat-model directory from being taken for a vision one.
    return build_once(pathlib.Path(directory), marker, lambda staging: _build_into(staging, seed))


# --------------------------------------------------------------------------- internals


def _build_tokenizer() -> PreTrainedTokenizerFast:
    from tokenizers import AddedToken

    tokenizer = build_tokenizer()
    # Appended after the trained vocabulary (id 1024), as a special token so
    # decoding with skip_special_tokens drops any the model happens to emit.
    image_token = AddedToken(IMAGE_TOKEN, special=True, normalized=False)
    tokenizer.add_tokens([image_token], special_tokens=True)
    tokenizer.chat_template = VISION_CHAT_TEMPLATE
    return tokenizer


def _build_processor(tokenizer: PreTrainedTokenizerFast) -> LlavaProcessor:
    from transformers import CLIPImageProcessorPil, LlavaProcessor

    # The Pillow backend: no torchvision needed. Saved as "CLIPImageProcessor", so
    # AutoProcessor picks the torchvision backend where that is installed.
    image_processor = CLIPImageProcessorPil(
        size={"shortest_edge": IMAGE_SIZE}, crop_size={"height": IMAGE_SIZE, "width": IMAGE_SIZE}
    )
    return LlavaProcessor(
        image_processor=image_processor,
        tokenizer=tokenizer,
        patch_size=PATCH_SIZE,
        vision_feature_select_strategy="default",
        # CLIP adds a CLS token that "default" selection drops again: 16 + 1 - 1.
        num_additional_image_tokens=1,
        image_token=IMAGE_TOKEN,
        chat_template=VISION_CHAT_TEMPLATE,
    )


def _build_model(tokenizer: PreTrainedTokenizerFast, seed: int) -> PreTrainedModel:
    from transformers import CLIPVisionConfig, LlavaConfig, LlavaForConditionalGeneration

    # head_dim 64 on both towers: a size every attention kernel supports, so GPU
    # engines (vLLM) can serve the model too.
    vision_config = CLIPVisionConfig(
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=1,
        image_size=IMAGE_SIZE,
        patch_size=PATCH_SIZE,
        projection_dim=64,
    )
    config = LlavaConfig(
        vision_config=vision_config,
        text_config=tiny_llama_config(tokenizer),
        image_token_index=tokenizer.convert_tokens_to_ids(IMAGE_TOKEN),
        image_seq_length=IMAGE_TOKENS_PER_IMAGE,
        # The last vision layer (LLaVA uses the second to last): with only two
        # layers, every weight then takes part.
        vision_feature_layer=-1,
        vision_feature_select_strategy="default",
        tie_word_embeddings=True,
    )
    # As in tiny_model, the 0.1 init scale keeps greedy decoding from collapsing into
    # repeating the last prompt token, and lets the picture visibly change the output.
    return seeded_model(LlavaForConditionalGeneration, config, tokenizer, seed)


def _build_into(directory: pathlib.Path, seed: int) -> None:
    tokenizer = _build_tokenizer()
    processor = _build_processor(tokenizer)
    # The processor writes the tokenizer, processor_config.json and chat_template.jinja.
    save_tiny_model(directory, _build_model(tokenizer, seed), processor)
