"""A write's figures counted from its committed result files, as the summary counts them.

The summary (:func:`~toolkit.run.output.summary.summarize_output`) counts the output
folder's files once the run ends; the metrics count the same files of this run's
write while it goes, so a task Ray retried or a block written twice by nobody is never
counted twice and the last count is the summary's. Each file is read once (the small
columns the figures need), when it is complete.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from toolkit.run.output.summary import FIRST_TOKEN_COLUMNS, INPUT_TOKENS_COLUMN, TOKEN_COLUMNS
from toolkit.run.progress.model import RowCounts
from toolkit.run.progress.sources import WrittenRows, table_counts
from toolkit.spec.cascade import ANSWERED_BY_COLUMN
from toolkit.spec.row_contract import ERROR_COLUMN, FAILED_CHECKS_COLUMN

#: The columns the figures are counted from (those a file has).
FIGURE_COLUMNS: tuple[str, ...] = (ERROR_COLUMN, FAILED_CHECKS_COLUMN, ANSWERED_BY_COLUMN,
                                   *TOKEN_COLUMNS, *FIRST_TOKEN_COLUMNS.values())


@dataclass(frozen=True)
class WriteFigures(RowCounts):
    """:class:`RowCounts` with the tokens of the rows: every model's, a cascade's small
    model's on its escalated rows included (the summary's ``input_tokens``)."""

    input_tokens: int = 0
    output_tokens: int = 0

    def __add__(self, other: RowCounts) -> "WriteFigures":
        rows = RowCounts.__add__(self, other)
        return WriteFigures(rows.rows, rows.errors, rows.failing, rows.checks, rows.answered,
                            self.input_tokens + getattr(other, "input_tokens", 0),
                            self.output_tokens + getattr(other, "output_tokens", 0))


def figures_of(table: Any) -> WriteFigures:
    """The figures of one result file's table (its :data:`FIGURE_COLUMNS`)."""
    import pyarrow.compute as pc

    counts = table_counts(table)
    tokens = {column: sum(int(pc.sum(table[c]).as_py() or 0)
                          for c in (column, FIRST_TOKEN_COLUMNS[column])
                          if c in table.column_names)
              for column in TOKEN_COLUMNS}
    return WriteFigures(counts.rows, counts.errors, counts.failing, counts.checks,
                        counts.answered, tokens[INPUT_TOKENS_COLUMN],
                        tokens[TOKEN_COLUMNS[1]])


class WrittenFigures(WrittenRows):
    """:class:`WrittenRows` of one write, with its tokens: calling it gives the
    :class:`WriteFigures` so far."""

    _nothing = WriteFigures(0, 0, 0)

    def _count_file(self, path: str) -> RowCounts | None:
        try:
            with self.run_dir.fs.open_input_file(path) as stream:
                return figures_of(_read_columns(stream, self.file_format or "parquet"))
        except Exception:  # noqa: BLE001 - a file mid-write; counted on a later look
            return None


def _read_columns(stream: Any, file_format: str) -> Any:
    if file_format == "parquet":
        import pyarrow.parquet as pq

        file = pq.ParquetFile(stream)
        present = set(file.schema_arrow.names)
        return file.read(columns=[c for c in FIGURE_COLUMNS if c in present])
    if file_format == "csv":
        import pyarrow.csv as pacsv

        table = pacsv.read_csv(stream, convert_options=pacsv.ConvertOptions(
            strings_can_be_null=True))
    else:
        import pyarrow.json as pajson

        table = pajson.read_json(stream)
    return table.select([c for c in FIGURE_COLUMNS if c in table.column_names])
