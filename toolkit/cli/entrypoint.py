"""What a submitted job runs on the cluster: ``python -m toolkit.cli.entrypoint``.

``--job`` names the job (a job file staged next to the spec, or a built-in) and
``--spec`` the serialised spec; both travel in the uploaded working dir, and the
toolkit itself reaches the cluster as a ``py_modules`` entry. It is the
cluster-side twin of ``toolkit run``: the same preflight and the same driver
(:func:`toolkit.run.driver.execute`), observed by the job's log
(:class:`~toolkit.run.progress.job_log.JobLogWriter`) instead of a terminal line; it
serves ``sample:`` inputs and models to smoke jobs, as the CLI does. The first thing it does is check that the packages the run needs are importable, so a cluster image
without them fails in seconds with a message that says what to install.
"""

from __future__ import annotations

import argparse
import importlib.util
import sys
import traceback
from pathlib import Path
from typing import Any

from toolkit.engines.registry import capabilities
from toolkit.error_causes import root_cause
from toolkit.errors import SpecError, debug_enabled, toolkit_cause
from toolkit.run.progress.job_log import JobLogWriter

#: Packages every run needs on the cluster, by import name -> pip name.
RUNTIME_PACKAGES: dict[str, str] = {
    "ray": "ray[data]",
    "pydantic": "pydantic",
    "yaml": "pyyaml",
    "jinja2": "jinja2",
    "click": "click",
    "pyarrow": "pyarrow",
}


def missing_packages(*engine_kinds: str) -> list[str]:
    """pip names of the packages this Python lacks for a run on ``engine_kinds`` (every
    model stage's engine), as each kind declares them (except those its workers may
    get from another image than the head node's: vLLM's)."""
    wanted = dict(RUNTIME_PACKAGES)
    for name in engine_kinds:
        wanted.update(capabilities(name).packages_on_head)
    return [pip for module, pip in wanted.items() if importlib.util.find_spec(module) is None]


def check_packages(*engine_kinds: str) -> None:
    """Raises SpecError naming every missing package and how to get it onto the cluster."""
    missing = missing_packages(*engine_kinds)
    if missing:
        raise SpecError(
            f"This Python ({sys.executable}) lacks {', '.join(missing)}, which the run needs.",
            hint="Use an image that has them (anyscale/ray-llm ships all of them), or add "
            "them to the job's requirements (toolkit submit adds them for images it "
            "doesn't know).",
        )


def with_output_resolved(spec: Any) -> Any:
    """The spec with ``data.output`` as this cluster names it (Anyscale's artifact
    storage filled in: see :mod:`toolkit.cluster.data_placement`)."""
    from toolkit.cluster.data_placement import resolve_output

    output = resolve_output(spec.data.output)
    if output == spec.data.output:
        return spec
    updated = spec.model_copy(deep=True)
    updated.data.output = output
    return updated


def main(argv: list[str] | None = None) -> None:
    """Load the job and its spec, check them, run them on the cluster's Ray, print the
    summary."""
    parser = argparse.ArgumentParser(prog="python -m toolkit.cli.entrypoint",
                                     description="Run one batch-llm-toolkit job from its spec.")
    parser.add_argument("--job", required=True,
                        help="job file (YAML or Python) or built-in job name")
    parser.add_argument("--spec", required=True, type=Path, help="spec file (JSON or YAML)")
    parser.add_argument("--overwrite", action="store_true", help="replace earlier results")
    parser.add_argument("--input-changed", choices=("keep", "redo"),
                        help="where the input changed since the run in the output wrote "
                        "its rows: keep them, or redo the changed ones")
    parser.add_argument("--check-tokens", action="store_true",
                        help="refuse the run if a row's prompt is longer than max_model_len")
    args = parser.parse_args(argv)
    # Every line of ours is marked, so `toolkit logs --follow` shows them among Ray's.
    log = JobLogWriter()
    try:
        log.phase("starting")
        check_packages()
        from toolkit.run.driver import execute
        from toolkit.run.input.identity import InputChanged
        from toolkit.run.output.summary_text import format_summary
        from toolkit.run.preflight import preflight
        from toolkit.samples.provider import SAMPLES
        from toolkit.spec.jobs.catalog import load_job
        from toolkit.spec.loading import read_spec_file

        job = load_job(args.job)
        spec = read_spec_file(job, args.spec)
        spec = with_output_resolved(spec)
        # Workers load the model, but they run the driver's image in every setup we render.
        check_packages(*(engine.kind for _, engine in spec.model_stages))
        plan = preflight(job, spec, overwrite=args.overwrite, samples=SAMPLES,
                         command="a submitted run",
                         input_changed=InputChanged(args.input_changed)
                         if args.input_changed else None)
        summary = execute(plan, log, check_tokens=args.check_tokens)
    except Exception as exc:
        if debug_enabled():
            raise
        # Ours, raised here or on a worker (an engine that could not start).
        ours = toolkit_cause(exc)
        if ours is not None:
            log.error(ours.message, ours.hint)
            sys.exit(ours.exit_code)
        # The traceback stays in the raw log; the marked line says what failed.
        traceback.print_exc()
        log.error(f"The run failed: {root_cause(exc)}",
                  "The traceback is in the job's whole log (toolkit logs JOB_ID).")
        sys.exit(1)
    log.summary(format_summary(summary))


if __name__ == "__main__":
    main()
