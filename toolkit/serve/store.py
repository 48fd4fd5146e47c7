"""Where ``toolkit serve`` keeps its state: files, batches and their runs, under one folder.

::

    STORE/serve.sqlite3          files and batches (SQLite, WAL): the objects as JSON,
                                 and per batch its run's bookkeeping (queued/running/done,
                                 the child's pid, its exit code)
    STORE/files/FILE_ID          each file's bytes (uploads and batch output/error files)
    STORE/batches/BATCH_ID/run   the batch's run directory (``toolkit run --output``)
    STORE/batches/BATCH_ID/run.log  the child's own output

Everything a restarted server needs is here, so a server killed with SIGKILL comes
back with every file and batch, and the run directories resume exactly.

Ids come from clients, so no path is built from one that doesn't have the shape this
server issues (:func:`is_issued_id`: ``..``, a NUL or 5,000 characters never reach the
filesystem), and a file is removed only by the id of a row of the ``files`` table:
never a partial upload, the database or anything else under the folder.
"""

from __future__ import annotations

import os
import re
import secrets
import shutil
import sqlite3
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import BinaryIO, Literal

from pydantic import BaseModel

from toolkit.serve.openai_objects import Batch, BatchError, FileObject

RunState = Literal["queued", "running", "done"]


class RunRecord(BaseModel):
    """A batch's run as the supervisor tracks it (not shown to clients)."""

    state: RunState = "queued"
    pid: int | None = None
    exit_code: int | None = None
    #: When SIGINT was sent to a cancelled run (epoch seconds); SIGKILL follows a grace later.
    interrupted_at: float | None = None
    #: How the batch ends, once its run has (while ``finalizing``): a restart finishes it so.
    ending: Literal["completed", "failed", "cancelled"] | None = None
    failure: str | None = None
    #: Why validation refused the input file (repeated custom_ids, too many requests):
    #: the batch fails with these errors and never runs.
    rejected: list[BatchError] = []
    #: No request of the input file can run: the batch completes with its error file
    #: alone, without a run.
    nothing_to_run: bool = False


_SCHEMA = """
CREATE TABLE IF NOT EXISTS files (
    seq INTEGER PRIMARY KEY AUTOINCREMENT, id TEXT UNIQUE NOT NULL,
    purpose TEXT NOT NULL, object TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS batches (
    seq INTEGER PRIMARY KEY AUTOINCREMENT, id TEXT UNIQUE NOT NULL,
    object TEXT NOT NULL, run TEXT NOT NULL);
"""


FILE_PREFIX = "file-"
BATCH_PREFIX = "batch_"
#: What follows the prefix in every id this server issues: 24 lowercase hex digits.
_ID_TAIL = re.compile(r"[0-9a-f]{24}")


def new_id(prefix: str) -> str:
    """An id in OpenAI's style: ``file-…``, ``batch_…`` (then 24 hex digits)."""
    return f"{prefix}{secrets.token_hex(12)}"


def is_issued_id(prefix: str, value: str) -> bool:
    """Whether ``value`` has the shape of the ids this server issues with ``prefix``
    (:func:`new_id`, and the result files' ids): the only strings from a request that
    may become part of a path."""
    return value.startswith(prefix) and _ID_TAIL.fullmatch(value[len(prefix):]) is not None


class Store:
    """Files and batches on disk. Safe to use from the server's threads."""

    def __init__(self, root: Path) -> None:
        self.root = Path(root).expanduser().resolve()
        (self.root / "files").mkdir(parents=True, exist_ok=True)
        (self.root / "batches").mkdir(parents=True, exist_ok=True)
        # One connection behind a lock: the API's threads and the supervisor share it.
        self._db = sqlite3.connect(self.root / "serve.sqlite3", check_same_thread=False,
                                   isolation_level=None)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.executescript(_SCHEMA)
        self._lock = threading.RLock()

    def close(self) -> None:
        with self._lock:
            self._db.close()

    @contextmanager
    def _transaction(self) -> Iterator[sqlite3.Connection]:
        with self._lock:
            self._db.execute("BEGIN IMMEDIATE")
            try:
                yield self._db
            except BaseException:
                self._db.execute("ROLLBACK")
                raise
            self._db.execute("COMMIT")

    # -- paths ---------------------------------------------------------------------------

    def file_path(self, file_id: str) -> Path:
        """Where a file's bytes are.

        Raises:
            ValueError: ``file_id`` is not shaped as this server's ids (a caller that
                passes a client's id unchecked fails here, not in the filesystem).
        """
        if not is_issued_id(FILE_PREFIX, file_id):
            raise ValueError(f"not a file id of this server: {file_id[:64]!r}")
        return self.root / "files" / file_id

    def batch_dir(self, batch_id: str) -> Path:
        """A batch's folder (its run directory and log).

        Raises:
            ValueError: ``batch_id`` is not shaped as this server's ids.
        """
        if not is_issued_id(BATCH_PREFIX, batch_id):
            raise ValueError(f"not a batch id of this server: {batch_id[:64]!r}")
        return self.root / "batches" / batch_id

    def run_dir(self, batch_id: str) -> Path:
        return self.batch_dir(batch_id) / "run"

    # -- files ---------------------------------------------------------------------------

    def add_file(self, filename: str, purpose: str, content: BinaryIO,
                 file_id: str | None = None) -> FileObject:
        """Copy ``content`` in and record it (replacing a file of the same id)."""
        file_id = file_id or new_id(FILE_PREFIX)
        path = self.file_path(file_id)
        partial = path.with_name(f".{file_id}.partial")
        with open(partial, "wb") as out:
            shutil.copyfileobj(content, out, length=1 << 20)
        os.replace(partial, path)  # never a half-written file under its id
        file = FileObject(id=file_id, bytes=path.stat().st_size, created_at=int(time.time()),
                          filename=filename, purpose=purpose)  # type: ignore[arg-type]
        with self._transaction() as db:
            db.execute("DELETE FROM files WHERE id = ?", (file_id,))
            db.execute("INSERT INTO files (id, purpose, object) VALUES (?, ?, ?)",
                       (file_id, purpose, file.model_dump_json()))
        return file

    def get_file(self, file_id: str) -> FileObject | None:
        with self._lock:
            row = self._db.execute("SELECT object FROM files WHERE id = ?", (file_id,)).fetchone()
        return FileObject.model_validate_json(row[0]) if row else None

    def list_files(self, limit: int, after: str | None = None, purpose: str | None = None,
                   newest_first: bool = True) -> tuple[list[FileObject], bool]:
        """A page of files and whether more follow it."""
        rows = self._page("files", limit, after, newest_first,
                          ("purpose = ?", purpose) if purpose else None)
        return [FileObject.model_validate_json(r) for r in rows[:limit]], len(rows) > limit

    def delete_file(self, file_id: str) -> Literal["deleted", "missing", "in_use"]:
        """Forget a file and remove its bytes, unless a batch that hasn't finished reads
        it (its run reads the file when it starts, and again on resume).

        Only a file the ``files`` table lists is removed, so no other name under the
        store (a partial upload, the database) can be deleted through this. The check
        and the delete are one transaction, as :meth:`add_batch`'s check that its input
        file is there: a file and a new batch of it can't both be gone and go on.
        """
        with self._transaction() as db:
            if db.execute("SELECT 1 FROM files WHERE id = ?", (file_id,)).fetchone() is None:
                return "missing"
            if db.execute(
                    "SELECT 1 FROM batches WHERE json_extract(object, '$.input_file_id') = ? "
                    "AND json_extract(run, '$.state') != 'done' LIMIT 1",
                    (file_id,)).fetchone() is not None:
                return "in_use"
            db.execute("DELETE FROM files WHERE id = ?", (file_id,))
        self.file_path(file_id).unlink(missing_ok=True)
        return "deleted"

    # -- batches -------------------------------------------------------------------------

    def add_batch(self, batch: Batch, run: RunRecord | None = None) -> bool:
        """Record a new batch, queued; False (and nothing recorded) if its input file
        has been deleted meanwhile (see :meth:`delete_file`)."""
        with self._transaction() as db:
            if db.execute("SELECT 1 FROM files WHERE id = ?",
                          (batch.input_file_id,)).fetchone() is None:
                return False
            db.execute("INSERT INTO batches (id, object, run) VALUES (?, ?, ?)",
                       (batch.id, batch.model_dump_json(),
                        (run or RunRecord()).model_dump_json()))
            self.batch_dir(batch.id).mkdir(parents=True, exist_ok=True)
        return True

    def get_batch(self, batch_id: str) -> Batch | None:
        found = self.get_batch_and_run(batch_id)
        return found[0] if found else None

    def get_batch_and_run(self, batch_id: str) -> tuple[Batch, RunRecord] | None:
        with self._lock:
            row = self._db.execute("SELECT object, run FROM batches WHERE id = ?",
                                   (batch_id,)).fetchone()
        if not row:
            return None
        return Batch.model_validate_json(row[0]), RunRecord.model_validate_json(row[1])

    def list_batches(self, limit: int, after: str | None = None) -> tuple[list[Batch], bool]:
        """Newest first, a page of batches and whether more follow it."""
        rows = self._page("batches", limit, after, newest_first=True)
        return [Batch.model_validate_json(r) for r in rows[:limit]], len(rows) > limit

    def batches_to_watch(self) -> list[tuple[Batch, RunRecord]]:
        """Batches whose run is queued or running, oldest first."""
        with self._lock:
            rows = self._db.execute(
                "SELECT object, run FROM batches WHERE json_extract(run, '$.state') != 'done' "
                "ORDER BY seq").fetchall()
        return [(Batch.model_validate_json(o), RunRecord.model_validate_json(r)) for o, r in rows]

    def save_batch(self, batch: Batch, run: RunRecord | None = None) -> None:
        with self._transaction() as db:
            if run is None:
                db.execute("UPDATE batches SET object = ? WHERE id = ?",
                           (batch.model_dump_json(), batch.id))
            else:
                db.execute("UPDATE batches SET object = ?, run = ? WHERE id = ?",
                           (batch.model_dump_json(), run.model_dump_json(), batch.id))

    def _page(self, table: str, limit: int, after: str | None, newest_first: bool,
              where: tuple[str, str] | None = None) -> list[str]:
        """One more row than ``limit``, so the caller knows whether more follow."""
        clauses, params = [], []
        if where:
            clauses.append(where[0])
            params.append(where[1])
        if after:
            clauses.append(f"seq {'<' if newest_first else '>'} "
                           f"COALESCE((SELECT seq FROM {table} WHERE id = ?), -1)")
            params.append(after)
        sql = (f"SELECT object FROM {table}"  # noqa: S608 - table names are ours
               + (f" WHERE {' AND '.join(clauses)}" if clauses else "")
               + f" ORDER BY seq {'DESC' if newest_first else 'ASC'} LIMIT ?")
        with self._lock:
            return [r[0] for r in self._db.execute(sql, (*params, limit + 1)).fetchall()]
