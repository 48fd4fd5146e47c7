"""The wheel holds every package of the toolkit: pyproject lists them one by one (the
built-in jobs are mapped in from the top-level folders), so a new folder must be added."""

from __future__ import annotations

import tomllib
from pathlib import Path

CHECKOUT = Path(__file__).resolve().parents[1]


def test_every_toolkit_package_is_listed_for_the_wheel():
    listed = set(tomllib.loads((CHECKOUT / "pyproject.toml").read_text())
                 ["tool"]["setuptools"]["packages"])
    on_disk = {".".join(init.parent.relative_to(CHECKOUT).parts)
               for init in (CHECKOUT / "toolkit").rglob("__init__.py")
               if "__pycache__" not in init.parts}
    assert on_disk - listed == set(), "add these to [tool.setuptools] packages in pyproject.toml"
