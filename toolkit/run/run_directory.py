"""Where results go: the output directory's layout and state, and the streaming write.

An output directory holds result files plus our bookkeeping, all under names that
start with ``_`` so Parquet/Arrow readers skip them:

- ``_spec.json``: the spec that produced the results (a rerun must match it);
- ``_checkpoint/``: Ray Data's checkpoint of written row ids, while a run is
  unfinished; it is what a rerun resumes from;
- ``_input/``: the exact input rows of a ``--rows``-limited run, staged once so a
  resumed run reads the same rows (see ``resumable_input``);
- ``_summary.json``: written when a run completes.
"""

from __future__ import annotations

import enum
import hashlib
import json
import uuid
from typing import TYPE_CHECKING, Any

from toolkit.errors import SpecError
from toolkit.spec.models import DataConfig, JobSpec

if TYPE_CHECKING:
    import pyarrow.fs
    from ray.data import Dataset

SUMMARY_FILE = "_summary.json"
SPEC_FILE = "_spec.json"
CHECKPOINT_DIR = "_checkpoint"
STAGED_INPUT_DIR = "_input"


class OutputState(enum.Enum):
    EMPTY = "empty"  # nothing from an earlier run
    PARTIAL = "partial"  # an unfinished run: resume it
    COMPLETE = "complete"  # a finished run of the same spec: nothing to do


def output_filesystem(output: str) -> tuple["pyarrow.fs.FileSystem", str]:
    """The Arrow filesystem and path for a local directory or a cloud URI."""
    import os

    import pyarrow.fs

    if "://" in output:
        return pyarrow.fs.FileSystem.from_uri(output)
    return pyarrow.fs.LocalFileSystem(), os.path.abspath(os.path.expanduser(output))


def output_path(output: str, name: str) -> str:
    """``name`` inside the output directory, as a path or URI Ray and Arrow accept."""
    if "://" in output:
        return output.rstrip("/") + "/" + name
    return output_filesystem(output)[1] + "/" + name


def _exists(output: str, name: str) -> bool:
    import pyarrow.fs

    fs, path = output_filesystem(output)
    return fs.get_file_info(f"{path}/{name}").type != pyarrow.fs.FileType.NotFound


def existing_result_files(output: str) -> list[str]:
    """Result files in ``output``; our ``_`` bookkeeping and hidden files don't count."""
    import pyarrow.fs

    fs, path = output_filesystem(output)
    info = fs.get_file_info(path)
    if info.type == pyarrow.fs.FileType.NotFound:
        return []
    if info.type != pyarrow.fs.FileType.Directory:
        raise SpecError(
            f"data.output: {output} exists and is a file, not a directory.",
            hint="Choose a directory with --output.",
        )
    selector = pyarrow.fs.FileSelector(path, recursive=True)
    found = []
    for item in fs.get_file_info(selector):
        relative = item.path[len(path):].strip("/").split("/")
        if item.type == pyarrow.fs.FileType.File and not any(
            part.startswith(("_", ".")) for part in relative
        ):
            found.append(item.path)
    return found


def results_fingerprint(spec: JobSpec) -> str:
    """What decides the results: job, options, input rows, model and sampling.

    Batch size, concurrency, partitions and compute are left out on purpose: a
    rerun after an out-of-memory crash may change them and still resume.
    """
    decisive = {
        "job": spec.job,
        "options": spec.options.model_dump(mode="json"),
        "input": [spec.data.input, spec.data.format, spec.data.rows, spec.data.seed],
        "output_format": spec.data.output_format,
        "model": spec.engine.model,
        "sampling": spec.sampling.model_dump(mode="json"),
    }
    return hashlib.sha256(json.dumps(decisive, sort_keys=True).encode()).hexdigest()[:16]


def prepare_output(spec: JobSpec, overwrite: bool, resumable: bool) -> OutputState:
    """Check the output directory before any model loads and say what this run must do.

    Returns:
        EMPTY for a fresh run, PARTIAL to resume an unfinished run of the same spec,
        COMPLETE when the same spec already finished there.

    Raises:
        SpecError: the directory holds results of a different spec, or an
            unfinished run that can't be resumed, or it isn't writable.
    """
    import pyarrow.fs

    data = spec.data
    fs, path = output_filesystem(data.output)
    existing = existing_result_files(data.output)
    has_checkpoint = _exists(data.output, CHECKPOINT_DIR)
    has_earlier_run = bool(existing) or has_checkpoint or _exists(data.output, SPEC_FILE)
    fingerprint = results_fingerprint(spec)
    state = OutputState.EMPTY
    if has_earlier_run and not overwrite:
        earlier = _read_json(data.output, SPEC_FILE) or {}
        if earlier.get("fingerprint") != fingerprint:
            raise SpecError(
                f"data.output: {data.output} holds {len(existing)} result file(s) from a run "
                "with a different spec (job, options, input, rows, model or sampling).",
                hint="Pass --overwrite to replace them, or choose another --output.",
            )
        if _exists(data.output, SUMMARY_FILE):
            return OutputState.COMPLETE
        if not resumable or (existing and not has_checkpoint):
            raise SpecError(
                f"data.output: {data.output} holds {len(existing)} result file(s) of an "
                "unfinished run that can't be resumed (no checkpoint of written rows).",
                hint="Pass --overwrite to start again, or choose another --output.",
            )
        state = OutputState.PARTIAL
    try:
        if overwrite and has_earlier_run:
            fs.delete_dir_contents(path)
        fs.create_dir(path, recursive=True)
        if isinstance(fs, pyarrow.fs.LocalFileSystem):
            probe = f"{path}/.toolkit-write-check-{uuid.uuid4().hex}"
            with fs.open_output_stream(probe):
                pass
            fs.delete_file(probe)
        _write_json(data.output, SPEC_FILE, {"fingerprint": fingerprint,
                                             "spec": spec.model_dump(mode="json")})
    except OSError as exc:
        raise SpecError(
            f"data.output: can't write to {data.output}: {exc}.",
            hint="Choose a directory you can write to with --output.",
        ) from None
    return state


def finish_output(data: DataConfig) -> None:
    """After the summary is written: the checkpoint and staged input are no longer needed."""
    fs, path = output_filesystem(data.output)
    for name in (CHECKPOINT_DIR, STAGED_INPUT_DIR):
        if _exists(data.output, name):
            fs.delete_dir(f"{path}/{name}")


def checkpointed_row_count(output: str) -> int:
    """Rows Ray Data's checkpoint records as written (0 without a checkpoint)."""
    if not _exists(output, CHECKPOINT_DIR):
        return 0
    import pyarrow.dataset as pads

    fs, path = output_filesystem(output)
    return pads.dataset(f"{path}/{CHECKPOINT_DIR}", filesystem=fs, format="parquet").count_rows()


def write_output(ds: "Dataset", data: DataConfig, counted_stage: str) -> int | None:
    """Execute the pipeline, streaming results into ``data.output``.

    Returns:
        How many rows entered the operator whose name contains ``counted_stage``
        (read from Ray Data's execution stats), or None if Ray didn't report it.
        This is the independent "rows in" figure the summary checks against.
    """
    writer = {
        "parquet": ds.write_parquet,
        "csv": ds.write_csv,
        "json": ds.write_json,
    }[data.output_format]
    writer(data.output)
    written = getattr(ds, "_write_ds", None)
    if written is None:
        return None
    return rows_into_stage(written.get_stats_summary(), counted_stage)


def rows_into_stage(stats: Any, stage: str) -> int | None:
    """Rows that entered the (possibly fused) operator running ``stage``."""
    pending = [stats]
    while pending:
        summary = pending.pop()
        for op in summary.operators_stats:
            if stage not in op.operator_name:
                continue
            if op.total_input_num_rows:
                return int(op.total_input_num_rows)
            # Fused with the read, so no input count: the stage is 1:1, and when it
            # ends the fused operator, what the operator emitted is what came in.
            if stage in op.operator_name.split("->")[-1] and op.output_num_rows is not None:
                return int(op.output_num_rows.sum)
        pending.extend(getattr(summary, "parents", []))
    return None


def _read_json(output: str, name: str) -> dict[str, Any] | None:
    fs, path = output_filesystem(output)
    try:
        with fs.open_input_stream(f"{path}/{name}") as stream:
            return json.loads(stream.read())
    except (FileNotFoundError, OSError, ValueError):
        return None


def _write_json(output: str, name: str, content: dict[str, Any]) -> None:
    fs, path = output_filesystem(output)
    with fs.open_output_stream(f"{path}/{name}") as stream:
        stream.write(json.dumps(content, indent=2, default=str).encode())
