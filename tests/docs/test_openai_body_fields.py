"""docs/openai-batch.md's table of body fields is the body models' fields: a field the
code accepts and the page leaves out (or the reverse) fails here, naming it."""

from __future__ import annotations

import re
from pathlib import Path

from toolkit.run.input.openai_batch.line_shapes import BODIES

PAGE = Path(__file__).resolve().parents[2] / "docs" / "openai-batch.md"
MARK = "<!-- body fields:"


def documented_fields() -> dict[str, set[str]]:
    """Endpoint -> the fields the table gives it (a cell of ``-`` gives none)."""
    lines = PAGE.read_text().splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(MARK)) + 1
    header = [cell.strip().strip("`") for cell in lines[start].strip("|").split("|")]
    endpoints = header[1:]
    fields: dict[str, set[str]] = {endpoint: set() for endpoint in endpoints}
    for line in lines[start + 2:]:
        if not line.startswith("|"):
            break
        cells = [cell.strip() for cell in line.strip("|").split("|")]
        names = re.findall(r"`([a-z_]+)`", cells[0])
        for endpoint, cell in zip(endpoints, cells[1:]):
            if cell != "-":
                fields[endpoint].update(names)
    return fields


def test_the_table_lists_each_endpoints_fields_and_no_other() -> None:
    documented = documented_fields()
    assert set(documented) == set(BODIES)
    for endpoint, model in BODIES.items():
        assert documented[endpoint] == set(model.model_fields), endpoint
