"""Shared fixtures: an isolated sample cache and one in-process Ray for pipeline tests."""

from __future__ import annotations

import os
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


@pytest.fixture(scope="session")
def local_ray():
    """A real Ray started in this process as ``toolkit run`` starts it, shut down at the end."""
    import ray

    from toolkit.run.ray_connection import local_logical_cpus

    if not ray.is_initialized():
        ray.init(num_cpus=local_logical_cpus(), logging_level="ERROR", include_dashboard=False)
    yield ray
    ray.shutdown()


@pytest.fixture(scope="session")
def tiny_chat_model() -> Path:
    from toolkit.samples.tiny_model import tiny_chat_model_path

    return tiny_chat_model_path()
