"""``toolkit run``: run a job's pipeline from this process on local Ray or RAY_ADDRESS.

The run itself is the one driver's (:func:`toolkit.run.driver.execute`); here: what
``toolkit run`` adds around it (Ray's output sent to the run's log, an error that is
none of the toolkit's told as one paragraph).
"""

from __future__ import annotations

import os
import time
from typing import Any

from toolkit.error_causes import run_failed_error
from toolkit.errors import SpecError, ToolkitError, debug_enabled
from toolkit.run.driver import execute
from toolkit.run.input.identity import InputChanged
from toolkit.run.output.run_directory import RUN_LOG_FILE, RunDirectory
from toolkit.run.output.summary import RunSummary
from toolkit.run.preflight import preflight
from toolkit.run.progress.observer import RunObserver
from toolkit.run.ray.connection import ray_target
from toolkit.spec.job_definition import JobDefinition
from toolkit.spec.models import JobSpec
from toolkit.spec.sample_sources import SampleProvider


def run_job(
    job: JobDefinition[Any],
    spec: JobSpec,
    overwrite: bool = False,
    address: str | None = None,
    samples: SampleProvider | None = None,
    log_file: str | None = None,
    observer: RunObserver | None = None,
    dashboard: bool = False,
    check_tokens: bool = False,
    input_changed: InputChanged | None = None,
) -> RunSummary:
    """Connect to Ray (embedded unless ``address``/RAY_ADDRESS) and run the pipeline.

    Args:
        address: A cluster to join (``auto``, ``host:port``); default RAY_ADDRESS,
            else Ray is started here.
        samples: Serves ``sample:`` inputs and models (the CLI's ``--smoke``).
        log_file: Send Ray's and the engine's output here (appended; e.g.
            :func:`~toolkit.run.ray.log_output.default_log_file`) instead of this process's stdout/stderr, and
            switch off Ray Data's progress bars. During the run anything written to
            fds 1 and 2 lands there: write to a :func:`~toolkit.run.ray.log_output.terminal`
            stream instead. A
            Ray started here is shut down at the end, so its exit lines go there too.
        observer: Told when Ray is up, how far the run is (every
            ``observer.progress_interval_s``) and what a user must know that Ray
            only wrote to ``log_file`` (see :class:`RunObserver`).
        dashboard: Start the Ray Dashboard with a Ray started here (see
            :func:`~toolkit.run.ray.connection.connect_ray`).
        check_tokens: Count every row's prompt tokens once Ray is up, and refuse
            the run if a row is longer than ``max_model_len`` (see
            :func:`~toolkit.run.pipeline.run_planned`).
        input_changed: What to do where the input changed since the run in the
            output folder wrote its rows (``--input-changed``); None refuses.

    Raises:
        ToolkitError: bad spec/input or a ``ray://`` address (exit 2), the cluster
            can't be joined (exit 3) or the run failed (exit 4), with the
            underlying cause in one paragraph.
        RunInterruptedError: Ctrl-C or SIGTERM stopped the run (exit 130); its
            message says how many rows were kept and how to resume.

    A Ray whose GCS stops answering is not raised from: Ray's core worker ends the
    process once the GCS has been silent for a minute, so
    :func:`~toolkit.run.driver.watch_cluster` ends it first, through
    ``observer.cluster_lost`` and exit code 3.
    """
    started = time.monotonic()
    target = ray_target(address, os.environ)
    if target is not None and target.startswith("ray://"):
        raise SpecError(
            f"Ray address {target}: a run's Ray Data pipeline can't go through Ray Client "
            "(ray://); Ray Data needs a driver attached to the cluster itself.",
            hint="Run toolkit on a node of the cluster with --address HEAD:6379 (the GCS "
            "port), or let the cluster run it: toolkit submit JOB --address http://HEAD:8265.",
        )
    # Before Ray starts: a bad spec, model, server, output directory or input file
    # fails in a second, not after a minute of start-up.
    ours = log_file is not None and log_file == RunDirectory(spec.data.output).log_file
    plan = preflight(job, spec, overwrite=overwrite, samples=samples,
                     claim=[RUN_LOG_FILE] if ours else [], input_changed=input_changed)
    try:
        return execute(plan, observer, address=address, dashboard=dashboard,
                       log_file=log_file, started=started, check_tokens=check_tokens)
    except ToolkitError:
        raise
    except Exception as exc:
        if debug_enabled():
            raise
        raise run_failed_error(exc, job.name, log_file) from None
