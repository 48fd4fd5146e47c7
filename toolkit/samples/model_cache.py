"""Publish a locally built sample model into a cache directory exactly once.

Builders (say, several Ray actors on one node) may race for one target. Each
builds into a private temporary directory beside the target, writes a JSON
marker file last and renames the directory into place; the first rename wins
and the others discard their copy. A directory is reused only if its marker
equals the wanted one, so a chat-model build is never mistaken for a vision one.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any, Literal

__all__ = ["MARKER_NAME", "build_once"]

MARKER_NAME = ".complete"


def build_once(
    target: Path,
    marker: dict[str, Any],
    build_into: Callable[[Path], None],
    *,
    replace_older_formats: bool = False,
) -> Path:
    """Publish ``build_into``'s output at ``target`` atomically, unless a matching build is there.

    Args:
        target: Directory to publish at. Its parent is created if missing.
        marker: JSON-serialisable description of the build (format version, seed,
            kind...). Written last as ``target/.complete``; a later call with an
            equal marker returns at once without building.
        build_into: Writes the build into the (empty) staging directory it is given.
        replace_older_formats: Replace a build whose marker differs from ``marker``
            only in its ``"format"`` value (left by an older version of the
            builder) instead of refusing it.

    Returns:
        ``target``.

    Raises:
        FileExistsError: ``target`` exists and is not empty but holds no build
            matching ``marker`` (and none replaceable); nothing there is deleted.
    """
    state = _existing_build(target, marker, replace_older_formats)
    if state == "complete":
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent))
    retired = staging.with_name(staging.name + ".old")
    try:
        build_into(staging)
        (staging / MARKER_NAME).write_text(json.dumps(marker) + "\n")
        # mkdtemp makes the directory private (0700); the cache is meant to be shared,
        # like a download.
        for path in staging.iterdir():
            path.chmod(0o644)
        staging.chmod(0o755)
        if state == "stale" and _existing_build(target, marker, replace_older_formats) == "stale":
            # The marker proves the old directory is ours; move it aside atomically.
            with contextlib.suppress(FileNotFoundError):
                os.rename(target, retired)
        try:
            # Atomic; replaces nothing but a missing or empty directory.
            os.rename(staging, target)
        except OSError:
            if _existing_build(target, marker, replace_older_formats) != "complete":
                raise
            # Another builder published first; its result is identical.
    finally:
        shutil.rmtree(staging, ignore_errors=True)
        shutil.rmtree(retired, ignore_errors=True)
    return target


def _existing_build(
    target: Path, marker: dict[str, Any], replace_older_formats: bool
) -> Literal["complete", "stale", "absent"]:
    """Classify ``target``: matching build, replaceable older-format build, or absent/empty."""
    marker_path = target / MARKER_NAME
    if marker_path.is_file():
        try:
            found = json.loads(marker_path.read_text())
        except (OSError, ValueError):
            found = None
        if found == marker:
            return "complete"
        if replace_older_formats and _same_apart_from_format(found, marker):
            return "stale"
        raise FileExistsError(
            f"{target} holds a model built with different settings ({found!r}, wanted "
            f"{marker!r}); delete it or choose another directory"
        )
    if target.exists() and (not target.is_dir() or any(target.iterdir())):
        raise FileExistsError(
            f"{target} exists and is not a tiny model build; delete it or choose another directory"
        )
    return "absent"


def _same_apart_from_format(found: object, marker: dict[str, Any]) -> bool:
    if not isinstance(found, dict):
        return False
    return {k: v for k, v in found.items() if k != "format"} == {
        k: v for k, v in marker.items() if k != "format"
    }
