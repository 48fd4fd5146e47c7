"""The two steps around a chat stage's model: :func:`look_up_answers` before it,
:func:`settle_answers` after it.

Before the model, each row the engine would answer gets its key
(:func:`~toolkit.run.answer_cache.answer_keys.row_key`); a row whose key is in the
cache is marked as answered (:data:`FROM_CACHE` in ``error``, which every engine skips
as it skips a row an earlier stage failed: no model time) with its stored answer beside
it; of the rows left, those whose key an earlier row of the block has are taken out of
the block and ride, packed, on that first row (:data:`REPEATS`): the model sees each
prompt once, on every engine, and the rows can't be parted by Ray Data's batching.

After the model, the packed rows are unpacked, each with its first row's answer and
its own other columns; a cached row gets its stored answer back and its mark cleared;
the answers the model gave are stored (never an error row's). ``answered_by`` says
``cache`` or ``repeat`` on those rows, null on the rows the model answered.

Repeats are collapsed only where answers are repeatable (greedy or seeded), or where
``cache.sampled`` asks to cache sampled answers too.
"""

from __future__ import annotations

import base64
import json
from typing import TYPE_CHECKING, Any

from toolkit.run.answer_cache.answer_keys import repeatable, row_key
from toolkit.run.answer_cache.entries import cache_entries
from toolkit.spec.cascade import ANSWERED_BY_COLUMN
from toolkit.spec.row_contract import (
    ERROR_COLUMN,
    FINISH_REASON_COLUMN,
    GENERATED_LOGPROB_COLUMN,
    GENERATED_TEXT_COLUMN,
    RAY_LLM_ERROR_COLUMN,
    SAMPLING_PARAMS_COLUMN,
    plain,
    row_error,
)

if TYPE_CHECKING:
    import pyarrow as pa

#: The ``error`` of a row answered from the cache while it passes the model. Never written.
FROM_CACHE = "answer cache: answered from the cache"
#: ``answered_by`` of a row answered from the cache, and of one that repeats an
#: earlier row's prompt in the run.
BY_CACHE, BY_REPEAT = "cache", "repeat"
#: Columns riding from :func:`look_up_answers` to :func:`settle_answers`: the row's
#: key, its stored answer (JSON), and the rows that repeat its prompt (Arrow IPC,
#: base64). Text, never null, so every engine carries them alike.
KEY, STORED, REPEATS = "__answer_key", "__answer_stored", "__answer_repeats"
#: An answer as stored: the engine's columns and the types they are written with.
ANSWER_COLUMNS = {GENERATED_TEXT_COLUMN: "string", "num_input_tokens": "int64",
                  "num_generated_tokens": "int64", FINISH_REASON_COLUMN: "string",
                  GENERATED_LOGPROB_COLUMN: "float64"}


def look_up_answers(batch: "pa.Table", context: str, input_column: str,
                    cache: str | None, sampled: bool) -> "pa.Table":
    """Before a stage's model: keys, the cache's answers, repeats packed (see the module)."""
    import pyarrow as pa

    names = batch.column_names
    if input_column not in names:
        return _with_riders(batch, [""] * batch.num_rows, [""] * batch.num_rows)
    errors = batch.column(ERROR_COLUMN).to_pylist() if ERROR_COLUMN in names else [None] * len(batch)
    prompts = batch.column(input_column).to_pylist()
    params = (batch.column(SAMPLING_PARAMS_COLUMN).to_pylist()
              if SAMPLING_PARAMS_COLUMN in names else [None] * batch.num_rows)
    keys = []
    for error, prompt, own in zip(errors, prompts, params):
        own = {k: v for k, v in (plain(own) or {}).items() if v is not None}
        keys.append(row_key(context, plain(prompt), own)
                    if row_error(error) is None and (sampled or repeatable(own)) else "")
    stored = cache_entries(cache).look_up({k for k in keys if k}) if cache else {}
    found = [json.dumps(stored[k]) if k in stored else "" for k in keys]
    first: dict[str, int] = {}
    repeats: dict[int, list[int]] = {}
    for i, key in enumerate(keys):
        if key and not found[i]:
            if key in first:
                repeats.setdefault(first[key], []).append(i)
            else:
                first[key] = i
    if found.count("") < len(found):
        hit = pa.array([bool(f) for f in found])
        batch = _set(batch, ERROR_COLUMN, _marked(batch, ERROR_COLUMN, hit))
        batch = _set(batch, RAY_LLM_ERROR_COLUMN, _marked(batch, RAY_LLM_ERROR_COLUMN, hit))
    packed = [""] * batch.num_rows
    for i, rows in repeats.items():
        packed[i] = _pack(batch.take(rows))
    with_riders = _with_riders(batch, keys, found, packed)
    if not repeats:
        return with_riders
    gone = {i for rows in repeats.values() for i in rows}
    return with_riders.take([i for i in range(batch.num_rows) if i not in gone])


def settle_answers(batch: "pa.Table", cache: str | None) -> "pa.Table":
    """After a stage's model: repeats unpacked with their first row's answer, cached
    rows answered, the model's answers stored (see the module)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    if KEY not in batch.column_names:
        return batch
    batch = _unpacked(batch)
    stored = batch.column(STORED).to_pylist()
    hit = pa.array([bool(s) for s in stored])
    answers = [json.loads(s) if s else {} for s in stored]
    for column, alias in ANSWER_COLUMNS.items():
        values = pa.array([a.get(column) for a in answers], type=alias)
        present = (batch.column(column) if column in batch.column_names
                   else pa.nulls(batch.num_rows, values.type))
        if present.type != values.type and not pa.types.is_null(present.type):
            values = values.cast(present.type)
        else:
            present = present.cast(values.type)
        batch = _set(batch, column, pc.if_else(hit, values, present))
    for column in (ERROR_COLUMN, RAY_LLM_ERROR_COLUMN):
        if column in batch.column_names:
            kept = batch.column(column)
            batch = _set(batch, column, pc.if_else(hit, pa.scalar(None, kept.type), kept))
    by = batch.column(ANSWERED_BY_COLUMN) if ANSWERED_BY_COLUMN in batch.column_names else None
    batch = _set(batch, ANSWERED_BY_COLUMN, pc.if_else(
        hit, pa.scalar(BY_CACHE),
        by if by is not None and by.type == pa.string() else pa.nulls(batch.num_rows, pa.string())))
    if cache:
        cache_entries(cache).store(_new_answers(batch))
    return batch


def _new_answers(batch: "pa.Table") -> dict[str, dict[str, Any]]:
    """key -> answer of each row the model answered without an error."""
    names = batch.column_names
    columns = {c: batch.column(c).to_pylist() for c in ANSWER_COLUMNS if c in names}
    keys = batch.column(KEY).to_pylist()
    errors = batch.column(ERROR_COLUMN).to_pylist() if ERROR_COLUMN in names else [None] * len(keys)
    by = batch.column(ANSWERED_BY_COLUMN).to_pylist()
    texts = columns.get(GENERATED_TEXT_COLUMN, [None] * len(keys))
    new = {}
    for i, key in enumerate(keys):
        if key and by[i] is None and row_error(errors[i]) is None and texts[i] is not None:
            new[key] = {c: values[i] for c, values in columns.items()}
    return new


def _unpacked(batch: "pa.Table") -> "pa.Table":
    """The batch with each packed repeat back as its own row: its own columns, its
    first row's answer (the engine's columns, ``error``), ``answered_by: repeat``."""
    import pyarrow as pa

    packs = batch.column(REPEATS).to_pylist()
    firsts, tables = [], []
    for i, packed in enumerate(packs):
        if packed:
            table = _unpack(packed)
            firsts += [i] * table.num_rows
            tables.append(table)
    by = pa.nulls(batch.num_rows, pa.string())
    if not tables:
        return _set(batch, ANSWERED_BY_COLUMN, by)
    own = pa.concat_tables(tables, promote_options="permissive")
    copies = batch.take(firsts)
    answer = {*ANSWER_COLUMNS, ERROR_COLUMN, RAY_LLM_ERROR_COLUMN, STORED, REPEATS}
    for name in copies.column_names:
        if name in own.column_names and name not in answer:
            column = _as_type(own.column(name), copies.column(name).type)
            # None: a column the engine rewrote in a type of its own (Ray Data LLM
            # pickles the messages): the prompt, which a repeat shares with its first
            # row by its key, so the first row's stands.
            if column is not None:
                copies = _set(copies, name, column)
    copies = _set(copies, REPEATS, pa.array([""] * copies.num_rows))
    batch = _set(batch, ANSWERED_BY_COLUMN, by)
    copies = _set(copies, ANSWERED_BY_COLUMN, pa.array([BY_REPEAT] * copies.num_rows))
    return pa.concat_tables([batch, copies.select(batch.column_names)])


def _as_type(column: Any, arrow_type: "pa.DataType") -> Any:
    """``column`` as ``arrow_type``; None where its values can't be."""
    import pyarrow as pa

    failures = (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError)
    try:
        return column.cast(arrow_type)
    except failures:
        try:
            return pa.array([plain(v) for v in column.to_pylist()], type=arrow_type)
        except failures:
            return None


def _pack(rows: "pa.Table") -> str:
    import pyarrow as pa

    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, rows.schema) as writer:
        writer.write_table(rows)
    return base64.b64encode(sink.getvalue().to_pybytes()).decode()


def _unpack(packed: str) -> "pa.Table":
    import pyarrow as pa

    return pa.ipc.open_stream(base64.b64decode(packed)).read_all()


def _marked(batch: "pa.Table", column: str, hit: "pa.Array") -> "pa.Array":
    """``column`` with :data:`FROM_CACHE` on the rows ``hit``."""
    import pyarrow as pa
    import pyarrow.compute as pc

    if column not in batch.column_names:
        return pc.if_else(hit, pa.scalar(FROM_CACHE), pa.scalar(None, pa.string()))
    present = batch.column(column)
    if not pa.types.is_string(present.type):
        present = present.cast(pa.string())
    return pc.if_else(hit, pa.scalar(FROM_CACHE), present)


def _with_riders(batch: "pa.Table", keys: list[str], found: list[str],
                 packed: list[str] | None = None) -> "pa.Table":
    import pyarrow as pa

    for name, values in ((KEY, keys), (STORED, found), (REPEATS, packed or [""] * len(keys))):
        batch = _set(batch, name, pa.array(values, type=pa.string()))
    return batch


def _set(batch: "pa.Table", name: str, column: Any) -> "pa.Table":
    names = batch.column_names
    if name in names:
        return batch.set_column(names.index(name), name, column)
    return batch.append_column(name, column)
