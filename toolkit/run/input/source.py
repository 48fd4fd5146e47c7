"""The input side of a resumable run: a plan Ray Data's checkpointing can filter.

Ray Data checkpointing (``ray.data.checkpoint.CheckpointConfig``) records the id of
every written row and, on a rerun, drops those rows right at the Read operator. It
applies to read -> map -> write plans, so:

- generated samples come from the caller's sample provider as a datasource
  (their Read yields the id column);
- a ``--rows``-limited file input is staged once into ``<output>/_input`` (the
  limit and the split into blocks happen there), and the run reads that; a
  resumed run reads the very same rows, where ``limit`` after a filtered read
  would take different ones;
- a streamed Hugging Face dataset has no such Read, so it is not resumable and
  the run says so;
- a format that stages its own rows (an OpenAI Batch API request file, see
  :mod:`toolkit.run.input.formats`) is read from what it staged, whatever ``--rows`` says.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from toolkit.errors import InputDataError
from toolkit.run.input.checks import (
    TABLE_FORMATS,
    check_unique_ids,
    ids_source,
    read_id_column,
)
from toolkit.run.input.csv_files import local_csv_schema
from toolkit.run.input.file_access import HF_PREFIX, input_format
from toolkit.run.input.formats import run_format
from toolkit.run.input.reading import first_rows, input_schema, open_input
from toolkit.run.output.run_directory import STAGED_INPUT_DIR, RunDirectory
from toolkit.run.progress.sources import expected_rows
from toolkit.run.run_plan import RunPlan
from toolkit.spec.models import SAMPLE_PREFIX, DataConfig
from toolkit.spec.run_settings import RunData
from toolkit.spec.sample_sources import require_sample

if TYPE_CHECKING:
    import pyarrow as pa
    from ray.data import Dataset

NOT_RESUMABLE_NOTE = (
    "Resume is not available for a streamed Hugging Face dataset (Ray Data's "
    "checkpointing needs a file or generated source): if this run is interrupted, "
    "rerun it with --overwrite, or first save the dataset to parquet and use that."
)


@dataclass
class RunSource:
    dataset: "Dataset"
    resumable: bool
    note: str | None = None


def open_run_source(plan: RunPlan, check_schema: Callable[["pa.Schema"], None]) -> RunSource:
    """The dataset ``plan`` reads, shaped so that a rerun can resume it.

    ``check_schema`` sees the input's schema before anything is staged or run, so
    a missing column fails fast. The ids of a file input are checked next (unique,
    none missing: see :mod:`toolkit.run.input.checks`), from the rows the run reads;
    preflight has checked what it could before Ray started
    (:func:`~toolkit.run.input.checks.check_input`), so this catches what only the
    run can read: a folder's or a remote file's first ``--rows``, as staged. Where
    preflight read every id already (:attr:`~toolkit.run.run_plan.RunPlan.input_rows`),
    they are not read again; ``sample:`` inputs come from the plan's ``samples``.
    """
    import ray.data

    data, run_dir, samples = plan.data, plan.run_dir, plan.samples
    if data.input.startswith(SAMPLE_PREFIX):
        name = require_sample("data.input", data.input, samples, "input")
        assert samples is not None
        ds = samples.open_input(name, data.rows, data.seed, data.partitions)
        check_schema(input_schema(ds, data.input))
        return RunSource(ds, True)
    staged_by_format = run_format(data).open(plan)
    if staged_by_format is not None:  # its ids are checked as it stages them
        check_schema(input_schema(staged_by_format, data.input))
        return RunSource(staged_by_format, True)
    ds = open_input(data)
    schema = local_csv_schema(data) or input_schema(ds, data.input)
    check_schema(schema)
    if data.input.startswith(HF_PREFIX):  # streamed: its ids can't be read ahead
        return RunSource(ds.limit(data.rows) if data.rows else ds, False, NOT_RESUMABLE_NOTE)
    if data.rows is None:
        rows = plan.input_rows or check_input_ids(data, schema.names)
        return RunSource(in_pieces(lambda blocks: open_input(data, blocks), input_format(data),
                                   plan, rows), True)
    staged = stage_input(plan, run_dir)
    rows = check_input_ids(data, schema.names, run_dir)
    return RunSource(in_pieces(lambda _: ray.data.read_parquet(staged), "parquet", plan, rows),
                     True)


#: A file input is cut into at least this many pieces of whole batches...
MIN_PIECES = 10
#: ...of at most this many batches each, so a million rows aren't a million files.
MAX_BATCHES_PER_PIECE = 32


def rows_per_piece(total_rows: int | None, batch_size: int) -> int:
    """Rows per result file: a tenth of a small input (in whole batches), at most
    :data:`MAX_BATCHES_PER_PIECE` batches; that many when the total is unknown."""
    batches = MAX_BATCHES_PER_PIECE
    if total_rows:
        batches = min(batches, max(1, math.ceil(total_rows / MIN_PIECES / batch_size)))
    return batches * batch_size


#: Ray's readers that cut a file's blocks to ``override_num_blocks`` as they stream
#: it; its Parquet reader makes blocks by bytes and ignores it.
SPLITTING_READERS = ("csv", "json")


def in_pieces(open_blocks: Callable[[int | None], "Dataset"], fmt: str, plan: RunPlan,
              total_rows: int | None = None) -> "Dataset":
    """The run's input in blocks no larger than a piece.

    Each block is written as one result file once its rows are through the model, so
    a 640-row file read as one block would show 0 rows until the end and lose them all
    to a kill; in pieces, progress moves, and a kill loses at most a piece.

    Neither way adds an operator to the plan. Where the rows are counted and the
    reader can, it cuts the blocks itself (``override_num_blocks``); elsewhere Ray
    Data's streaming repartition does (not strict: smaller blocks stay as they are),
    fused into the read task. Alone, the repartition was an operator of its own, a
    Ray task and a trip through the object store for every block: the slowest of a
    million-row CSV run (a free model: 19.7 s of execution with it, 7.5 s without),
    2 of 7.5 s of tabular-predict's on a million Parquet rows.

    Args:
        open_blocks: Opens the input in at least that many blocks (None: as Ray reads it).
        fmt: The format ``open_blocks`` reads (:func:`~toolkit.run.input.reading.input_format`).
        total_rows: The rows the run reads, where counted already (a CSV's ids);
            default: ``--rows``, or a Parquet input's count from its footers.
    """
    batch_size = plan.batch_size
    total_rows = total_rows or expected_rows(plan)
    piece = rows_per_piece(total_rows, batch_size)
    if total_rows is None or fmt not in SPLITTING_READERS:
        # Ray fuses Read -> MapBatches -> StreamingRepartition, never Read -> StreamingRepartition.
        return (open_blocks(None)
                .map_batches(blocks_as_read, batch_size=None, batch_format="pyarrow",
                             zero_copy_batch=True)
                .repartition(target_num_rows_per_block=piece))
    return open_blocks(math.ceil(total_rows / piece))


def blocks_as_read(block: "pa.Table") -> "pa.Table":
    """Nothing: the map that lets Ray fuse a repartition into the read (:func:`in_pieces`)."""
    return block


def check_input_ids(data: DataConfig, columns: list[str],
                    run_dir: RunDirectory | None = None) -> int | None:
    """Refuse repeated or missing ids, reading only ``data.id_column``: of the input
    file(s), or with ``run_dir`` of its staged ``--rows`` slice (exactly the rows run).

    Inputs Arrow can't read alone (http(s) URLs, odd files) go unchecked here.

    Returns:
        The rows read (the run's rows, counted for free), or None where unchecked.
    """
    fmt = input_format(data)
    if fmt not in TABLE_FORMATS:  # a folder of pictures: ids are file paths
        return None
    if run_dir is not None:
        found = read_id_column(f"{run_dir.root}/{STAGED_INPUT_DIR}", "parquet",
                               data.id_column, run_dir.fs)
    elif data.input.startswith(("http://", "https://")):
        return None
    else:
        path = data.input if "://" in data.input else str(Path(data.input).expanduser())
        found = read_id_column(path, fmt, data.id_column, dialect=data.csv)
    if found is None:
        return None
    ids = found[0]
    try:
        check_unique_ids(ids, data.id_column, ids_source(data), columns)
    except InputDataError:
        if run_dir is not None:  # a fixed file must be staged afresh
            run_dir.clear_staged_input()
        raise
    return len(ids)


def stage_input(run: RunData, run_dir: RunDirectory) -> str:
    """Write the first ``data.rows`` input rows of ``run`` (its plan) to ``<output>/_input``
    once; return its path."""
    data = run.data
    assert data.rows is not None
    staged = run_dir.staged_input_path
    if run_dir.staged_input_complete():
        return staged
    run_dir.begin_staged_input()  # recorded in the manifest; a copy cut short is cleared
    here = first_rows(data, data.rows)
    if here is not None:  # a local file: copied here in a second, not by a Ray job
        write_staged_rows(run_dir, here, data.rows, data.partitions)
    else:
        with checkpointing(None):  # staging copies the input once; it has nothing to resume
            ds = open_input(data).limit(data.rows)
            if data.partitions:
                ds = ds.repartition(
                    target_num_rows_per_block=math.ceil(data.rows / data.partitions))
            ds.write_parquet(staged)
    run_dir.mark_staged_input_complete()
    return staged


def write_staged_rows(run_dir: RunDirectory, batches: Iterator["pa.RecordBatch"], rows: int,
                      partitions: int | None) -> None:
    """``batches`` into ``_input/part-NNNNN.parquet``: ``partitions`` files of equal
    rows when set (each a Ray Data block when read), else one."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    per_file = math.ceil(rows / partitions) if partitions else rows
    writer: pq.ParquetWriter | None = None
    sink = None
    written = files = 0
    schema = None
    for batch in batches:
        schema = batch.schema
        while batch.num_rows:
            if writer is None:
                sink = run_dir.open_staged_file(f"part-{files:05d}.parquet")
                writer = pq.ParquetWriter(sink, batch.schema)
                files += 1
            take = min(batch.num_rows, per_file - written)
            writer.write_batch(batch.slice(0, take))
            batch, written = batch.slice(take), written + take
            if written >= per_file:
                writer.close()
                sink.close()
                writer, written = None, 0
    if writer is not None:
        writer.close()
        sink.close()
    elif files == 0 and schema is not None:  # no data rows: the header's columns still read
        with run_dir.open_staged_file("part-00000.parquet") as empty:
            pq.write_table(pa.Table.from_batches([], schema=schema), empty)


@contextlib.contextmanager
def checkpointing(config: object | None) -> Iterator[None]:
    """Set Ray Data's checkpoint config for the runs inside the block, then restore it."""
    from ray.data import DataContext

    context = DataContext.get_current()
    previous = context.checkpoint_config
    context.checkpoint_config = config
    try:
        yield
    finally:
        context.checkpoint_config = previous


def checkpoint_config(run_dir: RunDirectory, id_column: str) -> object:
    """Ray Data's checkpoint of written ids, kept in ``<output>/_checkpoint``.

    We delete it ourselves once the summary is written, so a crash between the two
    can't leave results without either a summary or a checkpoint.
    """
    from ray.data.checkpoint import CheckpointConfig

    return CheckpointConfig(
        id_column=id_column,
        checkpoint_path=run_dir.checkpoint_path,
        delete_checkpoint_on_success=False,
    )
