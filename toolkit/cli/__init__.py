"""The ``toolkit`` command: thin click commands over the library, and their output."""

from toolkit.cli.main import main, run

__all__ = ["main", "run"]
