"""``toolkit run``: run a job's pipeline from this process on local Ray or RAY_ADDRESS."""

from __future__ import annotations

import contextlib
import os
import re
import time
from collections.abc import Callable
from typing import Any

from toolkit.engines.registry import engine_kind
from toolkit.errors import (
    BackendUnavailableError,
    EngineDiedError,
    JobFailedError,
    RunInterruptedError,
    SpecError,
    debug_enabled,
    error_chain,
    toolkit_cause,
)
from toolkit.run.input.identity import InputChanged
from toolkit.run.output.run_directory import RUN_LOG_FILE, RunDirectory, RunState
from toolkit.run.output.summary import RunSummary
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
from toolkit.run.run_plan import RunPlan
from toolkit.run.run_stop import sigterm_as_ctrl_c
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
    process once the GCS has been silent for a minute, so :func:`watch_cluster` ends
    it first, through ``observer.cluster_lost`` and exit code 3.
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
        # A finished run answers from its folder: no Ray to start for nothing.
        done = completed_summary(plan, log_file) if plan.state is RunState.COMPLETE else None
        # A full disk (or one made read-only) under Ray's log, the results or the
        # manifest: one paragraph (exit 11), whichever write found it.
        with sigterm_as_ctrl_c(), failed_writes_explained(plan.data.output,
                                                          lambda: rows_kept(plan)):
            return done or _run_on_ray(plan, address=address, target=target,
                                       log_file=log_file, observer=observer or RunObserver(),
                                       dashboard=dashboard, started=started,
                                       check_tokens=check_tokens)
    except KeyboardInterrupt:
        raise RunInterruptedError(stopped_message(plan)) from None
    finally:
        plan.release()


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


def planned_rows(plan: RunPlan) -> int | None:
    """The rows the run reads: as the checks counted them, else as the spec and the
    run folder tell (``--rows``, a Parquet footer, a staged slice); None: unknown."""
    samples = plan.samples
    return plan.input_rows or expected_rows(
        plan.spec, samples.default_rows if samples is not None else None, run_dir=plan.run_dir)


def _run_on_ray(
    plan: RunPlan,
    *,
    address: str | None,
    target: str | None,
    log_file: str | None,
    observer: RunObserver,
    dashboard: bool,
    started: float,
    check_tokens: bool = False,
) -> RunSummary:
    """:func:`run_job` once its folder is held: Ray, then the pipeline."""
    run_dir, job = plan.run_dir, plan.job
    # Progress from the first second: until rows come, the line says what the run does.
    reporter: ProgressReporter | None = None
    progress: contextlib.AbstractContextManager[None] = contextlib.nullcontext()
    interval = observer.progress_interval_s
    if interval is not None:
        reporter = ProgressReporter(WrittenRows(run_dir, plan.data.output_format),
                                    total=lambda: planned_rows(plan))
        reporter.phase = "starting Ray" if target in (None, "local") else f"joining Ray at {target}"
        progress = reporting(reporter, observer.progress, interval,
                             LogWatcher(log_file) if log_file else None, observer.notice)

    def on_phase(phase: str) -> None:
        if reporter is not None:
            reporter.phase = phase

    with output_to(log_file, job.name), progress:
        connection = connect_ray(address, output=plan.data.output, dashboard=dashboard)
        stop_watch = watch_cluster(connection, plan, observer)
        try:
            # ray.init set SIGTERM to exit at once (sys.exit): for the run it is a stop again.
            with sigterm_as_ctrl_c():
                observer.connected(connection)
                if connection.started_here:
                    check_runs_locally(plan.spec)
                    import ray

                    fitted, notices = fit_pools_to_this_machine(
                        plan.spec, ray.cluster_resources().get("CPU", 0))
                    plan = plan.with_engines(dict(fitted.model_stages))
                    for notice in notices:
                        observer.notice(notice)
                # A Ray started here never grows, whatever its monitor has reported yet.
                check_cluster_fits(plan.spec, cluster_state(fixed=connection.started_here))
                with ray_data_quiet(log_file is not None):
                    summary = run_planned(plan, log_file=log_file, on_notice=observer.notice,
                                          on_phase=on_phase, started=started,
                                          check_tokens=check_tokens)
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
                raise  # a failed write: told by run_job, with what the folder kept
            died = engine_died_error(exc, plan.spec, log_file)
            if died is not None:
                raise died from None
            raise JobFailedError(
                f"The {job.name} run failed: {root_cause(exc)}",
                hint="Rerun with TOOLKIT_DEBUG=1 for the full traceback; "
                + (f"Ray's output is in {log_file}." if log_file else
                   "the Ray Dashboard shows worker logs."),
            ) from None
        finally:
            stop_watch()
            if log_file and connection.started_here:
                stop_local_ray()


def check_runs_locally(spec: JobSpec) -> None:
    """Refuse, up front, an engine whose packages a Ray started on this machine lacks
    (its workers run this Python). Resources are checked for every cluster
    (:func:`~toolkit.run.ray.cluster_fit.check_cluster_fits`).

    Raises:
        SpecError: an engine's package is missing, or torchvision can't be imported.
    """
    import importlib.util

    from toolkit.engines.torch_packages import mismatched_torch_extensions, uninstall_hint

    for field, engine in spec.model_stages:
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


def fit_pools_to_this_machine(spec: JobSpec, cpus: float) -> tuple[JobSpec, list[str]]:
    """Fewer CPU engine workers where a Ray started here can't hold the pool asked for.

    A local Ray never grows, and a fixed pool waits for all its workers: the
    templates' ``concurrency: 4`` (sized for GPU clusters) of 1-CPU workers on a
    4-CPU local Ray leaves nothing for reading and writing, and vLLM's CPU backend
    also needs its chat-template, tokenize and detokenize stages, so the run would
    sit at 0 rows forever. Each CPU stage keeps at least one worker; concurrency
    doesn't change results (it is not in the resume fingerprint).

    Returns:
        The spec to run and a notice for each pool made smaller.
    """
    on_cpu = [(field, engine) for field, engine in spec.model_stages
              if not engine.gpus_per_worker]
    # Beside each: the engine's own CPU stages (Ray Data LLM's around vLLM on CPU).
    spare = cpus - READ_WRITE_CPUS - sum(e.num_cpus + e.helper_cpus for _, e in on_cpu)
    if spare < 0 or not on_cpu:
        return spec, []  # not even one worker each: left for Ray to report
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
        return spec, []
    return spec.with_engines(updates), notices


def engine_died_error(exc: BaseException, spec: JobSpec,
                      log_file: str | None) -> EngineDiedError | None:
    """Why the run ended, when a model worker whose restarts are bounded died for good.

    Ray Data restarts its other actors without end, so an actor found dead here is
    an engine worker past ``max_restarts`` (vLLM's, whose engine dies with it)."""
    from ray.exceptions import ActorDiedError

    died = next((seen for seen in error_chain(exc) if isinstance(seen, ActorDiedError)), None)
    if died is None:
        return None
    bounds = [(field, getattr(engine, "restarts")) for field, engine in spec.model_stages
              if "max_restarts" in type(engine).model_fields]
    if not bounds:
        return None
    named = ", ".join(f"{field}.max_restarts {restarts}" for field, restarts in bounds)
    # Ray's text goes on with generic advice on the OOM killer and `ray stop`.
    said = root_cause(died).split(" Some common causes", 1)[0]
    return EngineDiedError(
        f"A model engine worker died more often than Ray may restart it ({named}): "
        f"the run stopped. Ray's last word on it: {said}",
        hint="Something kills it that a restart won't fix: the machine running out of "
        "memory (lower engine.batch_size or engine.kv_cache_gib), a failing device, or "
        "nodes taken back (spot instances: raise engine.max_restarts, -1 for without "
        "end). " + (f"Ray's log: {log_file}. " if log_file else "")
        + "Rows already written stay; the same command resumes.",
    )


def root_cause(exc: BaseException) -> str:
    """The innermost error's message: Ray wraps worker errors several times over.

    Walks the cause chain and, in the text of each, keeps the last line shaped like
    ``SomeError: message``, skipping Ray's generic wrappers.
    """
    candidates: list[str] = []
    for seen in error_chain(exc):
        for line in str(seen).splitlines():
            line = line.strip()
            if _ERROR_LINE.match(line) and not line.startswith(_RAY_WRAPPERS):
                candidates.append(line)
    if candidates:
        line = candidates[-1]
        return line if len(line) <= 400 else line[:397] + "..."
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    return lines[-1] if lines else type(exc).__name__


_ERROR_LINE = re.compile(r"^[A-Za-z_][\w.]*(Error|Exception|Exit|Interrupt): ")
_RAY_WRAPPERS = ("ray.exceptions.", "RayTaskError", "RayActorError", "ActorDiedError",
                 "SystemException", "UserCodeException")
