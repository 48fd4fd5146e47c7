"""The shipped Grafana dashboard and ``toolkit dashboard``: where it writes, what it reads.

That every panel shows a real run is checked against a real Prometheus in
tests/cluster/metrics/test_prometheus_figures.py.
"""

from __future__ import annotations

import json
import re

from click.testing import CliRunner

from toolkit.cli.main import main
from toolkit.run.metrics.dashboard import dashboard_json, panel_queries
from toolkit.run.metrics.instruments import METRICS


def test_every_panel_reads_the_toolkits_metrics_of_the_chosen_run():
    dashboard = dashboard_json()
    ours = {definition.prometheus_name for definition in METRICS}
    assert [v["name"] for v in dashboard["templating"]["list"]] == ["datasource", "job",
                                                                    "write_id"]
    for title, query in panel_queries(dashboard):
        named = set(re.findall(r"\bray_[a-z_]+", query))
        assert named <= ours | {"ray_actors"}, (title, named - ours)
        if "ray_toolkit_" in query:
            assert 'exported_job=~"$job", write_id=~"$write_id"' in query, title


def test_the_dashboard_goes_where_ray_provisions_its_own(tmp_path):
    session = tmp_path / "ray" / "session_2026-11-28_01-00-00_000000_1"
    session.mkdir(parents=True)
    (tmp_path / "ray" / "session_latest").symlink_to(session)

    written = CliRunner().invoke(main, ["dashboard", "--ray-temp-dir", str(tmp_path / "ray")])

    assert written.exit_code == 0, written.output
    path = session / "metrics" / "grafana" / "dashboards" / "toolkit_grafana_dashboard.json"
    assert f"Wrote {path}" in written.output
    assert json.loads(path.read_text()) == dashboard_json()
    assert "Dashboards > New > Import" in written.output


def test_without_a_ray_session_it_says_where_else_to_write(tmp_path):
    refused = CliRunner().invoke(main, ["dashboard", "--ray-temp-dir", str(tmp_path)])

    assert refused.exit_code == 1
    assert f"No Ray session on this machine at {tmp_path}/session_latest" in refused.output
    assert "-o FOLDER" in refused.output

    written = CliRunner().invoke(main, ["dashboard", "-o", str(tmp_path / "grafana")])
    assert written.exit_code == 0, written.output
    assert (tmp_path / "grafana" / "toolkit_grafana_dashboard.json").is_file()
