"""Sample pictures for vision jobs, and the image helpers those jobs need.

``write_sample_images`` writes small generated pictures (a colour gradient with
one shape on it), some of them deliberately broken, so a vision pipeline can be
tried offline and its handling of bad files seen: real image folders always
hold a few truncated uploads, HTML error pages saved as ``.jpg`` and empty
files. Every file is a pure function of ``(seed, index)``.

The row-level image helpers (decoding, resizing, data URLs) live in
:mod:`toolkit.engines.images`.
"""

from __future__ import annotations

import os
import pathlib
import random
from collections.abc import Sequence
from typing import TYPE_CHECKING

from toolkit.engines.images import encode_image

if TYPE_CHECKING:
    from PIL import Image

__all__ = ["CORRUPTION_KINDS", "write_sample_images"]

# The ways a sample file is broken, assigned to corrupt files in turn.
CORRUPTION_KINDS: tuple[str, ...] = ("truncated", "not-an-image", "empty")

# Every fourth good picture is a PNG, so both common encodings pass through a pipeline.
_PNG_EVERY = 4
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
            name, data = f"img-{index:05d}.png", encode_image(_picture(seed, index, size), "PNG")
        else:
            name, data = f"img-{index:05d}.jpg", encode_image(_picture(seed, index, size), "JPEG")
        path = target / name
        path.write_bytes(data)
        paths.append(path)
    return paths


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


def _corrupt_bytes(kind: str, seed: int, index: int, size: Sequence[int]) -> bytes:
    if kind == "truncated":
        # A real JPEG cut in half: the header parses, decoding the pixels fails.
        data = encode_image(_picture(seed, index, size), "JPEG")
        return data[: len(data) // 2]
    if kind == "not-an-image":
        return _NOT_AN_IMAGE
    return b""
