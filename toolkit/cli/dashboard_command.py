"""``toolkit dashboard``: write the toolkit's Grafana dashboard where Grafana finds it."""

from __future__ import annotations

from pathlib import Path

import click

PROVISIONED = ("A Grafana started with the session's metrics/grafana/grafana.ini (Ray's "
               "provisioning) lists it beside Ray's own dashboards.")
IMPORT_HINT = ("Any other Grafana, Anyscale's included: Dashboards > New > Import, upload "
               "the file and choose the Prometheus that scrapes the cluster; pick a run by "
               "its job and write id.")


@click.command("dashboard")
@click.option("-o", "--output", "folder", type=click.Path(path_type=Path, file_okay=False),
              default=None,
              help="Folder to write it into. Default: the newest Ray session on this "
              "machine, <session>/metrics/grafana/dashboards/ (where Ray provisions its "
              "own Grafana dashboards).")
@click.option("--ray-temp-dir", type=click.Path(path_type=Path, file_okay=False), default=None,
              help="Ray's --temp-dir, for a Ray started with one. Default: $RAY_TMPDIR, "
              "else /tmp/ray.")
def dashboard_command(folder: Path | None, ray_temp_dir: Path | None) -> None:
    """Write the Grafana dashboard of the toolkit's metrics (throughput, rows by
    outcome, error rate, checks, tokens/s, ETA, engine workers) and say how to import it."""
    from toolkit.run.metrics.dashboard import RAY_DASHBOARDS_DIR, ray_session_dir, write_dashboard

    provisioned = folder is None
    if folder is None:
        session = ray_session_dir(str(ray_temp_dir) if ray_temp_dir else None)
        if not session.is_dir():
            raise click.ClickException(
                f"No Ray session on this machine at {session}: start Ray here, pass "
                "--ray-temp-dir, or write the file anywhere with -o FOLDER.")
        folder = session.resolve() / RAY_DASHBOARDS_DIR
    click.echo(f"Wrote {write_dashboard(folder)}")
    if provisioned:
        click.echo(PROVISIONED)
    click.echo(IMPORT_HINT)
