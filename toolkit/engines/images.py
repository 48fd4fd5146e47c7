"""Images as rows carry them: decoding bytes, resizing, and OpenAI-format data URLs.

Jobs apply these to every row (``decode_image`` then ``resize_image`` then
``image_to_data_url``); engines go back with ``data_url_to_bytes``.
``decode_image`` fails with a ``ValueError`` that says why, which the pipeline
turns into an error row.
"""

from __future__ import annotations

import base64
import binascii
import io
import urllib.parse
from typing import TYPE_CHECKING, Literal

if TYPE_CHECKING:
    from PIL import Image

JPEG_QUALITY = 90


def decode_image(data: bytes) -> "Image.Image":
    """Decode ``data`` completely and return the picture.

    The pixels are decoded here (``load()``), not lazily, so a file that is cut
    off fails now with a reason rather than later inside a model. The image
    keeps its mode (RGB, RGBA, L, P, ...); ``resize_image`` converts to RGB.

    Raises:
        ValueError: the bytes are empty, not an image format Pillow knows, corrupt
            or truncated, or too large to decode safely. The message says which.
        TypeError: ``data`` is not bytes-like (a data URL: use ``data_url_to_bytes``).
    """
    from PIL import Image, UnidentifiedImageError

    if isinstance(data, str):
        raise TypeError("decode_image takes bytes; for a data URL use data_url_to_bytes() first")
    data = bytes(data)
    if not data:
        raise ValueError("image data is empty (0 bytes)")
    try:
        # verify() checks structure and checksums (PNG CRCs) without decoding,
        # but leaves the image unusable, so the pixels come from a second open.
        with Image.open(io.BytesIO(data)) as probe:
            probe.verify()
        image = Image.open(io.BytesIO(data))
        image.load()
    except Image.DecompressionBombError as exc:
        raise ValueError(f"image is too large to decode safely: {exc}") from None
    except UnidentifiedImageError:
        raise ValueError(
            f"not a recognised image format ({len(data)} bytes starting {data[:12]!r})"
        ) from None
    except Exception as exc:  # noqa: BLE001 - Pillow's decoders raise many types for bad data
        reason = f"{type(exc).__name__}: {exc}"
        raise ValueError(f"image data is corrupt or truncated ({reason})") from None
    return image


def resize_image(image: "Image.Image", size: tuple[int, int] = (225, 225)) -> "Image.Image":
    """Return ``image`` as RGB, resized to exactly ``size`` (width, height) with bicubic filtering.

    Converting first matters: resizing a palette (``P``) picture interpolates
    palette indices, not colours.
    """
    from PIL import Image

    return image.convert("RGB").resize(tuple(size), Image.Resampling.BICUBIC)


def image_to_data_url(
    image: "Image.Image", format: Literal["PNG", "JPEG"] = "PNG", quality: int = JPEG_QUALITY
) -> str:
    """Encode ``image`` as a base64 ``data:image/png`` (or ``image/jpeg``) URL.

    This is what OpenAI-format messages carry in
    ``{"type": "image_url", "image_url": {"url": ...}}``. PNG is lossless; JPEG
    is several times smaller for photos, which matters when every row carries
    its picture through the pipeline.
    """
    fmt = format.upper()
    if fmt not in ("PNG", "JPEG"):
        raise ValueError(f"format must be 'PNG' or 'JPEG', not {format!r}")
    supported = ("RGB", "L") if fmt == "JPEG" else ("RGB", "RGBA", "L", "LA", "P", "1")
    if image.mode not in supported:
        image = image.convert("RGB")
    data = encode_image(image, fmt, quality=quality)
    return f"data:image/{fmt.lower()};base64,{base64.b64encode(data).decode('ascii')}"


def data_url_to_bytes(url: str) -> bytes:
    """The payload of a ``data:`` URL (base64 or percent-encoded).

    Raises:
        ValueError: ``url`` is not a data URL, or its base64 is invalid.
    """
    if not isinstance(url, str) or not url.startswith("data:"):
        shown = url[:40] + "..." if isinstance(url, str) and len(url) > 40 else url
        raise ValueError(f"expected a data: URL, got {shown!r}")
    header, comma, payload = url[len("data:"):].partition(",")
    if not comma:
        raise ValueError("data URL has no ',' separating its header from the data")
    if header.split(";")[-1].strip().lower() == "base64":
        try:
            return base64.b64decode(payload, validate=True)
        except binascii.Error as exc:
            raise ValueError(f"data URL has invalid base64: {exc}") from None
    return urllib.parse.unquote_to_bytes(payload)



def encode_image(image: "Image.Image", fmt: str, quality: int = JPEG_QUALITY) -> bytes:
    """``image`` as PNG or JPEG bytes."""
    buffer = io.BytesIO()
    image.save(buffer, format=fmt, **({"quality": quality} if fmt == "JPEG" else {}))
    return buffer.getvalue()
