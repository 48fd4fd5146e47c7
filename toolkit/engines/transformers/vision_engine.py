"""The transformers engine for chats with pictures: the text engine's row contract, plus images.

Rows carry OpenAI-format ``messages`` whose content parts may be images:

- ``{"type": "image_url", "image_url": {"url": "data:image/png;base64,..."}}``
- ``{"type": "image", "image": <bytes | data URL | {"bytes": ...}>}``

and ``sampling_params``; the engine adds ``generated_text``. As in the text
engine, rows arriving with an ``error`` are skipped, prompts longer than
``max_model_len`` become error rows, one ``generate`` call serves every row of
a batch sharing sampling params, and a failing batch is retried row by row.
Additionally a row whose picture can't be decoded (truncated upload, HTML page
saved as .jpg, remote URL) becomes an error row naming the part and the reason.

Pictures are decoded here, per row, rather than by the processor's chat
template (``apply_chat_template(tokenize=True)`` loads image parts itself):
that would fetch remote URLs from inside a batch and fail the whole batch on
its first bad picture, while decoding per row makes each bad picture only its
own row's error.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, NamedTuple

from toolkit.engines.transformers.chat_engine import TransformersChatEngine, apply_transformers_engine
from toolkit.spec.row_contract import prompt_too_long

if TYPE_CHECKING:
    from PIL import Image
    from ray.data import Dataset

    from toolkit.spec.engine_settings import EngineSettings
    from toolkit.engines.model_source import ModelLocation

__all__ = [
    "TransformersVisionEngine",
    "apply_transformers_vision_engine",
    "split_images",
]

IMAGE_PART_TYPES = ("image", "image_url")


def split_images(
    messages: Sequence[dict[str, Any]],
) -> tuple[list[dict[str, Any]], list["Image.Image"]]:
    """Separate OpenAI-format ``messages`` into template-ready messages and decoded RGB images.

    Each image part becomes ``{"type": "image"}`` (what Hugging Face chat
    templates render as the model's image placeholder) and its picture is
    decoded, in order of appearance. Keys that are None are dropped from every
    part: after a trip through Arrow each part carries every key any part has.

    Raises:
        ValueError: an image part has no image, a URL that isn't a ``data:`` URL,
            or bytes that don't decode; the message names the part, e.g.
            ``messages[1].content[0]: image data is empty (0 bytes)``.
    """
    template_messages: list[dict[str, Any]] = []
    images: list[Image.Image] = []
    for m, message in enumerate(messages):
        message = {key: value for key, value in message.items() if value is not None}
        content = message.get("content")
        if isinstance(content, list):
            parts = []
            for p, part in enumerate(content):
                part = {key: value for key, value in part.items() if value is not None}
                if part.get("type") in IMAGE_PART_TYPES:
                    try:
                        images.append(_decode_part(part))
                    except ValueError as exc:
                        raise ValueError(f"messages[{m}].content[{p}]: {exc}") from None
                    parts.append({"type": "image"})
                else:
                    parts.append(part)
            message["content"] = parts
        template_messages.append(message)
    return template_messages, images


class _Prompt(NamedTuple):
    text: str
    images: list["Image.Image"]


class TransformersVisionEngine(TransformersChatEngine):
    """Ray Data class UDF for image+text chats: loads processor and model once, generates per batch.

    Meant for any model ``AutoModelForImageTextToText`` loads whose processor
    takes ``processor(text=..., images=...)`` and whose chat template renders
    ``{"type": "image"}`` parts: the LLaVA family, and Qwen2-VL/Qwen2.5-VL where
    torchvision is installed (their processors need it in transformers 5). Only
    the offline ``sample:tiny-vision`` (LLaVA) is exercised by the tests.
    Grammar compilation and row-by-row failure isolation are inherited from
    the text engine.
    """

    # Image placeholders expand inside the processor, so prompts are (text, images)
    # rather than token lists: no shared-prefix cache, no answer memory.
    reuses_prompt_prefix = False

    def _prompt_key(self, prompt: Any) -> bytes | None:
        return None

    def _prompt_length(self, prompt: Any) -> int:
        return 0

    def _load(self, path: str, dtype: str) -> tuple[Any, Any]:
        from transformers import AutoModelForImageTextToText, AutoProcessor

        self.processor = AutoProcessor.from_pretrained(path)
        return self.processor.tokenizer, AutoModelForImageTextToText.from_pretrained(
            path, dtype=dtype
        )

    # -- prompts --------------------------------------------------------------
    def _prepare(self, messages: Sequence[dict[str, Any]]) -> _Prompt:
        """Render and check one row's prompt; ValueError (with the reason) makes it an error row."""
        template_messages, images = split_images(messages)
        try:
            text = self.processor.apply_chat_template(
                template_messages, add_generation_prompt=True, tokenize=False,
                **self.chat_template_kwargs,
            )
            # Processed on its own too (the batch call repeats it), for two reasons:
            # the length counts the image placeholder tokens, which only the processor
            # knows, and a row the processor rejects (image-token mismatch, aspect
            # ratio out of range) fails alone instead of failing its batch first.
            encoded = self.processor(
                text=[text], images=images or None, add_special_tokens=False
            )
        except Exception as exc:  # noqa: BLE001 - any template/processor failure is this row's
            raise ValueError(f"could not build the prompt: {type(exc).__name__}: {exc}") from None
        n_tokens = len(encoded["input_ids"][0])
        if n_tokens > self.max_model_len:
            raise ValueError(prompt_too_long(n_tokens, self.max_model_len))
        return _Prompt(text, images)

    # -- generation ---------------------------------------------------------
    def _prepare_prompts(self, conversations: list[list[dict[str, Any]]]) -> list[Any]:
        prompts: list[Any] = []
        for messages in conversations:
            try:
                prompts.append(self._prepare(messages))
            except ValueError as exc:
                prompts.append(exc)
        return prompts

    def _encode(self, prompts: Sequence[_Prompt]) -> Any:
        images = [image for prompt in prompts for image in prompt.images]
        encoded = self.processor(
            text=[prompt.text for prompt in prompts],
            images=images or None,
            padding=True,
            add_special_tokens=False,
            return_tensors="pt",
        )
        # Moves everything to the device; casts only floating tensors (pixel values)
        # to the model's dtype, so bf16 weights get bf16 pixels and ids stay ints.
        return encoded.to(self.device, dtype=self.model.dtype)


def apply_transformers_vision_engine(
    ds: "Dataset", engine: "EngineSettings", model: "ModelLocation | None" = None
) -> "Dataset":
    """Run ``TransformersVisionEngine`` over ``ds`` on ``engine.concurrency`` actors."""
    return apply_transformers_engine(ds, engine, udf=TransformersVisionEngine, model=model)


# --------------------------------------------------------------------------- internals


def _decode_part(part: dict[str, Any]) -> "Image.Image":
    """The RGB picture of one image content part; ValueError says why there is none."""
    from PIL import Image

    from toolkit.engines.images import data_url_to_bytes, decode_image

    if part["type"] == "image_url":
        source = part.get("image_url")
        # OpenAI nests the URL ({"url": ...}); some clients put the string directly.
        if isinstance(source, dict):
            source = source.get("url")
        if not isinstance(source, str):
            raise ValueError("image_url part has no url")
    else:
        source = part.get("image")
        if isinstance(source, dict):  # Hugging Face datasets' Image feature: {"bytes", "path"}
            source = source.get("bytes")
        if source is None:
            raise ValueError("image part has no image")
    if isinstance(source, Image.Image):
        return source.convert("RGB")
    if isinstance(source, str):
        if not source.startswith("data:"):
            # Fetching from inside the engine would stall a GPU batch on the network
            # and hide failures; jobs inline pictures as data URLs in preprocess.
            raise ValueError(
                f"only data: URLs and image bytes are supported, got {source[:60]!r}"
            )
        source = data_url_to_bytes(source)
    if not isinstance(source, (bytes, bytearray, memoryview)):
        raise ValueError(f"image must be bytes or a data: URL, not {type(source).__name__}")
    return decode_image(source).convert("RGB")
