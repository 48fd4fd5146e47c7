"""What ``python -m jobs.<job> --spec FILE`` runs on a cluster (or locally)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from toolkit.errors import ToolkitError, debug_enabled
from toolkit.spec.job_definition import JobDefinition


def run_job_main(job: JobDefinition[Any], argv: list[str] | None = None) -> None:
    """Load the serialised spec, join Ray, run the pipeline, print the summary."""
    from toolkit.run.pipeline import run_pipeline
    from toolkit.run.ray_connection import connect_ray
    from toolkit.run.summary_text import format_summary
    from toolkit.spec.loading import read_spec_file

    parser = argparse.ArgumentParser(prog=f"python -m {job.module_name}", description=job.description)
    parser.add_argument("--spec", required=True, type=Path, help="spec file (JSON or YAML)")
    parser.add_argument("--overwrite", action="store_true", help="replace earlier results")
    args = parser.parse_args(argv)
    try:
        spec = read_spec_file(job, args.spec)
        connection = connect_ray()
        if connection.dashboard_url:
            print(f"Ray Dashboard: {connection.dashboard_url}", flush=True)
        summary = run_pipeline(job, spec, overwrite=args.overwrite)
    except ToolkitError as exc:
        if debug_enabled():
            raise
        print(f"Error: {exc.format_message()}", file=sys.stderr)
        sys.exit(exc.exit_code)
    print(format_summary(summary), flush=True)
