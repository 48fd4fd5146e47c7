"""Where the library's errors become click's: the only place that knows both.

The library raises :class:`toolkit.errors.ToolkitError` (plain exceptions, so it is
usable without click); :class:`toolkit.cli.main.ToolkitGroup` converts each one with
:func:`to_click` as it leaves a command, and click prints it as users know it::

    Error: Unknown job 'text-industri'. Available jobs: ...
    Hint: Name a built-in job, a job file (./my-job.yaml), or create one with ...

with the error's exit code (the table in :mod:`toolkit.errors`).
"""

from __future__ import annotations

import click

from toolkit.errors import ToolkitError


class ToolkitClickError(click.ClickException):
    """A :class:`ToolkitError` as click shows it: ``Error: message``, ``Hint: hint``, and
    the error's own exit code."""

    def __init__(self, error: ToolkitError) -> None:
        super().__init__(error.message)
        self.error = error
        # Per instance: one click class serves every exit code in the contract.
        self.exit_code = error.exit_code  # type: ignore[misc]

    def format_message(self) -> str:
        return self.error.format_message()


def to_click(error: ToolkitError) -> click.ClickException:
    """``error`` as the click exception that prints it and exits with its code."""
    return ToolkitClickError(error)
