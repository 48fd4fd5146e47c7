"""Sample pictures for vision jobs, and the image helpers those jobs need.

``write_sample_images`` writes small generated pictures (a colour gradient with
one shape on it), some of them deliberately broken, so a vision pipeline can be
tried offline and its handling of bad files seen: real image folders always
hold a few truncated uploads, HTML error pages saved as ``.jpg`` and empty
files. Every file is a pure function of ``(seed, index)``.

The helpers are the ones a job applies to every row: ``decode_image`` (bytes
to a fully decoded picture, or a ``ValueError`` saying why not),
``resize_image`` and ``image_to_data_url`` (for OpenAI-format image messages),
and ``data_url_to_bytes`` (the way back, used by engines).
"""

from __future__ import annotations

import base64
import binascii
import io
import os
import pathlib
import random
import urllib.parse
from collections.abc import Sequence
from typing import TYPE_CHECKING, Literal

if TYPE_CHECKING:
    from PIL import Image

__all__ = [
    "CORRUPTION_KINDS",
    "data_url_to_bytes",
    "decode_image",
    "image_to_data_url",
    "resize_image",
    "write_sample_images",
]

# The ways a sample file is broken, assigned to corrupt files in turn.
CORRUPTION_KINDS: tuple[str, ...] = ("truncated", "not-an-image", "empty")

# Every fourth good picture is a PNG, so both common encodings pass through a pipeline.
_PNG_EVERY = 4
_JPEG_QUALITY = 90
_NOT_AN_IMAGE = b"<html><body>404 Not Found</body></html>\n"


def write_sample_images(
    directory: str | os.PathLike[str],
    count: int,
    corrupt: int = 0,
    seed: int = 0,
    size: tuple[int, int] = (64, 64),
) -> list[pathlib.Path]:
    """Write ``count`` generated pictures into ``directory``; return their paths in order.

    Files are named ``img-00000.jpg``, ``img-00001.jpg``, ...; every fourth good
    one is a PNG (``.png``). ``corrupt`` of them, at positions chosen by
    ``seed``, cannot be decoded: in turn a JPEG cut off halfway, a text file
    named ``.jpg`` and a zero-byte ``.jpg``. ``size`` is (width, height). The
    same arguments always write the same bytes. Existing files of the same
    names are overwritten; ``directory`` is created if needed.

    Raises:
        ValueError: ``count`` or ``corrupt`` is negative, ``corrupt > count``, or
            ``size`` is not two positive numbers.
    """
    if count < 0 or corrupt < 0:
        raise ValueError(f"count and corrupt must not be negative, got {count} and {corrupt}")
    if corrupt > count:
        raise ValueError(f"cannot make {corrupt} of {count} images corrupt")
    if len(size) != 2 or min(size) < 1:
        raise ValueError(f"size must be (width, height) of at least 1 pixel, got {size!r}")
    target = pathlib.Path(directory)
    target.mkdir(parents=True, exist_ok=True)
    # A private generator: the choice depends on the seed only, not on global state.
    broken = sorted(random.Random(seed).sample(range(count), corrupt))
    kind_of = {index: CORRUPTION_KINDS[k % len(CORRUPTION_KINDS)] for k, index in enumerate(broken)}
    paths = []
    for index in range(count):
        kind = kind_of.get(index)
        if kind is not None:
            name, data = f"img-{index:05d}.jpg", _corrupt_bytes(kind, seed, index, size)
        elif index % _PNG_EVERY == _PNG_EVERY - 1:
            name, data = f"img-{index:05d}.png", _encode(_picture(seed, index, size), "PNG")
        else:
            name, data = f"img-{index:05d}.jpg", _encode(_picture(seed, index, size), "JPEG")
        path = target / name
        path.write_bytes(data)
        paths.append(path)
    return paths


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
    image: "Image.Image", format: Literal["PNG", "JPEG"] = "PNG", quality: int = _JPEG_QUALITY
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
    data = _encode(image, fmt, quality=quality)
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


# --------------------------------------------------------------------------- internals


def _picture(seed: int, index: int, size: Sequence[int]) -> "Image.Image":
    """A gradient background with one filled shape: cheap, varied, and deterministic."""
    import numpy as np
    from PIL import Image, ImageDraw

    width, height = int(size[0]), int(size[1])
    rng = np.random.default_rng([seed, index])
    start, end = rng.integers(0, 256, size=(2, 3))
    angle = rng.uniform(0, 2 * np.pi)
    ys, xs = np.mgrid[0:height, 0:width].astype(np.float32)
    ramp = xs / max(width - 1, 1) * np.cos(angle) + ys / max(height - 1, 1) * np.sin(angle)
    ramp = (ramp - ramp.min()) / max(float(ramp.max() - ramp.min()), 1e-6)
    pixels = start * (1 - ramp[..., None]) + end * ramp[..., None]
    image = Image.fromarray(pixels.round().astype(np.uint8), "RGB")

    # Between a quarter and two thirds of each side, so the shape is always visible.
    half_w = int(rng.integers(width // 8, width // 3 + 1)) + 1
    half_h = int(rng.integers(height // 8, height // 3 + 1)) + 1
    cx = half_w + int(rng.integers(0, max(width - 2 * half_w, 0) + 1))
    cy = half_h + int(rng.integers(0, max(height - 2 * half_h, 0) + 1))
    box = (cx - half_w, cy - half_h, cx + half_w, cy + half_h)
    colour = tuple(int(c) for c in rng.integers(0, 256, size=3))
    draw = ImageDraw.Draw(image)
    shape = int(rng.integers(0, 3))
    if shape == 0:
        draw.ellipse(box, fill=colour)
    elif shape == 1:
        draw.rectangle(box, fill=colour)
    else:
        apex = ((box[0] + box[2]) // 2, box[1])
        draw.polygon([(box[0], box[3]), apex, (box[2], box[3])], fill=colour)
    return image


def _encode(image: "Image.Image", fmt: str, quality: int = _JPEG_QUALITY) -> bytes:
    buffer = io.BytesIO()
    if fmt == "JPEG":
        image.save(buffer, format="JPEG", quality=quality)
    else:
        image.save(buffer, format=fmt)
    return buffer.getvalue()


def _corrupt_bytes(kind: str, seed: int, index: int, size: Sequence[int]) -> bytes:
    if kind == "truncated":
        # A real JPEG cut in half: the header parses, decoding the pixels fails.
        data = _encode(_picture(seed, index, size), "JPEG")
        return data[: len(data) // 2]
    if kind == "not-an-image":
        return _NOT_AN_IMAGE
    return b""
