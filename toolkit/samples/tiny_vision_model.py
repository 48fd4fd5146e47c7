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

import json
import os
import pathlib
import shutil
import tempfile
from collections.abc import Callable
from typing import Any

from toolkit.samples.tiny_model import (
    END_HEADER_TOKEN,
    EOS_TOKEN,
    MAX_POSITION_EMBEDDINGS,
    START_HEADER_TOKEN,
    sample_cache_dir,
)

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
_MARKER = ".complete"

IMAGE_TOKEN = "<image>"
# Pictures are resized and centre-cropped to IMAGE_SIZE square; 14-pixel patches
# give a 4x4 grid, so each picture costs 16 prompt tokens.
IMAGE_SIZE = 56
PATCH_SIZE = 14
IMAGE_TOKENS_PER_IMAGE = (IMAGE_SIZE // PATCH_SIZE) ** 2

# tiny_model's Llama-3 style format, with each image part rendered as the image
# token on its own line (LLaVA's convention). Image parts are recognised by
# type only: rows that went through Arrow carry every key of every part, with
# nulls where a part has none.
VISION_CHAT_TEMPLATE = (
    "{{- bos_token }}"
    "{%- for message in messages %}"
    "{{- '" + START_HEADER_TOKEN + "' + message['role'] + '" + END_HEADER_TOKEN + "\\n\\n' }}"
    "{%- if message['content'] is string %}"
    "{{- message['content'] | trim }}"
    "{%- else %}"
    "{%- for part in message['content'] %}"
    "{%- if part['type'] == 'text' %}{{- part['text'] | trim }}"
    "{%- elif part['type'] in ('image', 'image_url') %}{{- '" + IMAGE_TOKEN + "\\n' }}"
    "{%- endif %}"
    "{%- endfor %}"
    "{%- endif %}"
    "{{- '" + EOS_TOKEN + "' }}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}"
    "{{- '" + START_HEADER_TOKEN + "assistant" + END_HEADER_TOKEN + "\\n\\n' }}"
    "{%- endif %}"
)

# Random-weight scale. As in tiny_model, 0.1 (not the usual 0.02) keeps greedy
# decoding from collapsing into repeating the last prompt token, and lets the
# picture visibly change the output.
_INIT_STD = 0.1


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
    return _build_once(pathlib.Path(directory), marker, lambda staging: _build_into(staging, seed))


# --------------------------------------------------------------------------- internals


def _build_once(
    target: pathlib.Path, marker: dict[str, Any], build_into: Callable[[pathlib.Path], None]
) -> pathlib.Path:
    """Publish ``build_into``'s output at ``target`` atomically, unless a matching build is there.

    The same protocol as ``tiny_model.build_tiny_chat_model`` (stage beside the
    target, write the marker last, rename), with the marker content as a
    parameter so a chat-model directory is never mistaken for a vision one.
    """
    if _existing_build(target, marker):
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    staging = pathlib.Path(
        tempfile.mkdtemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    )
    try:
        build_into(staging)
        (staging / _MARKER).write_text(json.dumps(marker) + "\n")
        # mkdtemp makes the directory private (0700); the cache is meant to be shared.
        for path in staging.iterdir():
            path.chmod(0o644)
        staging.chmod(0o755)
        try:
            # Atomic; replaces nothing but a missing or empty directory.
            os.rename(staging, target)
        except OSError:
            if not _existing_build(target, marker):
                raise
            # Another builder published first; its result is identical.
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return target


def _existing_build(target: pathlib.Path, marker: dict[str, Any]) -> bool:
    """True if ``target`` holds a complete build matching ``marker``; False if absent or empty."""
    marker_path = target / _MARKER
    if marker_path.is_file():
        try:
            found = json.loads(marker_path.read_text())
        except (OSError, ValueError):
            found = None
        if found == marker:
            return True
        raise FileExistsError(
            f"{target} holds a model built with different settings ({found!r}, wanted "
            f"{marker!r}); delete it or choose another directory"
        )
    if target.exists() and (not target.is_dir() or any(target.iterdir())):
        raise FileExistsError(
            f"{target} exists and is not a tiny model build; delete it or choose another directory"
        )
    return False


def _build_tokenizer() -> Any:
    from tokenizers import AddedToken

    from toolkit.samples.tiny_model import _build_tokenizer as build_chat_tokenizer

    tokenizer = build_chat_tokenizer()
    # Appended after the trained vocabulary (id 1024), as a special token so
    # decoding with skip_special_tokens drops any the model happens to emit.
    image_token = AddedToken(IMAGE_TOKEN, special=True, normalized=False)
    tokenizer.add_tokens([image_token], special_tokens=True)
    tokenizer.chat_template = VISION_CHAT_TEMPLATE
    return tokenizer


def _build_processor(tokenizer: Any) -> Any:
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


def _build_model(tokenizer: Any, seed: int) -> Any:
    import torch
    from transformers import (
        CLIPVisionConfig,
        GenerationConfig,
        LlamaConfig,
        LlavaConfig,
        LlavaForConditionalGeneration,
    )

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
    text_config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=128,
        intermediate_size=256,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=1,
        max_position_embeddings=MAX_POSITION_EMBEDDINGS,
        tie_word_embeddings=True,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        initializer_range=_INIT_STD,
    )
    config = LlavaConfig(
        vision_config=vision_config,
        text_config=text_config,
        image_token_index=tokenizer.convert_tokens_to_ids(IMAGE_TOKEN),
        image_seq_length=IMAGE_TOKENS_PER_IMAGE,
        # The last vision layer (LLaVA uses the second to last): with only two
        # layers, every weight then takes part.
        vision_feature_layer=-1,
        vision_feature_select_strategy="default",
        tie_word_embeddings=True,
    )
    # fork_rng: constructing the model draws from torch's global RNG; keep the caller's intact.
    with torch.random.fork_rng(devices=[]):
        model = LlavaForConditionalGeneration(config)
    model = model.float()
    # Re-initialise from a private generator so the weights depend only on the seed.
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, parameter in model.named_parameters():
            if name.endswith("bias"):
                parameter.zero_()
            elif parameter.ndim == 1 and "norm" in name:  # LayerNorm / RMSNorm scales
                parameter.fill_(1.0)
            else:
                values = torch.randn(parameter.shape, generator=generator, dtype=torch.float32)
                parameter.copy_(values * _INIT_STD)
    model.generation_config = GenerationConfig(
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    )
    return model.eval()


def _build_into(directory: pathlib.Path, seed: int) -> None:
    from transformers.utils import logging as hf_logging

    from toolkit.samples.tiny_model import _make_tokenizer_config_portable

    tokenizer = _build_tokenizer()
    processor = _build_processor(tokenizer)
    model = _build_model(tokenizer, seed)
    # A library call should not draw a "Writing model shards" progress bar.
    bars_were_enabled = hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()
    try:
        model.save_pretrained(directory)
        # Writes the tokenizer, processor_config.json and chat_template.jinja.
        processor.save_pretrained(directory)
    finally:
        if bars_were_enabled:
            hf_logging.enable_progress_bar()
    if not (directory / "model.safetensors").is_file():
        raise RuntimeError(f"transformers did not write {directory / 'model.safetensors'}")
    _make_tokenizer_config_portable(directory / "tokenizer_config.json")
