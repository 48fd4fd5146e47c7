"""An engine's records in the run folder (:class:`toolkit.engines.EngineRecords`):
``_engine_records/<stage field>/<name>.json``, claimed in the manifest by the driver
before the stage runs and written by the engine's Ray tasks, each write fenced as a
result file's is (:mod:`toolkit.run.output.fence`). A finished run deletes them
(:meth:`toolkit.run.output.run_directory.RunDirectory.finish`)."""

from __future__ import annotations

import re
from typing import Any

from toolkit.run.output.fence import Fence
from toolkit.run.output.run_directory import ENGINE_RECORDS_DIR, RunDirectory

#: A record's name: what an engine may call one (no path, no dots).
_NAME = re.compile(r"^[A-Za-z0-9_-]{1,100}$")


class RunFolderRecords:
    """One stage's records in one run folder; picklable to Ray workers (it carries the
    folder's location and the run's fence, never an open file)."""

    def __init__(self, location: str, stage: str, fence: Fence | None) -> None:
        self.location, self.stage, self.fence = location, stage, fence

    @classmethod
    def of(cls, run_dir: RunDirectory, stage: str) -> "RunFolderRecords":
        """``stage``'s records (its engine section's field: ``engine``, ``stages.NAME``)
        in the folder ``run_dir``, fenced by the lock this process holds there."""
        return cls(run_dir.location, stage, run_dir.fence())

    @property
    def folder(self) -> str:
        return f"{ENGINE_RECORDS_DIR}/{self.stage}"

    def claim(self) -> None:
        RunDirectory(self.location).claim(ENGINE_RECORDS_DIR)

    def read_all(self) -> dict[str, dict[str, Any]]:
        return RunDirectory(self.location).json_files(self.folder)

    def write(self, name: str, content: dict[str, Any]) -> None:
        if not _NAME.match(name):
            raise ValueError(f"an engine record's name is letters, digits, - and _: {name!r}")
        if self.fence is not None:
            self.fence.check()
        RunDirectory(self.location).write_claimed(f"{self.folder}/{name}.json", content)
