"""``toolkit cache show|prune|clear``: what an answer cache holds, and keeping it small."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

import click

from toolkit.cli.spec_options import default_answer_cache
from toolkit.errors import SpecError

if TYPE_CHECKING:
    from toolkit.run.answer_cache.cache_upkeep import Removed

_SIZE = re.compile(r"^(\d+(?:\.\d+)?)\s*([kmgt]?i?b?)?$")
_UNITS = {"": 1, "b": 1, "k": 1000, "m": 1000**2, "g": 1000**3, "t": 1000**4,
          "ki": 1 << 10, "mi": 1 << 20, "gi": 1 << 30, "ti": 1 << 40}

LOCATION = click.argument("location", metavar="[DIR]", required=False)


def parse_size(text: str) -> int:
    """Bytes in ``500MB``, ``10GB``, ``2GiB``, ``0``.

    Raises:
        ValueError: not such a size.
    """
    match = _SIZE.match(text.strip().lower())
    if match is None:
        raise ValueError(f"{text!r} is not a size such as 500MB, 10GB or 2GiB")
    number, unit = match.groups()
    unit = (unit or "").removesuffix("b")
    return int(float(number) * _UNITS[unit])


def format_size(size: int) -> str:
    """``1.2 GB``, ``340 kB``, ``12 bytes``."""
    for unit, scale in (("TB", 1000**4), ("GB", 1000**3), ("MB", 1000**2), ("kB", 1000)):
        if size >= scale:
            return f"{size / scale:,.1f} {unit}"
    return f"{size} bytes"


def _no_cache(location: str) -> SpecError:
    return SpecError(f"No answer cache at {location}: nothing there to show or remove.",
                     hint="Give the folder (or s3://, gs:// prefix) a run's --cache or "
                     "cache.dir named.")


@click.group("cache")
def cache_group() -> None:
    """Show what an answer cache holds, and prune or clear it (see docs/cache.md).
    DIR: the cache's folder or s3://, gs:// prefix; left out, the one --cache alone uses
    ($TOOLKIT_CACHE_DIR/answers, else ~/.cache/batch-llm-toolkit/answers).

    \b
      toolkit cache show ~/.toolkit-answers
      toolkit cache prune ~/.toolkit-answers --max-size 10GB --older-than 90d
      toolkit cache clear ~/.toolkit-answers --yes

    Only the cache's own files are removed, never anything else in the folder; a run
    using the cache meanwhile answers a removed prompt again.
    """


@cache_group.command("show")
@LOCATION
def cache_show(location: str | None) -> None:
    """Say how many answers DIR holds, in how many files and bytes, and which are damaged."""
    from toolkit.run.answer_cache.cache_upkeep import cache_contents

    location = location or default_answer_cache()

    try:
        contents = cache_contents(location)
    except FileNotFoundError:
        raise _no_cache(location) from None
    click.echo(f"{location}: {contents.answers:,} answers in {len(contents.files):,} files, "
               f"{format_size(contents.size)}.")
    if contents.files:
        click.echo(f"Oldest file written {_ago(contents.files[0].modified)}, newest "
                   f"{_ago(contents.files[-1].modified)}.")
    for damaged in contents.damaged:
        click.echo(f"Damaged: {damaged.path} ({damaged.problem}); its rows are answered "
                   "again. toolkit cache prune removes it.")


@cache_group.command("prune")
@LOCATION
@click.option("--max-size", metavar="SIZE",
              help="Remove the oldest answers until the rest take at most this much: "
              "500MB, 10GB, 2GiB.")
@click.option("--older-than", metavar="AGE",
              help="Remove answers written longer ago than this: 90d, 12h.")
def cache_prune(location: str | None, max_size: str | None, older_than: str | None) -> None:
    """Remove damaged files, answers older than --older-than, then the oldest until DIR
    fits --max-size."""
    from toolkit.cluster.estimate.markets import parse_duration
    from toolkit.run.answer_cache.cache_upkeep import prune_cache

    location = location or default_answer_cache()

    try:
        size = parse_size(max_size) if max_size is not None else None
    except ValueError as exc:
        raise SpecError(f"--max-size: {exc}.") from None
    try:
        age = parse_duration(older_than) if older_than is not None else None
    except ValueError as exc:
        raise SpecError(f"--older-than: {exc}.", hint="An age such as 90d, 12h or 30m.") from None
    try:
        removed = prune_cache(location, max_size=size, older_than_s=age)
    except FileNotFoundError:
        raise _no_cache(location) from None
    _say_removed(location, removed)


@cache_group.command("clear")
@LOCATION
@click.option("--yes", is_flag=True, help="Remove them: without it, clear only says what it "
              "would remove.")
def cache_clear(location: str | None, yes: bool) -> None:
    """Remove every answer in DIR (the cache's own files only)."""
    from toolkit.run.answer_cache.cache_upkeep import cache_contents, clear_cache

    location = location or default_answer_cache()

    try:
        if not yes:
            contents = cache_contents(location)
            click.echo(f"Would remove {contents.answers:,} answers in {len(contents.files):,} "
                       f"files, {format_size(contents.size)}, from {location}. Pass --yes "
                       "to remove them.")
            return
        removed = clear_cache(location)
    except FileNotFoundError:
        raise _no_cache(location) from None
    _say_removed(location, removed)


def _say_removed(location: str, removed: Removed) -> None:
    gone, left = removed.gone, removed.left
    click.echo(f"Removed {gone.answers:,} answers in {len(gone.files):,} files "
               f"({format_size(gone.size)}) from {location}; {left.answers:,} answers in "
               f"{len(left.files):,} files ({format_size(left.size)}) are left.")


def _ago(timestamp: float) -> str:
    import time

    from toolkit.run.progress.model import format_duration

    return f"{format_duration(max(0.0, time.time() - timestamp))} ago"
