"""Generated customers as a Ray Data datasource.

A datasource (rather than ``range().map_batches()``) makes the generated rows the
output of a Read operator, with ``Index`` already present. That is what Ray Data's
checkpointing filters on, so smoke runs resume exactly like file inputs do.
"""

from __future__ import annotations

import math
from typing import Any

from ray.data.block import BlockMetadata
from ray.data.datasource import Datasource, ReadTask

from toolkit.samples.customers import CUSTOMER_SCHEMA

_BYTES_PER_ROW = 220  # measured average of customers_batch rows in Arrow
_ROWS_PER_BLOCK = 50_000


class CustomersDatasource(Datasource):
    def __init__(self, rows: int, seed: int = 0) -> None:
        super().__init__()
        self.rows = rows
        self.seed = seed

    def get_name(self) -> str:
        return "SampleCustomers"

    def estimate_inmemory_data_size(self) -> int:
        return self.rows * _BYTES_PER_ROW

    def get_read_tasks(
        self, parallelism: int, per_task_row_limit: int | None = None, data_context: Any = None
    ) -> list[ReadTask]:
        tasks = max(1, min(parallelism, self.rows))
        per_task = math.ceil(self.rows / tasks)
        read_tasks = []
        for start in range(0, self.rows, per_task):
            stop = min(self.rows, start + per_task)
            metadata = BlockMetadata(
                num_rows=stop - start,
                size_bytes=(stop - start) * _BYTES_PER_ROW,
                exec_stats=None,
                input_files=None,
            )
            read_tasks.append(
                ReadTask(
                    lambda start=start, stop=stop: _blocks(start, stop, self.seed),
                    metadata,
                    # Known up front, so Dataset.schema() needs no Ray job to find it.
                    schema=CUSTOMER_SCHEMA,
                    per_task_row_limit=per_task_row_limit,
                )
            )
        return read_tasks


def _blocks(start: int, stop: int, seed: int) -> list[Any]:
    from toolkit.samples.customers import customers_batch

    return [
        customers_batch(lo, min(stop, lo + _ROWS_PER_BLOCK), seed=seed)
        for lo in range(start, stop, _ROWS_PER_BLOCK)
    ]
