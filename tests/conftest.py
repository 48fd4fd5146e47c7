"""Shared fixtures: an isolated sample cache and one in-process Ray for pipeline tests."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest


@pytest.fixture(scope="session", autouse=True)
def sample_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Tiny models and samples are built once per test session, away from the user's cache.

    Set in the environment (not monkeypatched) so Ray workers started by the tests
    and CLI subprocesses see the same cache.
    """
    cache = Path(os.environ.get("TOOLKIT_TEST_CACHE_DIR") or tmp_path_factory.mktemp("cache"))
    os.environ["TOOLKIT_CACHE_DIR"] = str(cache)
    return cache


@pytest.fixture(scope="session", autouse=True)
def _away_from_the_checkout(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """The suite runs from a scratch folder, as users run from their own project.

    Whatever the toolkit writes relative to the current directory (``out/``,
    ``.toolkit/``) lands there, never in this checkout (CI checks ``git status``).
    Session-wide, so module- and session-scoped fixtures are covered too.
    """
    previous = Path.cwd()
    folder = tmp_path_factory.mktemp("users-folder")
    os.chdir(folder)
    yield folder
    os.chdir(previous)


@pytest.fixture(autouse=True)
def _own_folder_per_test(tmp_path_factory: pytest.TempPathFactory,
                         monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path_factory.mktemp("cwd"))


CHECKOUT = Path(__file__).resolve().parents[1]


def checkout_status() -> str | None:
    """``git status`` of this checkout (None outside a git checkout, e.g. an sdist)."""
    import subprocess

    if not (CHECKOUT / ".git").exists():
        return None
    return subprocess.run(["git", "status", "--porcelain", "--untracked-files=all"],
                          cwd=CHECKOUT, capture_output=True, text=True, check=True).stdout


@pytest.fixture(scope="session")
def git_status():
    """Call it before and after: the toolkit must never write into its own checkout."""
    return checkout_status


@pytest.fixture(scope="session")
def local_ray():
    """A real Ray started in this process as ``toolkit run`` starts it, shut down at the end."""
    import ray

    from toolkit.run.ray.connection import local_logical_cpus

    if not ray.is_initialized():
        ray.init(num_cpus=local_logical_cpus(), logging_level="ERROR", include_dashboard=False)
    yield ray
    ray.shutdown()


@pytest.fixture(scope="session")
def tiny_chat_model() -> Path:
    from toolkit.samples.tiny_model import tiny_chat_model_path

    return tiny_chat_model_path()
