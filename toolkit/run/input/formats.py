"""Input formats with behaviour of their own, behind one interface the run layer calls
for every run.

Most formats (CSV, Parquet, JSON, image folders, Hugging Face datasets) are rows to
read and nothing more: :mod:`toolkit.run.input.reading` reads them, and their
:class:`RunFormat` does nothing at each step. A format that does more (the OpenAI
Batch API request file: staged and checked once, its own output file when the run is
complete) subclasses :class:`RunFormat` in its own module and registers it for its
``data.format`` with :func:`register_format` (both in
:mod:`toolkit.run.input.format_steps`, below this lookup and the formats alike). The
run layer asks :func:`run_format` and calls the same steps whatever the format is; no
other module of it names a format.

The steps, in a run's order:

1. :meth:`RunFormat.stage`, in preflight, before Ray starts (it takes the spec): a
   bad file fails here.
2. :meth:`RunFormat.open`, the run's rows as a Ray Dataset (None: read as usual);
   from here on each step takes the run's plan.
3. :meth:`RunFormat.staged_rows`, the rows the run will write once staged (progress).
4. :meth:`RunFormat.finish`, once every row is written: e.g. another output file,
   returning a note for the summary.

Example:
    >>> run_format(spec.data).stage(spec, run_dir)  # doctest: +SKIP
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from toolkit.run.input.format_steps import RunFormat, register_format, registered_formats

if TYPE_CHECKING:
    from toolkit.spec.models import DataConfig

__all__ = ["RunFormat", "register_format", "run_format"]

_PLAIN = RunFormat()


def _formats() -> dict[str, RunFormat]:
    if not registered_formats():
        # Imported on first use (it is heavy); its import registers its format.
        from toolkit.run.input import openai_batch  # noqa: F401

    return registered_formats()


def run_format(data: "DataConfig") -> RunFormat:
    """The behaviour of ``data.format`` (the plain one for formats that only read rows)."""
    return _formats().get(data.format, _PLAIN)
