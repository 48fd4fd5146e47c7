"""``toolkit retry OUTPUT``: redo, in place, only the rows that failed.

A retry is a new *attempt* on a run directory: the rows that failed (error rows,
rows that failed a check, or only the checks named with ``--only``) are taken out of
the result files and run again with the new settings, together with the rows a
stopped run never reached; every other row stays as it was. Afterwards a plain
reader (``pandas.read_parquet(OUTPUT)``) sees one row per id, the latest attempt's.

It is built on the run's own resume, so it is exact under kills too:

1. The attempt is recorded in the manifest (``attempts``), with the new spec's
   fingerprint, before anything changes (state ``setup``); a finished run's
   summary goes next, so the directory no longer reads as finished.
2. Ray Data's checkpoint is rewritten to hold exactly the ids that stay.
3. Each result file holding rows to redo is rewritten without them (the new file
   first, under the attempt's own write id, then the old one deleted).
4. The attempt is marked ``running`` and the pipeline resumes: Ray Data's
   checkpoint drops the rows that stay at the read, so only the rest run.

A kill during 1-3 is repaired by the next ``toolkit retry``, which does 2-3 again
from what the files hold now (a pruned row is gone from them, so it is redone; a
file written twice is overwritten, its old twin deleted); a kill during 4 is an
interrupted run, resumed as any other. Rows a finished run wrote that are no longer
in its files (a result file deleted by hand) are not in the checkpoint either, so
they are redone too.

A retry holds the folder's writer lock (:func:`holding`) from its setup through the run
it resumes, so it refuses a run that is still going. The run folder may be someone
else's: it is checked as a run checks it before anything changes (no link, nothing
the manifest doesn't own), and the job is found by its name among the built-ins and
the job files of the folder the command runs from (or named with ``--job``), never
by a path or module the manifest holds.
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import datetime
import posixpath
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from toolkit.errors import InputDataError, SpecError
from toolkit.redaction import redact
from toolkit.run.input.identity import (
    InputChanged,
    RowChanges,
    can_compare_rows,
    changed_input_error,
    describe_rows,
    file_changes,
    input_identity,
    read_columns,
    row_changes,
)
from toolkit.run.output.fingerprint import changed_fields, results_fingerprint
from toolkit.run.output.run_directory import (
    CHECKPOINT_DIR,
    PENDING_CHECKPOINT_SUFFIX,
    RESULT_FILE_PREFIX,
    SUMMARY_FILE,
    Manifest,
    RunDirectory,
    RunState,
)
from toolkit.run.output.write_failure import failed_writes_explained
from toolkit.run.output.writer_lock import WriterLock
from toolkit.spec.job_definition import JobDefinition
from toolkit.spec.models import JobSpec
from toolkit.spec.row_contract import ERROR_COLUMN, FAILED_CHECKS_COLUMN

if TYPE_CHECKING:
    import pyarrow as pa

#: ``--only error``: the rows written with an error.
ERROR_ROWS = "error"


@dataclass(frozen=True)
class RetrySetup:
    """What setting up a retry found: which attempt, how many rows it redoes, and why."""

    attempt: int
    rows_to_redo: int
    rows_kept: int
    resumed: bool = False
    #: Nothing failed and nothing was left unreached: nothing to run.
    nothing_to_do: bool = False
    #: Rows the finished run wrote that its result files no longer hold: redone too.
    rows_missing: int = 0
    #: The input changed since the run wrote its rows (``--input-changed`` said what to do).
    input_changed: bool = False


def holding(output: str) -> WriterLock:
    """The writer lock a retry holds from its setup through its run: a retry of a run
    that is still going is refused (exit 2), naming it."""
    return WriterLock(RunDirectory(output), "toolkit retry")


def retry_spec(job: JobDefinition[Any], manifest: Manifest, output: str,
               sets: Sequence[str] = ()) -> JobSpec:
    """The spec of the run in ``output`` (its manifest), with ``--set`` changes on top."""
    from toolkit.spec.loading import parse_set_expression, set_dotted, validate_spec

    data = copy.deepcopy(manifest.spec)
    data.setdefault("data", {})["output"] = output
    for expression in sets:
        set_dotted(data, *parse_set_expression(expression))
    return validate_spec(job, data, source=f"the run in {output}" + (" + flags" if sets else ""))


def read_manifest_of(output: str) -> tuple[RunDirectory, Manifest]:
    """The run directory at ``output`` and its manifest.

    Raises:
        SpecError: there is no toolkit run there.
    """
    run_dir = RunDirectory(output)
    manifest = run_dir.read_manifest()
    if manifest is None:
        raise SpecError(
            f"{redact(output)} holds no toolkit run (no _manifest.json), so there is "
            "nothing to retry.",
            hint="Give the --output directory of an earlier toolkit run.",
        )
    run_dir.check_owned(manifest)  # before anything is read from it or changed
    return run_dir, manifest


def set_up_retry(spec: JobSpec, run_dir: RunDirectory, manifest: Manifest,
               only: Sequence[str] | None = None) -> RetrySetup:
    """Set up the attempt that redoes the failed rows of ``run_dir`` with ``spec``.

    Args:
        spec: The new spec (the run's, with the user's changes).
        only: Redo only rows that failed these checks (``error``: error rows);
            None redoes every row with an error or a failed check.

    Raises:
        SpecError: an ``--only`` name that is no check of the job, or an output this
            can't retry (not Parquet).
    """
    if spec.data.output_format != "parquet":
        raise SpecError(
            f"toolkit retry rewrites result files in place, which it does for Parquet "
            f"output only; {redact(spec.data.output)} holds {spec.data.output_format}.",
            hint="Rerun the failed rows as a new run: filter them out of the output into "
            "a file and give it as --input.",
        )
    known = [ERROR_ROWS, *spec.checks.enabled,
             *([spec.checks.custom_name] if spec.checks.custom_name else [])]
    unknown = [name for name in (only or ()) if name not in known]
    if unknown:
        raise SpecError(f"--only {', '.join(unknown)}: not a check of this run; it has "
                        f"{', '.join(known)}.",
                        hint="Name a check the run counted (the summary's checks line), "
                        "or 'error' for the error rows.")
    fingerprint = results_fingerprint(spec)
    attempts = manifest.attempts
    if attempts and attempts[-1].get("state") == "running" \
            and attempts[-1].get("fingerprint") == fingerprint:
        return RetrySetup(attempt=int(attempts[-1]["attempt"]), rows_to_redo=0, rows_kept=0,
                         resumed=True)
    if not attempts:  # the first run becomes attempt 1
        attempts.append({"attempt": 1, "fingerprint": manifest.fingerprint, "state": "done",
                         "changed": [], "only": None, "started": None, "rows": None})
    if attempts[-1].get("state") != "setup":
        changed = changed_fields(manifest.spec, redact(spec.model_dump(mode="json")))
        attempts.append({
            "attempt": len(attempts) + 1, "fingerprint": fingerprint, "state": "setup",
            "changed": changed, "only": list(only) if only else None,
            "started": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            "write_id": uuid.uuid4().hex[:12], "rows": None,
        })
    attempt = attempts[-1]
    write_id = attempt["write_id"]
    if write_id not in manifest.write_ids:
        manifest.write_ids.append(write_id)
    had_summary = run_dir.exists(SUMMARY_FILE)
    before = (manifest.fingerprint, manifest.spec)
    manifest.fingerprint, manifest.spec = fingerprint, spec.model_dump(mode="json")
    run_dir.write_manifest(manifest)  # 1: recorded before anything changes

    id_column = spec.data.id_column
    _clean_interrupted_writes(run_dir, manifest)
    files = run_dir.result_files(manifest)
    keep, redo_by_file, ids_found = _split_rows(run_dir, files, id_column, attempt.get("only"))
    redo = sum(redo_by_file.values())
    missing = _rows_missing(run_dir, ids_found) if had_summary else 0
    if attempts[0]["rows"] is None:
        attempts[0]["rows"] = ids_found + missing
    if redo == 0 and missing == 0 and had_summary:  # nothing failed or went: as it was
        attempts.pop()
        if len(attempts) == 1:
            attempts.clear()
        manifest.fingerprint, manifest.spec = before
        run_dir.write_manifest(manifest)
        return RetrySetup(attempt=len(attempts), rows_to_redo=0, rows_kept=len(keep),
                         nothing_to_do=True)
    # The summary goes first: a setup cut short after this is redone, never taken for a
    # finished run with nothing to redo (its failed rows may be pruned already).
    if had_summary:
        run_dir.check_still_ours()
        run_dir.fs.delete_file(f"{run_dir.root}/{SUMMARY_FILE}")
    _write_checkpoint(run_dir, manifest, keep, id_column)  # 2
    for path, rows in redo_by_file.items():  # 3
        if rows:
            _prune(run_dir, path, write_id, id_column, attempt.get("only"))
    attempt["rows"] = redo + missing if attempt["rows"] is None else attempt["rows"]
    attempt["state"] = "running"
    run_dir.write_manifest(manifest)  # 4: the pipeline resumes from here
    return RetrySetup(attempt=int(attempt["attempt"]), rows_to_redo=redo, rows_kept=len(keep),
                     rows_missing=missing)


def _rows_missing(run_dir: RunDirectory, ids_found: int) -> int:
    """Rows the finished run's summary counted that its result files no longer hold
    (by distinct ids: a row copied by hand doesn't make up for one deleted)."""
    summary = run_dir.read_json(SUMMARY_FILE) or {}
    written = summary.get("rows_in")
    return max(0, written - ids_found) if isinstance(written, int) else 0


def _clean_interrupted_writes(run_dir: RunDirectory, manifest: Manifest) -> None:
    """Delete result files whose write a stop or kill cut short, as Ray Data does before
    it resumes (``_clean_pending_checkpoints_task`` in ``ray/data/checkpoint``): such a
    file has a ``<name prefix>.pending.parquet`` checkpoint that was never committed,
    and its rows are not in the checkpoint, so they are redone."""
    prefixes = tuple(run_dir.uncommitted_pieces())
    if not prefixes:
        return
    run_dir.check_still_ours()
    for path in run_dir.result_files(manifest):
        if posixpath.basename(path).startswith(prefixes):
            run_dir.fs.delete_file(path)
    for prefix in prefixes:
        run_dir.fs.delete_file(
            f"{run_dir.root}/{CHECKPOINT_DIR}/{prefix}{PENDING_CHECKPOINT_SUFFIX}")


def _redo_mask(table: "pa.Table", only: Sequence[str] | None) -> "pa.ChunkedArray":
    """Which rows of a result table to redo."""
    import pyarrow as pa
    import pyarrow.compute as pc

    error = table.column(ERROR_COLUMN) if ERROR_COLUMN in table.column_names else \
        pa.nulls(table.num_rows, pa.string())
    checks = table.column(FAILED_CHECKS_COLUMN) if FAILED_CHECKS_COLUMN in table.column_names \
        else pa.nulls(table.num_rows, pa.string())
    if not only:
        return pc.or_(pc.is_valid(error), pc.is_valid(checks))
    mask = pa.array([False] * table.num_rows)
    for name in only:
        if name == ERROR_ROWS:
            hit = pc.is_valid(error)
        else:  # a whole name in the comma-separated list
            hit = pc.fill_null(pc.match_substring_regex(
                checks, pattern=rf"(^|,){_escaped(name)}(,|$)"), False)
        mask = pc.or_(mask, hit)
    return mask


def _escaped(name: str) -> str:
    import re

    return re.escape(name)


def _split_rows(run_dir: RunDirectory, files: list[str], id_column: str,
                only: Sequence[str] | None) -> tuple[list[Any], dict[str, int], int]:
    """(ids that stay, rows to redo in each file, distinct ids in the files)."""
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    keep: list[Any] = []
    redo: dict[str, int] = {}
    found: set[Any] = set()
    for path in files:
        schema = pq.read_schema(path, filesystem=run_dir.fs)
        columns = [c for c in (id_column, ERROR_COLUMN, FAILED_CHECKS_COLUMN) if c in schema.names]
        table = pq.read_table(path, columns=columns, filesystem=run_dir.fs)
        mask = _redo_mask(table, only)
        keep += table.column(id_column).filter(pc.invert(mask)).to_pylist()
        found.update(table.column(id_column).to_pylist())
        redo[path] = int(pc.sum(mask).as_py() or 0)
    return keep, redo, len(found)


def _write_checkpoint(run_dir: RunDirectory, manifest: Manifest, keep: "list[Any] | pa.Array",
                      id_column: str) -> None:
    """Ray Data's checkpoint (``_checkpoint/*.parquet``, one ``id`` column) holding
    exactly the ids that stay: a resumed run skips them at the read."""
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    if CHECKPOINT_DIR not in manifest.made:
        manifest.made.append(CHECKPOINT_DIR)
        run_dir.write_manifest(manifest)
    folder = f"{run_dir.root}/{CHECKPOINT_DIR}"
    run_dir.check_still_ours()
    if run_dir.exists(CHECKPOINT_DIR):
        run_dir.fs.delete_dir_contents(folder)
    run_dir.fs.create_dir(folder, recursive=True)
    if len(keep):  # each id once, even where a file was copied by hand
        ids = pc.unique(keep) if isinstance(keep, pa.Array) else list(dict.fromkeys(keep))
        # Whole or not at all: a file a full disk cut off would stop every resume.
        # Readers (Ray Data's, ours) skip a hidden name until it is renamed.
        name = f"{uuid.uuid4()}.parquet"
        try:
            pq.write_table(pa.table({id_column: ids}), f"{folder}/.{name}",
                           filesystem=run_dir.fs)
            run_dir.fs.move(f"{folder}/.{name}", f"{folder}/{name}")
        except OSError:
            with contextlib.suppress(OSError):
                run_dir.fs.delete_file(f"{folder}/.{name}")
            raise


def _prune(run_dir: RunDirectory, path: str, write_id: str, id_column: str,
           only: Sequence[str] | None) -> None:
    """Rewrite one result file without its rows to redo: the new file first (the
    attempt's write id, named after the old one), then the old one goes."""
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    table = pq.read_table(path, filesystem=run_dir.fs)
    _rewrite(run_dir, path, write_id, table.filter(pc.invert(_redo_mask(table, only))))


def _rewrite(run_dir: RunDirectory, path: str, write_id: str, kept: "pa.Table") -> None:
    """Replace the result file ``path`` with the rows ``kept`` of it: a new file first
    (the attempt's write id, named after the old one; none when no row is kept), then
    the old one goes."""
    import pyarrow.parquet as pq

    old = posixpath.basename(path)
    new = f"{run_dir.root}/{RESULT_FILE_PREFIX}{write_id}_{old[len(RESULT_FILE_PREFIX):]}"
    run_dir.check_still_ours()
    if kept.num_rows:
        pq.write_table(kept, new, filesystem=run_dir.fs)
    run_dir.fs.delete_file(path)


# -- an input that changed under a run ---------------------------------------------------


def input_differences(spec: JobSpec, manifest: Manifest) -> list[str]:
    """What changed in the input since the run in the folder recorded it (see
    :mod:`toolkit.run.input.identity`); empty when nothing did, or it can't be told."""
    return file_changes(manifest.input, input_identity(spec.data))


def settle_input(run_dir: RunDirectory, spec: JobSpec, columns: Sequence[str], state: RunState,
                 choice: InputChanged | None) -> RunState:
    """Record the input of a run starting here, or check it against the one the run
    in ``run_dir`` recorded; for a changed input, do what ``choice`` says. Before any
    row is run, holding the folder's lock.

    Args:
        columns: The input columns the job reads (rows whose values there changed are
            the changed rows).
        choice: ``keep``: leave every written row as it is, run the ids not written;
            ``redo``: also take out (to redo) written rows whose ``columns`` changed, and
            rows of ids no longer in the input. None: refuse a changed input.

    Returns:
        The run's state now: a finished run with ids left to run is unfinished again.

    Raises:
        InputChangedError: the input changed and ``choice`` is None, naming what changed.
        InputDataError: ``redo`` where the changed rows can't be told apart.
    """
    manifest = run_dir.read_manifest()
    assert manifest is not None, "prepare() writes the manifest"
    now = input_identity(spec.data)
    if state is RunState.EMPTY:
        manifest.input = now
        run_dir.write_manifest(manifest)
        return state
    pending = (manifest.input or {}).get("pending_write_id")
    changes = file_changes(manifest.input, now)
    if not changes and pending is None:
        return state
    finished = state is RunState.COMPLETE
    compare = choice is InputChanged.REDO or (choice is None and can_compare_rows(spec.data))
    rows = (row_changes(spec.data, columns, run_dir.result_files(manifest), run_dir.fs)
            if compare else None)
    if choice is None:
        raise changed_input_error(spec.data, changes or ["a change left half done"],
                                  describe_rows(rows, columns), finished=finished)
    if choice is InputChanged.REDO and rows is None:
        raise InputDataError(
            f"--input-changed redo: can't tell which rows of {redact(spec.data.input)} "
            "changed: the output must be Parquet holding every column the job reads "
            f"({', '.join(columns)}), and the input a CSV, Parquet or JSON file or folder "
            "that Arrow reads here. Nothing was run.",
            hint="Use --input-changed keep, or --overwrite to start over.")
    drop = _dropped(rows, choice)
    if finished and spec.data.output_format != "parquet":
        raise InputDataError(
            f"--input-changed {choice.value}: a finished run is reopened to run the ids it "
            f"hasn't written, which the toolkit does for Parquet output only; "
            f"{redact(spec.data.output)} holds {spec.data.output_format}. Nothing was run.",
            hint="Pass --overwrite to start over with the input as it is now.")
    if finished and rows is not None and len(drop) == 0 and rows.added == 0:
        state_now = state  # nothing to run: it stays finished
    elif not finished and len(drop) == 0 and pending is None:
        state_now = state  # resumed as it is
    else:
        _take_out(run_dir, manifest, spec.data.id_column, drop)
        state_now = RunState.PARTIAL
    if choice is InputChanged.REDO and spec.data.rows is not None:
        run_dir.clear_staged_input()  # the run reads the first --rows rows of the input now
    manifest = run_dir.read_manifest()
    assert manifest is not None
    manifest.input = now
    run_dir.write_manifest(manifest)
    return state_now


def _dropped(rows: RowChanges | None, choice: InputChanged) -> "pa.Array":
    import pyarrow as pa

    if rows is None or choice is InputChanged.KEEP:
        return pa.array([])
    return pa.concat_arrays([rows.changed, rows.removed.cast(rows.changed.type)])


def _take_out(run_dir: RunDirectory, manifest: Manifest, id_column: str,
              drop: "pa.Array") -> None:
    """Leave the folder an unfinished run holding every written row but those of
    ``drop``, which the resumed run redoes (or, no longer in the input, never runs).

    As a retry's setup, repairable under kills: the write id of the pruned files is
    recorded first and reused by a setup done again; the checkpoint is written (every
    id the files hold, less ``drop``) before the summary goes, so the folder reads as
    finished or as resumable at every step; each file is rewritten before its old
    self is deleted.
    """
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    record = manifest.input if manifest.input is not None else {}
    write_id = record.get("pending_write_id") or uuid.uuid4().hex[:12]
    record["pending_write_id"] = write_id
    manifest.input = record
    if write_id not in manifest.write_ids:
        manifest.write_ids.append(write_id)
    run_dir.write_manifest(manifest)
    if run_dir.exists(CHECKPOINT_DIR):
        _clean_interrupted_writes(run_dir, manifest)
    files = run_dir.result_files(manifest)
    kept: list[pa.Array] = []
    hit: list[str] = []
    for path in files:
        ids = pq.read_table(path, columns=[id_column], filesystem=run_dir.fs).column(id_column)
        gone = pc.is_in(ids, value_set=drop.cast(ids.type)) if len(drop) else \
            pa.repeat(False, len(ids))
        kept += ids.filter(pc.invert(gone)).chunks
        if pc.any(gone).as_py():
            hit.append(path)
    keep = pa.concat_arrays(kept) if kept else pa.array([])
    _write_checkpoint(run_dir, manifest, keep, id_column)
    if run_dir.exists(SUMMARY_FILE):
        run_dir.check_still_ours()
        run_dir.fs.delete_file(f"{run_dir.root}/{SUMMARY_FILE}")
    for path in hit:
        table = pq.read_table(path, filesystem=run_dir.fs)
        ids = table.column(id_column)
        _rewrite(run_dir, path, write_id,
                 table.filter(pc.invert(pc.is_in(ids, value_set=drop.cast(ids.type)))))


def prepare_retry(output: str, sets: Sequence[str] = (), only: Sequence[str] | None = None,
                  job: str | None = None, input_changed: InputChanged | None = None,
                  ) -> tuple[JobDefinition[Any], JobSpec, RetrySetup]:
    """Everything ``toolkit retry`` does before the run: the job and new spec of the run in
    ``output``, and its failed rows taken out (see the module's steps). Call it holding
    :func:`holding`.

    Args:
        job: The job as ``toolkit run`` names it (a built-in, a job file); default:
            the one the manifest names, found by that name (see
            :func:`~toolkit.spec.jobs.catalog.find_job_named`).
        input_changed: What to do where the input changed since the run wrote its
            rows (the run does it: :func:`settle_input`); None refuses such a retry.

    Raises:
        InputChangedError: the input changed and ``input_changed`` is None, before
            anything in the folder changed.
        SpecError: no toolkit run in ``output``, or a folder that is not the toolkit's
            as it stands; its job can't be found from here, or ``job`` is another
            job; a ``--set`` or ``--only`` that doesn't fit it.
    """
    from toolkit.spec.jobs.catalog import find_job_named, load_job

    run_dir, manifest = read_manifest_of(output)
    name = manifest.spec.get("job")
    if not isinstance(name, str):
        raise SpecError(f"{redact(output)}/_manifest.json names no job.",
                        hint="Give the --output directory of an earlier toolkit run.")
    definition = load_job(job) if job is not None else load_job(find_job_named(name))
    if definition.name != name:
        raise SpecError(f"--job {job} is job {definition.name!r}, but the run in "
                        f"{redact(output)} is of job {name!r}.",
                        hint=f"Name the job file of {name!r} with --job.")
    spec = retry_spec(definition, manifest, output, sets)
    changes = input_differences(spec, manifest)
    if changes and input_changed is None:
        columns = read_columns(definition, spec)
        rows = (row_changes(spec.data, columns, run_dir.result_files(manifest), run_dir.fs)
                if can_compare_rows(spec.data) else None)
        raise changed_input_error(spec.data, changes, describe_rows(rows, columns),
                                  finished=run_dir.exists(SUMMARY_FILE), retry=True)
    with failed_writes_explained(output, lambda: None):  # a full disk: exit 11, resumable
        setup = set_up_retry(spec, run_dir, manifest, only)
    return definition, spec, dataclasses.replace(setup, input_changed=bool(changes))
