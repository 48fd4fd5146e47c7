"""Where results go: checking the output location up front, and the streaming write."""

from __future__ import annotations

import uuid
from typing import TYPE_CHECKING, Any

from toolkit.errors import SpecError
from toolkit.spec import DataConfig

if TYPE_CHECKING:
    import pyarrow.fs
    from ray.data import Dataset

SUMMARY_FILE = "_summary.json"


def output_filesystem(output: str) -> tuple["pyarrow.fs.FileSystem", str]:
    """The Arrow filesystem and path for a local directory or a cloud URI."""
    import os

    import pyarrow.fs

    if "://" in output:
        return pyarrow.fs.FileSystem.from_uri(output)
    return pyarrow.fs.LocalFileSystem(), os.path.abspath(os.path.expanduser(output))


def existing_result_files(output: str) -> list[str]:
    """Data files already in ``output`` (our summary and hidden files don't count)."""
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
    return [
        f.path
        for f in fs.get_file_info(selector)
        if f.type == pyarrow.fs.FileType.File and not f.base_name.startswith(("_", "."))
    ]


def prepare_output(data: DataConfig, overwrite: bool) -> None:
    """Make sure results can be written, before any model loads.

    Raises:
        SpecError: the directory holds earlier results (and ``overwrite`` is off), or
            it can't be created or written.
    """
    import pyarrow.fs

    existing = existing_result_files(data.output)
    fs, path = output_filesystem(data.output)
    if existing and not overwrite:
        raise SpecError(
            f"data.output: {data.output} already holds {len(existing)} result file(s) "
            "from an earlier run.",
            hint="Pass --overwrite to replace them, or choose another --output.",
        )
    try:
        if existing:
            fs.delete_dir_contents(path)
        fs.create_dir(path, recursive=True)
        if isinstance(fs, pyarrow.fs.LocalFileSystem):
            probe = f"{path}/.toolkit-write-check-{uuid.uuid4().hex}"
            with fs.open_output_stream(probe):
                pass
            fs.delete_file(probe)
    except OSError as exc:
        raise SpecError(
            f"data.output: can't write to {data.output}: {exc}.",
            hint="Choose a directory you can write to with --output.",
        ) from None


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
