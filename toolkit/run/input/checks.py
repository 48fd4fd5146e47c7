"""The checks of a run's rows before any model loads: one id per row, one meaning per column.

Results are keyed on ``data.id_column``: Ray Data's checkpoint records the ids
written and a rerun skips them, so rows sharing an id are one row to a resumed run
(the others are skipped as "already written"), and a row without one can't be told
apart. :func:`check_unique_ids` reads just that column (Arrow, no Ray, no model)
and refuses such input, naming examples and the fix.

Every output row is the input row plus the job's columns plus the toolkit's own
(``error``, token counts). :func:`check_written_columns` refuses a result column
named like the id column, an input column or one of the toolkit's, and an input
column named like one the pipeline writes, each of which would silently replace
the other.

:func:`check_input` runs what of this needs no Ray before Ray starts (preflight),
before the output folder is touched: a missing or empty local input, its format,
a single local file's columns (a JSON file line by line) and the ids of the rows
the run reads, so bad input is refused in a second and leaves nothing behind.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from toolkit.errors import InputDataError, SpecError
from toolkit.run.input.csv_files import (
    check_csv_text,
    csv_dataset_format,
    csv_delimiter,
    local_csv_schema,
)
from toolkit.run.input.file_access import HF_PREFIX, check_local_input, input_format
from toolkit.run.input.json_files import read_local_json
from toolkit.run.input.reading import check_required_columns, first_rows, local_parquet_schema
from toolkit.spec.job_definition import JobDefinition
from toolkit.spec.models import SAMPLE_PREFIX, CsvDialect, DataConfig, JobSpec
from toolkit.spec.row_contract import (
    ERROR_COLUMN,
    RAY_LLM_ERROR_COLUMN,
    SAMPLING_PARAMS_COLUMN,
    TASK_CONTRACTS,
)

if TYPE_CHECKING:
    import pyarrow as pa
    import pyarrow.fs

_SHOWN = 3

#: Columns the toolkit writes into every output row, and what they hold.
TOOLKIT_COLUMNS: dict[str, str] = {
    ERROR_COLUMN: "why a row failed",
    "num_input_tokens": "prompt tokens per row",
    "num_generated_tokens": "generated tokens per row",
    RAY_LLM_ERROR_COLUMN: "Ray Data LLM's row error",
    SAMPLING_PARAMS_COLUMN: "each row's sampling parameters",
}


#: Formats of rows in files, whose ids Arrow reads here.
TABLE_FORMATS = ("csv", "parquet", "json")


# -- before Ray --------------------------------------------------------------------------


def check_input(job: JobDefinition[Any], spec: JobSpec) -> int | None:
    """Check ``data.input`` as far as this machine can without Ray; the rows it counted.

    In order: a local input exists and is not empty; its format is known; a single
    local CSV, Parquet or JSON file has the job's columns and the id column, none
    that the pipeline writes, and (JSON) every line reads as a row; and the ids of
    the rows the run reads (every row, or with ``--rows`` the first N, as staged)
    are unique and present. A folder's or an s3:// file's ids are read here only
    for a run of every row, as the run reads them anyway; with ``--rows`` they are
    checked once staged. Generated and streamed inputs, http(s) URLs and a format
    that stages its own rows are checked as the run opens them.

    Returns:
        The input's rows where every id was read (a run of every row of a file or
        a local folder), so the run needn't read them again; else None.

    Raises:
        InputDataError: naming the file, column, line or rows and what to do.
        SpecError: an unknown format, or a result column named like an input column.
    """
    data = spec.data
    if data.input.startswith((SAMPLE_PREFIX, HF_PREFIX)):
        return None
    check_local_input(data)
    fmt = input_format(data)
    if fmt not in TABLE_FORMATS or data.input.startswith(("http://", "https://")):
        return None
    local = "://" not in data.input
    path = str(Path(data.input).expanduser()) if local else data.input
    if local and os.path.isfile(path):
        columns, ids = _check_local_file(job, spec, fmt)
        check_csv_text(data)
    elif data.rows is None:
        found = read_id_column(path, fmt, data.id_column, dialect=data.csv)
        if found is None:  # Ray's reader reports any real problem
            return None
        ids, columns = found
    else:  # a folder's first --rows are staged by Ray; its ids' type shows already
        if local:
            _check_folder_id_type(path, fmt, data)
        return None
    if ids is None:
        return None
    check_unique_ids(ids, data.id_column, ids_source(data), columns)
    return len(ids) if data.rows is None else None


def _check_folder_id_type(path: str, file_format: str, data: DataConfig) -> None:
    """The type of a local folder's id column, from its schema alone (a Parquet
    footer; a JSON file's first block). CSV ids are read as text."""
    import pyarrow.dataset as pads

    if file_format == "csv":
        return
    try:
        schema = pads.dataset(path, format=file_format).schema
    except Exception:  # noqa: BLE001 - an odd file, a remote one without credentials
        return  # Ray's reader reports any real problem, and the run checks the type
    if data.id_column in schema.names:
        check_id_type(schema.field(data.id_column).type, data.id_column, data.input,
                      schema.names)


def _check_local_file(job: JobDefinition[Any], spec: JobSpec,
                      fmt: str) -> tuple[list[str], "pa.ChunkedArray | None"]:
    """A single local file's columns checked; its column names and the ids of the
    rows the run reads (None where Arrow can't read them alone)."""
    import pyarrow as pa

    data = spec.data
    table = read_local_json(data) if fmt == "json" else None
    schema = table.schema if table is not None else (
        local_csv_schema(data) if fmt == "csv" else local_parquet_schema(data))
    assert schema is not None
    check_input_columns(job, spec, schema)
    if table is not None:  # read whole already; a limited run stages its first rows
        ids = table.column(data.id_column)
        return schema.names, ids.slice(0, data.rows) if data.rows else ids
    if data.rows is None:
        found = read_id_column(str(Path(data.input).expanduser()), fmt, data.id_column,
                               dialect=data.csv)
        return schema.names, found[0] if found is not None else None
    batches = first_rows(data, data.rows, columns=[data.id_column])
    assert batches is not None
    return schema.names, pa.chunked_array([batch.column(0) for batch in batches],
                                          type=schema.field(data.id_column).type)


def check_input_columns(job: JobDefinition[Any], spec: JobSpec, schema: "pa.Schema") -> None:
    """The input's columns against the job's: every column a stage reads and the id
    column are there, and none is named like a column the pipeline writes.

    Raises:
        InputDataError: a column is missing (naming those there) or is the pipeline's.
        SpecError: a result column is named like an input column.
    """
    options = job.options_of(spec)
    required = [c for stage in job.stages for c in stage.required_columns(options)]
    check_required_columns(schema, list(dict.fromkeys([*required, spec.data.id_column])),
                           spec.data.input, id_column=spec.data.id_column,
                           delimiter=csv_delimiter(spec.data))
    check_id_type(schema.field(spec.data.id_column).type, spec.data.id_column,
                  spec.data.input, schema.names)
    check_written_columns(job, spec, schema.names)


# -- ids -------------------------------------------------------------------------------


def ids_source(data: DataConfig) -> str:
    """The input as an id problem names it: with ``--rows``, the rows the run reads."""
    if data.rows is None:
        return data.input
    return f"{data.input} (in the first {data.rows:,} rows, which this run reads)"


def read_id_column(path: str, file_format: str, id_column: str,
                   filesystem: "pyarrow.fs.FileSystem | None" = None,
                   dialect: CsvDialect | None = None
                   ) -> "tuple[pa.ChunkedArray, list[str]] | None":
    """Just the id column of a CSV, Parquet or JSON file (or folder of them), with the
    names of its columns, or None where Arrow can't read it alone (Ray's reader then
    reports any real problem). A CSV file is read in ``dialect`` (default: ``,`` UTF-8)."""
    import pyarrow.dataset as pads

    formats: dict[str, Any] = {
        "csv": csv_dataset_format(dialect or CsvDialect(), [id_column]),
        "parquet": "parquet",
        "json": "json",
    }
    try:
        dataset = pads.dataset(path, format=formats[file_format], filesystem=filesystem)
        return (dataset.to_table(columns=[id_column]).column(id_column),
                list(dataset.schema.names))
    except Exception:  # noqa: BLE001 - an odd file, a remote one without credentials
        return None


def check_unique_ids(ids: "pa.ChunkedArray", id_column: str, source: str,
                     other_columns: Sequence[str]) -> None:
    """Refuse ids that repeat, and missing ids (null, or empty text).

    Raises:
        InputDataError: naming the column, a few ids and rows, the counts and the fix.
    """
    import pyarrow as pa
    import pyarrow.compute as pc

    check_id_type(ids.type, id_column, source, other_columns)
    if pa.types.is_string(ids.type) or pa.types.is_large_string(ids.type):
        missing_mask = pc.or_kleene(pc.is_null(ids), pc.equal(ids, ""))
    else:
        missing_mask = pc.is_null(ids)
    missing = pc.indices_nonzero(missing_mask).to_pylist()
    present = pc.filter(ids, pc.invert(missing_mask))
    counts = pa.table({"id": present}).group_by("id", use_threads=False).aggregate(
        [("id", "count")])
    repeated = counts.filter(pc.greater(counts["id_count"], 1))
    if not missing and not repeated.num_rows:
        return
    problems = []
    if repeated.num_rows:
        shown = _listed([repr(v) for v in repeated["id"].to_pylist()[:_SHOWN]], repeated.num_rows)
        problems.append(f"repeated {id_column} values: {shown} "
                        f"{'is' if repeated.num_rows == 1 else 'are each'} on more than one row "
                        f"({len(ids):,} rows, {counts.num_rows:,} distinct "
                        f"id{'s' if counts.num_rows != 1 else ''})")
    if missing:
        shown = _listed([str(i + 1) for i in missing[:_SHOWN]], len(missing))
        problems.append(f"{len(missing):,} row{'s' if len(missing) > 1 else ''} without a "
                        f"{id_column} (null or empty): data row{'s' if len(missing) > 1 else ''} "
                        f"{shown}")
    others = ", ".join(c for c in other_columns if c != id_column)
    raise InputDataError(
        f"data.input: {source} has {'; and '.join(problems)}. Rows are written, reported "
        "and resumed by their data.id_column, so each row needs an id of its own (a rerun "
        "would skip a repeated id's other rows as already written). Nothing was run.",
        hint="Key the rows on a column that is unique per row with --set "
        f"data.id_column=<column>{f' (the other columns: {others})' if others else ''}, "
        f"or give every row its own {id_column} in the input.",
    )


def id_type_problem(id_type: "pa.DataType") -> str | None:
    """Why a column of ``id_type`` can't key rows (a phrase for "... holds ..."), or
    None for text and whole numbers, the types whose values compare, sort and hash
    exactly everywhere an id goes: Ray Data's checkpoint, the summary, ``retry``.

    Everything else is refused by name rather than converted: a nested value crashes
    Arrow's sort kernels outright (no exception), a float id (``1.0``) prints, rounds
    and joins unlike the id a user typed, and a dictionary-encoded column (a pandas
    category) is refused by Arrow's membership tests.
    """
    import pyarrow as pa

    types = pa.types
    if types.is_string(id_type) or types.is_large_string(id_type) or types.is_integer(id_type):
        return None
    if types.is_string_view(id_type):
        return ("text in Arrow's string_view layout, which Arrow's take and filter kernels "
                "(and so Ray Data) don't handle yet")
    if types.is_null(id_type):
        return "no values at all (every id is null)"
    if types.is_floating(id_type):
        return ("floating-point numbers, which don't key rows exactly (1.0 and "
                "1.0000000000000002 print alike; a CSV or JSON round trip may change them)")
    if types.is_dictionary(id_type):
        return "dictionary-encoded values (a pandas 'category'), which Arrow can't match as ids"
    if types.is_nested(id_type):
        return "nested values (lists, records or maps), which can't be compared as ids"
    if types.is_binary(id_type) or types.is_large_binary(id_type) \
            or types.is_fixed_size_binary(id_type):
        return "raw bytes, which can't be shown or typed as ids"
    return "neither text nor whole numbers"


def check_id_type(id_type: "pa.DataType", id_column: str, source: str,
                  other_columns: Sequence[str]) -> None:
    """Refuse an id column that isn't text or whole numbers (:func:`id_type_problem`).

    Raises:
        InputDataError: naming the column, its type, why, and the fix.
    """
    problem = id_type_problem(id_type)
    if problem is None:
        return
    others = ", ".join(c for c in other_columns if c != id_column)
    raise InputDataError(
        f"data.id_column: column {id_column!r} of {source} is of type {id_type}: "
        f"{problem}. Rows are written, reported and resumed by their id, so an id must be "
        "text or a whole number. Nothing was run.",
        hint="Key the rows on a column of text or whole numbers with --set "
        f"data.id_column=<column>{f' (the other columns: {others})' if others else ''}, or "
        f"write {id_column} as text or integers in the input (pandas: "
        f"df[{id_column!r}] = df[{id_column!r}].astype(str)).",
    )


def _listed(shown: list[str], total: int) -> str:
    """``'a', 'b' and 'c'``, or ``'a', 'b', 'c' and 97 more``."""
    if total > len(shown):
        return f"{', '.join(shown)} and {total - len(shown):,} more"
    return shown[0] if len(shown) == 1 else f"{', '.join(shown[:-1])} and {shown[-1]}"


# -- columns ---------------------------------------------------------------------------


def result_column_sources(job: JobDefinition[Any], spec: JobSpec) -> dict[str, str]:
    """Every result column the job's stages write -> where it is named, as a user
    would find it (``output.column``, ``options.output``, a Python job's code)."""
    from toolkit.spec.jobs.predictor_job import PredictorJobSpec
    from toolkit.spec.jobs.prompt_job import PromptJobSpec

    options = job.options_of(spec)
    sources: dict[str, str] = {}
    for stage in job.earlier_stages:
        for column in stage.result_columns(options):
            sources.setdefault(column, f"stage {stage.name}'s result column")
    for column in job.main_stage.result_columns(options):
        if isinstance(spec, PromptJobSpec):
            where = ("output.column" if spec.output.json_schema is None
                     else "output.json_schema property")
        elif isinstance(spec, PredictorJobSpec):
            where = "options.output column"
        else:
            where = f"job {job.name}'s result column"
        sources.setdefault(column, where)
    return sources


def check_output_holds(data: DataConfig, results: Mapping[str, str]) -> None:
    """Refuse a CSV output for a run whose results are lists (embeddings, a tabular
    model's probabilities): CSV holds no lists, so every block's write would fail.

    Args:
        results: Each result column the stages write -> its Arrow type alias.

    Raises:
        SpecError: ``data.output_format`` is csv and a result column is a list.
    """
    if data.output_format != "csv":
        return
    lists = [(column, alias) for column, alias in results.items() if alias.startswith("list<")]
    if lists:
        column, alias = lists[0]
        raise SpecError(
            f"data.output_format: csv can't hold the result column {column!r} ({alias}: "
            "a list for each row), so no row could be written. Nothing was run.",
            hint="Write parquet (the default) or json, which hold lists: --set "
            "data.output_format=json.",
        )


def pipeline_columns(job: JobDefinition[Any], spec: JobSpec) -> dict[str, str]:
    """Columns the pipeline itself puts on a row -> what they hold: the toolkit's own,
    and what each model stage's task adds (``messages``, ``generated_text``, ``prompt``...)."""
    columns = dict(TOOLKIT_COLUMNS)
    for stage, engine in spec.stages.items():
        contract = TASK_CONTRACTS[engine.task]
        for column in contract.inputs:
            columns.setdefault(column, f"what stage {stage} sends to its model")
        for column in contract.outputs:
            columns.setdefault(column, f"stage {stage}'s raw model output")
    contract = TASK_CONTRACTS[spec.engine.task]
    for column in contract.inputs:
        columns.setdefault(column, "what the job sends to the model")
    for column in contract.outputs:
        columns.setdefault(column, "the model's raw output")
    return columns


def check_written_columns(job: JobDefinition[Any], spec: JobSpec,
                          input_columns: Sequence[str] | None = None) -> None:
    """Refuse columns that would overwrite one another in the rows.

    With ``input_columns`` None (before the input is read) only what the spec alone
    shows is checked: a result column named like ``data.id_column`` or like one of
    the toolkit's own columns.

    Raises:
        SpecError: a result column collides with the id column, an input column or
            one the toolkit writes.
        InputDataError: an input column is named like one the pipeline writes.
    """
    id_column, source = spec.data.id_column, spec.data.input
    results = result_column_sources(job, spec)
    if id_column in results:
        raise SpecError(
            f"{results[id_column]} {id_column!r} is data.id_column, so every row's id would "
            "be overwritten by its result (and the output, error rows and resume are keyed "
            "on it). Nothing was run.",
            hint="Give the result column another name, or key the rows on another column "
            "with --set data.id_column=<column>.",
        )
    own = [c for c in results if c in TOOLKIT_COLUMNS]
    if own:
        column = own[0]
        raise SpecError(
            f"{results[column]} {column!r} is a column the toolkit writes itself "
            f"({TOOLKIT_COLUMNS[column]}), so one would overwrite the other. Nothing was run.",
            hint="Give the result column another name.",
        )
    if input_columns is None:
        return
    dropped = set(job.drop_columns(job.options_of(spec)) if job.drop_columns else ())
    kept = [c for c in input_columns if c not in dropped]
    clash = [c for c in results if c in kept]
    if clash:
        column = clash[0]
        raise SpecError(
            f"{results[column]} {column!r} is also a column of the input {source}, which "
            "every output row keeps, so the results would replace its values. Nothing was run.",
            hint="Give the result column another name, or rename that column in the input.",
        )
    written = pipeline_columns(job, spec)
    taken = [c for c in kept if c in written and c not in results]
    if taken:
        column = taken[0]
        raise InputDataError(
            f"data.input: {source} has a column {column!r}, which the toolkit writes itself "
            f"({written[column]}), so every output row would lose its values. Nothing was run.",
            hint=f"Rename {column!r} in the input; every other input column is kept as it is.",
        )
