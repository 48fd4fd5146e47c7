"""Generated tables (``sample:reviews``, ``sample:accounts``) as a Ray Data datasource.

As with the customers sample, the rows come out of a Read operator with their id
column, which Ray Data's checkpointing filters on, in as many blocks as asked,
so smoke runs write (and resume) block by block. Each read task generates the
whole table from the seed and keeps its slice: the rows never depend on how the
table was split.
"""

from __future__ import annotations

import math
from typing import Any

from ray.data.block import BlockMetadata
from ray.data.datasource import Datasource, ReadTask

_BYTES_PER_ROW = 80


class GeneratedTableDatasource(Datasource):
    def __init__(self, name: str, rows: int, seed: int = 0) -> None:
        super().__init__()
        self.name, self.rows, self.seed = name, rows, seed

    def get_name(self) -> str:
        return f"Sample{self.name.title()}"

    def estimate_inmemory_data_size(self) -> int:
        return self.rows * _BYTES_PER_ROW

    def get_read_tasks(
        self, parallelism: int, per_task_row_limit: int | None = None, data_context: Any = None
    ) -> list[ReadTask]:
        per_task = math.ceil(self.rows / max(1, min(parallelism, self.rows)))
        tasks = []
        for start in range(0, self.rows, per_task):
            stop = min(self.rows, start + per_task)
            metadata = BlockMetadata(num_rows=stop - start, size_bytes=(stop - start) * _BYTES_PER_ROW,
                                     exec_stats=None, input_files=None)
            tasks.append(ReadTask(
                lambda start=start, stop=stop: [_table(self.name, self.rows, self.seed)
                                                .slice(start, stop - start)],
                metadata, per_task_row_limit=per_task_row_limit,
            ))
        return tasks


def _table(name: str, rows: int, seed: int) -> Any:
    from toolkit.samples.tiny_task_models import sample_reviews, sample_table

    return {"reviews": sample_reviews, "accounts": sample_table}[name](rows, seed)
