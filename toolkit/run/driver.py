"""The one driver: a planned run executed on Ray, for ``toolkit run`` and a submitted job.

A run is ``preflight -> RunPlan -> execute``. :func:`~toolkit.run.preflight.preflight`
checks the spec, the input and the output folder before Ray starts and returns the
plan; :func:`execute` joins Ray (or starts it here), checks the cluster can hold the
run, runs the plan and reports through one
:class:`~toolkit.run.progress.observer.RunObserver`. ``toolkit run``
(:func:`toolkit.run.local_run.run_job`) and the submitted job's entrypoint
(:mod:`toolkit.cli.entrypoint`) call it the same way; what differs is the observer
(the terminal line, the job's log) and where an error is told (the CLI's converter, the
job log's marked error line and exit code).

Where the run starts its own Ray (a laptop, a CI box), :func:`execute` also fits CPU
engine pools to this machine and refuses engines whose packages are not installed
here; where it joins one (a cluster's head, ``--address``), Ray's own resources decide.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Callable
from typing import Any

from toolkit.engines.registry import engine_kind
from toolkit.error_causes import engine_died_error
from toolkit.errors import (
    BackendUnavailableError,
    RunInterruptedError,
    SpecError,
    debug_enabled,
    toolkit_cause,
)
from toolkit.run.input.identity import InputChanged
from toolkit.run.metrics.recorder import recording_metrics
from toolkit.run.output.location import CACHE_LOCATION_HINT, cache_location_problem
from toolkit.run.output.run_directory import RunState
from toolkit.run.output.summary import NodeTakenBack, RunSummary, save_summary
from toolkit.run.output.write_failure import failed_write_errno, failed_writes_explained
from toolkit.run.pipeline import completed_summary, run_planned
from toolkit.run.preflight import preflight
from toolkit.run.progress.display import LogWatcher, reporting
from toolkit.run.progress.model import ProgressReporter
from toolkit.run.progress.observer import RunObserver
from toolkit.run.progress.sources import WrittenRows, expected_rows
from toolkit.run.ray.cluster_fit import READ_WRITE_CPUS, check_cluster_fits, cluster_state
from toolkit.run.ray.connection import RayConnection, connect_ray, ray_target, stop_local_ray
from toolkit.run.ray.gcs_watch import lost_after_s, reconnect_timeout_s, watch_gcs, watchable
from toolkit.run.ray.log_output import output_to, ray_data_quiet
from toolkit.run.ray.node_drains import NodeWatch, watching_nodes
from toolkit.run.run_plan import RunPlan
from toolkit.run.run_stop import sigterm_as_ctrl_c
from toolkit.spec.job_definition import JobDefinition
from toolkit.spec.models import JobSpec
from toolkit.spec.run_settings import EngineStages, StagesT
from toolkit.spec.sample_sources import SampleProvider


def execute(
    plan: RunPlan,
    observer: RunObserver | None = None,
    *,
    address: str | None = None,
    dashboard: bool = False,
    log_file: str | None = None,
    started: float | None = None,
    check_tokens: bool = False,
    fit_check: bool = True,
) -> RunSummary:
    """Run a checked plan on Ray; its written-output summary. The plan is released
    (its folder's writer lock let go) when this returns or raises.

    Args:
        observer: Told when Ray is up, what the run does before its first row, how
            far it is (every ``observer.progress_interval_s``) and what a user must
            know that Ray only wrote to ``log_file`` (see :class:`RunObserver`).
        address: A cluster to join (``auto``, ``host:port``); default RAY_ADDRESS
            (set inside a submitted job), else Ray is started here.
        dashboard: Start the Ray Dashboard with a Ray started here.
        log_file: Where Ray's and the engine's output go (see
            :func:`~toolkit.run.local_run.run_job`); None: this process's own.
        started: When the run began (``time.monotonic()``), for its duration.
        check_tokens: Count every row's prompt tokens once Ray is up, and refuse the
            run if a row is longer than ``max_model_len``.
        fit_check: Refuse a run the cluster can never hold before it starts
            (:func:`~toolkit.run.ray.cluster_fit.check_cluster_fits`); off, only the
            running stages' wait for resources (``compute.resource_wait_s``) stops it.

    Raises:
        ToolkitError: the toolkit's own, raised here or on a worker (an engine that
            could not start), as it was raised; :class:`~toolkit.errors.EngineDiedError`
            for an engine worker that died past its restarts;
            :class:`~toolkit.errors.OutputWriteError` for a failed write.
        RunInterruptedError: Ctrl-C or SIGTERM stopped the run (exit 130).
        Exception: anything else, as Ray raised it: the caller tells it (the CLI as
            :func:`~toolkit.error_causes.run_failed_error`, the entrypoint with its
            traceback).
    """
    started = time.monotonic() if started is None else started
    try:
        # A finished run answers from its folder: no Ray to start for nothing.
        done = completed_summary(plan, log_file) if plan.state is RunState.COMPLETE else None
        # A full disk (or one made read-only) under Ray's log, the results or the
        # manifest: one paragraph (exit 11), whichever write found it.
        with sigterm_as_ctrl_c(), failed_writes_explained(plan.data.output,
                                                          lambda: rows_kept(plan)):
            return done or _run_on_ray(plan, observer or RunObserver(), address=address,
                                       dashboard=dashboard, log_file=log_file,
                                       started=started, check_tokens=check_tokens,
                                       fit_check=fit_check)
    except KeyboardInterrupt:
        raise RunInterruptedError(stopped_message(plan)) from None
    finally:
        plan.release()


def run_pipeline(
    job: JobDefinition[Any],
    spec: JobSpec,
    overwrite: bool = False,
    samples: SampleProvider | None = None,
    log_file: str | None = None,
    on_notice: Callable[[str], None] | None = None,
    on_phase: Callable[[str], None] | None = None,
    check_tokens: bool = False,
    input_changed: InputChanged | None = None,
) -> RunSummary:
    """Check and run ``spec`` on the Ray this process joined (or RAY_ADDRESS's): the
    library's one-call run, :func:`preflight` then :func:`execute`; the
    written-output summary.

    A rerun with the same spec and output resumes an interrupted run (only rows
    not yet written are processed) and does nothing after a finished one.

    Args:
        job: The job definition (its preprocess/postprocess and columns).
        spec: The validated spec.
        overwrite: Replace results the toolkit wrote earlier in ``spec.data.output``.
        samples: Serves ``sample:`` inputs and models (smoke runs; see
            :mod:`toolkit.spec.sample_sources`).
        log_file, check_tokens: as :func:`execute`'s.
        on_notice: Told (from a background thread) when Ray can't place a stage's
            workers: waiting for a node, or for resources no node has.
        on_phase: Told what the run does before its first row.
        input_changed: What to do where the input changed since the run in the
            output folder wrote its rows; None refuses (see
            :func:`~toolkit.run.retry.settle_input`).

    Raises:
        InputDataError, SpecError, OutputInUseError, BackendUnavailableError: as
            :func:`~toolkit.run.preflight.preflight`'s; the rest as :func:`execute`'s.
    """
    started = time.monotonic()
    plan = preflight(job, spec, overwrite=overwrite, samples=samples, command="a submitted run",
                     input_changed=input_changed)
    # The library's run, as before the one driver: on a Ray its caller joined, whose
    # growth it can't tell, only the running stages' wait for resources stops it.
    return execute(plan, _Told(on_notice, on_phase), log_file=log_file, started=started,
                   check_tokens=check_tokens, fit_check=False)


class _Told(RunObserver):
    """An observer of two callbacks, for :func:`run_pipeline`'s callers."""

    def __init__(self, on_notice: Callable[[str], None] | None,
                 on_phase: Callable[[str], None] | None) -> None:
        self._on_notice = on_notice
        self._on_phase = on_phase

    def notice(self, text: str) -> None:
        if self._on_notice is not None:
            self._on_notice(text)

    def phase(self, text: str) -> None:
        if self._on_phase is not None:
            self._on_phase(text)


def stopped_message(plan: RunPlan) -> str:
    """What a stopped run kept, and how to go on: ``Stopped: N of M rows kept in OUT;
    run the same command again to resume.``"""
    return f"Stopped: {rows_kept(plan)}; run the same command again to resume."


def rows_kept(plan: RunPlan) -> str:
    """``N of M rows kept in OUT``: what the run's folder holds now."""
    kept = WrittenRows(plan.run_dir, plan.data.output_format)().rows
    total = planned_rows(plan)
    of = f" of {total:,}" if total else ""
    return f"{kept:,}{of} rows kept in {plan.data.output}"


def planned_rows(plan: RunPlan) -> int | None:
    """The rows the run reads: as the checks counted them, else as the spec and the
    run folder tell (``--rows``, a Parquet footer, a staged slice); None: unknown."""
    samples = plan.samples
    return plan.input_rows or expected_rows(
        plan, samples.default_rows if samples is not None else None, run_dir=plan.run_dir)


def watch_cluster(connection: RayConnection, plan: RunPlan,
                  observer: RunObserver) -> Callable[[], None]:
    """Watch the GCS of the Ray this run is on (:mod:`~toolkit.run.ray.gcs_watch`);
    returns ``stop()``.

    A silence is a notice. A GCS silent for longer ends the process here (exit 3),
    a few seconds before Ray's core worker would end it with exit 1 and not a word:
    the observer says what was kept and how to resume, and the run's folder is let go.
    """
    address = connection.address
    if not watchable(address):
        return lambda: None
    where = (f"the Ray started here (its GCS at {address})" if connection.started_here
             else f"the Ray cluster at {address}")
    limit = reconnect_timeout_s()

    def silent(seconds: float) -> None:
        observer.notice(f"{where} has not answered for {seconds:.0f} s; Ray ends this run "
                        f"if it stays silent for {limit:.0f} s.")

    def lost(seconds: float) -> None:
        error = BackendUnavailableError(
            f"Lost {where}: its GCS has not answered for {seconds:.0f} s (the head "
            "stopped, or the network to it did), and Ray ends a driver that can't reach it.",
            hint=f"{rows_kept(plan)}. Once the cluster is back, run the same command "
            "again to resume; the head's gcs_server.out says why it stopped.")
        try:
            observer.cluster_lost(error)
        finally:
            plan.release()
            os._exit(error.exit_code)

    return watch_gcs(address, on_silent=silent, on_lost=lost, lost_after=lost_after_s())


def watch_nodes(connection: RayConnection, observer: RunObserver,
                reporter: ProgressReporter | None) -> tuple[NodeWatch | None, Callable[[], None]]:
    """Watch the joined cluster's nodes for drains (spot preemption,
    :mod:`~toolkit.run.ray.node_drains`): each told as a notice, the progress line
    counting them. A Ray started here has no nodes to take back."""
    if connection.started_here:
        return None, lambda: None

    def told(drain: Any) -> None:
        then = ("; Ray places no new work there and redoes the blocks it held"
                if not drain.gone else "; Ray redoes the blocks it held elsewhere")
        observer.notice(drain.describe()[0].upper() + drain.describe()[1:] + then + ".")

    watch, stop = watching_nodes(told)
    if reporter is not None:
        reporter.nodes = watch.text
    return watch, stop


def with_nodes_taken_back(summary: RunSummary, watch: NodeWatch | None,
                          plan: RunPlan) -> RunSummary:
    """``summary`` naming the nodes taken back during the run (a field and a note),
    saved again as the run's ``_summary.json``; as it was when none was."""
    if watch is None:
        return summary
    with contextlib.suppress(Exception):  # a last look: a drain in the final seconds
        watch.look()
    drains = watch.drains
    if not drains:
        return summary
    note = (f"{watch.text()} during the run: "
            + "; ".join(d.describe() for d in drains)
            + ". Ray redid the blocks they held; every row is written once.")
    summary = summary.model_copy(update={
        "nodes_taken_back": [NodeTakenBack(**d.as_json()) for d in drains], "notes": [*summary.notes, note]})
    save_summary(summary, plan.run_dir)
    return summary


def _run_on_ray(
    plan: RunPlan,
    observer: RunObserver,
    *,
    address: str | None,
    dashboard: bool,
    log_file: str | None,
    started: float,
    check_tokens: bool,
    fit_check: bool,
) -> RunSummary:
    """:func:`execute` once its folder is held: Ray, then the pipeline."""
    run_dir, job = plan.run_dir, plan.job
    target = ray_target(address, os.environ)
    # Progress from the first second: until rows come, the line says what the run does.
    reporter: ProgressReporter | None = None
    progress: contextlib.AbstractContextManager[None] = contextlib.nullcontext()
    interval = observer.progress_interval_s
    if interval is not None:
        window = observer.progress_window_s
        reporter = ProgressReporter(WrittenRows(run_dir, plan.data.output_format),
                                    total=lambda: planned_rows(plan),
                                    **({} if window is None else {"window_s": window}))
        reporter.phase = "starting Ray" if target in (None, "local") else f"joining Ray at {target}"
        progress = reporting(reporter, observer.progress, interval,
                             LogWatcher(log_file) if log_file else None, observer.notice)

    def on_phase(phase: str) -> None:
        if reporter is not None:
            reporter.phase = phase
        observer.phase(phase)

    with output_to(log_file, job.name), progress:
        connection = connect_ray(address, output=plan.data.output, dashboard=dashboard)
        check_cache_reaches_every_node(plan, connection.on_this_machine)
        stop_watch = watch_cluster(connection, plan, observer)
        node_watch, stop_nodes = watch_nodes(connection, observer, reporter)
        try:
            # ray.init set SIGTERM to exit at once (sys.exit): for the run it is a stop again.
            with sigterm_as_ctrl_c():
                observer.connected(connection)
                if connection.started_here:
                    check_runs_locally(plan)
                    import ray

                    plan, notices = fit_pools_to_this_machine(
                        plan, ray.cluster_resources().get("CPU", 0))
                    for notice in notices:
                        observer.notice(notice)
                if fit_check:  # a Ray started here never grows, whatever its monitor says
                    check_cluster_fits(plan, cluster_state(fixed=connection.started_here))
                # Its figures as Ray metrics, counted from the files the summary counts.
                with ray_data_quiet(log_file is not None), \
                        recording_metrics(plan, lambda: planned_rows(plan),
                                          outlive=not connection.started_here):
                    summary = run_planned(plan, log_file=log_file, on_notice=observer.notice,
                                          on_phase=on_phase, started=started,
                                          check_tokens=check_tokens,
                                          dashboard_url=None if connection.started_here
                                          else connection.dashboard_url)
                summary = with_nodes_taken_back(summary, node_watch, plan)
                if reporter is not None:
                    reporter.ended(summary.seconds, summary.rows_per_second)
                return summary
        except Exception as exc:
            # Ours, raised here or on a worker (an engine that could not start).
            ours = toolkit_cause(exc)
            if ours is exc or debug_enabled():
                raise
            if ours is not None:
                raise ours from None
            if failed_write_errno(exc, plan.data.output):
                raise  # a failed write: told by execute, with what the folder kept
            died = engine_died_error(exc, restart_bounds(plan), log_file)
            if died is not None:
                raise died from None
            raise
        finally:
            stop_watch()
            stop_nodes()
            if log_file and connection.started_here:
                stop_local_ray()


def restart_bounds(stages: EngineStages) -> list[tuple[str, int]]:
    """``(field, max_restarts)`` of each model stage whose engine bounds its restarts."""
    return [(field, getattr(engine, "restarts")) for field, engine in stages.model_stages
            if "max_restarts" in type(engine).model_fields]


def check_runs_locally(stages: EngineStages) -> None:
    """Refuse, up front, an engine whose packages a Ray started on this machine lacks
    (its workers run this Python). Resources are checked for every cluster
    (:func:`~toolkit.run.ray.cluster_fit.check_cluster_fits`).

    Raises:
        SpecError: an engine's package is missing, or torchvision can't be imported.
    """
    import importlib.util

    from toolkit.engines.torch_packages import mismatched_torch_extensions, uninstall_hint

    for field, engine in stages.model_stages:
        kind = engine_kind(engine)
        missing = [pip for module, pip in kind.packages.items()
                   if importlib.util.find_spec(module) is None]
        if missing:
            raise SpecError(
                f"{field}.kind: {kind.name}, but its package"
                f"{' ' if len(missing) == 1 else 's '}{', '.join(missing)} "
                f"{'is' if len(missing) == 1 else 'are'} not installed here.",
                hint=kind.missing_hint or None,
            )
        mismatched = mismatched_torch_extensions() if kind.imports_transformers else []
        if mismatched:
            raise SpecError(
                f"{field}.kind: {kind.name} loads its model with transformers, which "
                f"imports torchvision, but {', '.join(mismatched)} here "
                f"{'is a CUDA build' if len(mismatched) == 1 else 'are CUDA builds'} "
                "beside a CPU-only torch and can't be imported.",
                hint=uninstall_hint(mismatched),
            )


def check_cache_reaches_every_node(plan: RunPlan, on_this_machine: bool) -> None:
    """Refuse an answer cache in a local folder for a cluster that is not on this
    machine, where each node would keep its own answers (unless ``cache.shared``).

    Raises:
        SpecError: such a cache (exit 2, before any row is read).
    """
    cache = plan.spec.cache
    if on_this_machine or cache is None:
        return
    problem = cache_location_problem(cache.dir, cache.shared, "run")
    if problem is not None:
        raise SpecError(f"{problem} Nothing was run.", hint=CACHE_LOCATION_HINT)


def fit_pools_to_this_machine(stages: StagesT, cpus: float) -> tuple[StagesT, list[str]]:
    """Fewer CPU engine workers where a Ray started here can't hold the pool asked for.

    A local Ray never grows, and a fixed pool waits for all its workers: the
    templates' ``concurrency: 4`` (sized for GPU clusters) of 1-CPU workers on a
    4-CPU local Ray leaves nothing for reading and writing, and vLLM's CPU backend
    also needs its chat-template, tokenize and detokenize stages, so the run would
    sit at 0 rows forever. Each CPU stage keeps at least one worker; concurrency
    doesn't change results (it is not in the resume fingerprint).

    Returns:
        The stages to run (a plan: the plan with its smaller pools) and a notice for
        each pool made smaller.
    """
    on_cpu = [(field, engine) for field, engine in stages.model_stages
              if not engine.gpus_per_worker]
    # Beside each: the engine's own CPU stages (Ray Data LLM's around vLLM on CPU).
    spare = cpus - READ_WRITE_CPUS - sum(e.num_cpus + e.helper_cpus for _, e in on_cpu)
    if spare < 0 or not on_cpu:
        return stages, []  # not even one worker each: left for Ray to report
    updates: dict[str, Any] = {}
    notices = []
    for field, engine in on_cpu:
        wanted = engine.pool_size[0]
        workers = 1 + min(wanted - 1, int(spare // engine.num_cpus))
        spare -= (workers - 1) * engine.num_cpus
        if workers < wanted:
            key = "min_concurrency" if engine.min_concurrency is not None else "concurrency"
            updates[field] = engine.model_copy(update={key: workers})
            notices.append(
                f"{field}.concurrency {wanted} is more CPU workers ({engine.num_cpus:g} CPU "
                f"each) than the Ray started here holds ({cpus:g} CPUs, "
                f"{READ_WRITE_CPUS:g} kept for reading and writing): running {workers}. "
                "Set --concurrency to choose.")
    if not updates:
        return stages, []
    return stages.with_engines(updates), notices
