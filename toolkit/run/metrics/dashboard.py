"""The toolkit's Grafana dashboard (``grafana_dashboard.json``, shipped in the package).

Its panels read the metrics of :mod:`~toolkit.run.metrics.instruments` as Ray's own
Prometheus configuration stores them: each ``toolkit_*`` metric under ``ray_``, and
the ``job`` tag as ``exported_job`` (Prometheus keeps ``job`` for its scrape job,
``ray``). Variables: the data source, the job and the write id.
"""

from __future__ import annotations

import json
import os
from importlib import resources
from pathlib import Path
from typing import Any

DASHBOARD_FILE = "grafana_dashboard.json"
#: Where Ray's session provisions its Grafana dashboards (under its session folder).
RAY_DASHBOARDS_DIR = Path("metrics") / "grafana" / "dashboards"


def dashboard_json() -> dict[str, Any]:
    """The dashboard as Grafana imports it."""
    text = resources.files(__package__).joinpath(DASHBOARD_FILE).read_text(encoding="utf-8")
    return json.loads(text)


def panel_queries(dashboard: dict[str, Any]) -> list[tuple[str, str]]:
    """``(panel title, PromQL)`` of every panel's every query."""
    return [(panel["title"], target["expr"]) for panel in dashboard["panels"]
            for target in panel.get("targets", [])]


def ray_session_dir(temp_dir: str | None = None) -> Path:
    """The newest Ray session on this machine: ``<temp dir>/session_latest``
    (``RAY_TMPDIR``, else /tmp/ray, unless ``temp_dir`` names one)."""
    root = temp_dir or os.environ.get("RAY_TMPDIR") or "/tmp/ray"
    return Path(root) / "session_latest"


def write_dashboard(folder: Path) -> Path:
    """Write the dashboard into ``folder`` (made if missing); the file's path."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "toolkit_grafana_dashboard.json"  # beside Ray's *_grafana_dashboard.json
    path.write_text(json.dumps(dashboard_json(), indent=2) + "\n", encoding="utf-8")
    return path
