"""Where the library's errors become click's: the only place that knows both.

The library raises :class:`toolkit.errors.ToolkitError` (plain exceptions, so it is
usable without click); :class:`toolkit.cli.main.ToolkitGroup` converts each one with
:func:`to_click` as it leaves a command, and click prints it as users know it::

    Error: Unknown job 'text-industri'. Available jobs: ...
    Hint: Name a built-in job, a job file (./my-job.yaml), or create one with ...

with the error's exit code (the table in :mod:`toolkit.errors`).
"""

from __future__ import annotations

import sys
from typing import NoReturn

import click

from toolkit.errors import RunInterruptedError, ToolkitError


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


#: The exit code of a command the user stopped with Ctrl-C (128 + SIGINT, as shells use).
INTERRUPTED_EXIT_CODE = RunInterruptedError.exit_code


def interrupted(message: str) -> NoReturn:
    """Ctrl-C: say what was kept or keeps running and how to get back to it, then exit
    130, with no traceback and never click's ``Aborted!``."""
    if sys.stderr.isatty():
        click.echo("", err=True)  # past the ^C the terminal echoed
    click.echo(message, err=True)
    raise SystemExit(INTERRUPTED_EXIT_CODE)
