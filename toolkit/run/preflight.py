"""Everything a run checks before it starts, in one place, once.

``toolkit run`` and the cluster entrypoint call :func:`preflight` before Ray starts and
hand what it returns to the driver (:func:`toolkit.run.driver.execute`). Checks that touch nothing come
first (result columns, the input, each model stage's model and engine), then the run
directory is taken (its writer lock: no other run may write it from here on) and
prepared (``--overwrite`` deletes only from here on), then the input format stages
what it stages. What it found is the run's :class:`~toolkit.run.run_plan.RunPlan`;
whoever called :func:`preflight` ends the run with its
:meth:`~toolkit.run.run_plan.RunPlan.release`, which lets the folder go.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

from toolkit.engines.kind_dispatch import preflight_engine
from toolkit.engines.model_source import ModelLocation
from toolkit.errors import SpecError
from toolkit.run.input.checks import check_input, check_output_holds, check_written_columns
from toolkit.run.input.file_access import HF_PREFIX
from toolkit.run.input.formats import run_format
from toolkit.run.input.identity import InputChanged
from toolkit.run.stage_steps import clashing_result_columns
from toolkit.run.output.run_directory import LOCK_FILE, RunDirectory, RunState
from toolkit.run.output.write_failure import output_write_error
from toolkit.run.output.writer_lock import WriterLock
from toolkit.run.retry import settle_input
from toolkit.run.row_checks import custom_check_file
from toolkit.run.run_plan import PlannedStage, RunPlan, plan_stages
from toolkit.spec.job_definition import JobDefinition
from toolkit.spec.models import JobSpec
from toolkit.spec.sample_sources import SampleProvider


def preflight(
    job: JobDefinition[Any],
    spec: JobSpec,
    *,
    overwrite: bool = False,
    samples: SampleProvider | None = None,
    claim: Sequence[str] = (),
    command: str = "toolkit run",
    input_changed: InputChanged | None = None,
) -> RunPlan:
    """Check ``spec`` for ``job`` before any row is read or any model loads, and plan
    the run: its stages, its input's rows, its folder (held from here on) and state.

    Args:
        overwrite: Replace what the toolkit wrote earlier in ``data.output``.
        samples: Serves ``sample:`` models and inputs (smoke runs).
        claim: Bookkeeping paths the caller will write into the run directory
            (the run's log file), recorded in its manifest first.
        command: What runs, as another run refused by the folder's lock names it.
        input_changed: What to do where the input changed since the run in the
            folder wrote its rows (see :func:`~toolkit.run.retry.settle_input`);
            None refuses such a rerun.

    Raises:
        SpecError: a result column that collides, a model that can't exist, or an
            output directory that is unusable or holds others' files.
        OutputInUseError: another live run writes the output directory.
        BackendUnavailableError: an engine's server can't be reached.
        InputDataError: the input is missing or bad (its columns, ids or, for
            JSON, a line), found before Ray starts, or its format's staging found a
            bad file.
        InputChangedError: the input changed since the run in the folder wrote its
            rows, and ``input_changed`` doesn't say what to do.
    """
    check_written_columns(job, spec)  # a result column named like the id column
    options = job.options_of(spec)
    stages = plan_stages(job, spec, options)
    # A cascade's small model writes the main stage's columns: it answers first.
    clashes = clashing_result_columns([(stage.name, stage.results) for stage in stages
                                       if stage.cascade is None])
    if clashes:
        raise SpecError(f"Job {job.name}: two model stages write the same result column: "
                        f"{', '.join(clashes)}.", hint="Give each stage's results their own names.")
    check_output_holds(spec.data, {c: a for stage in stages for c, a in stage.results.items()})
    custom_check_file(spec.checks, job)  # the user's own check is a function of the project
    # Before the output folder is touched: a refused input leaves nothing behind, and a
    # typo'd --input is named as one, not as another run's folder.
    input_rows = check_input(job, spec)
    # Each stage's model as its engine will load it: a sample model is built by the
    # provider on the node whose engine asks for it.
    stages = tuple(dataclasses.replace(stage, model=ModelLocation(stage.engine.model, samples))
                   for stage in stages)
    check_engines(stages)
    run_dir = RunDirectory(spec.data.output)
    resumable = not spec.data.input.startswith(HF_PREFIX)
    if not run_dir.exists(LOCK_FILE):  # held: the lock names who (the files may be mid-write)
        run_dir.check_owned(run_dir.read_manifest())  # someone else's folder: before a lock file
    lock = WriterLock(run_dir, command)
    lock.acquire()
    try:
        state = run_dir.prepare(spec, overwrite=overwrite, resumable=resumable)
        # Before anything is staged or run: a changed input is refused, or settled.
        state = settle_input(run_dir, spec, [c for s in stages for c in s.required], state,
                             input_changed)
        for name in claim:
            run_dir.claim(name)  # the manifest records it before it is made
        if state is not RunState.COMPLETE:
            run_format(spec.data).stage(spec, run_dir)
    except OSError as exc:  # a full or read-only disk under the manifest or a staged file
        lock.release()
        failed = output_write_error(exc, spec.data.output)
        if failed is None:
            raise
        raise failed from None
    except BaseException:
        lock.release()
        raise
    return RunPlan(job=job, spec=spec, options=options, stages=stages, input_rows=input_rows,
                   run_dir=run_dir, state=state, resumable=resumable, lock=lock,
                   samples=samples)


def check_engines(stages: Sequence[PlannedStage]) -> None:
    """Each stage's model can exist, and its engine's server (if any) answers."""
    for stage in stages:
        if stage.kind.capabilities.loads_checkpoint:  # a file or class is checked as it loads
            stage.model.check()
        preflight_engine(stage.engine)  # e.g. an http engine's server
