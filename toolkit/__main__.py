"""``python -m toolkit``: the ``toolkit`` command, run by this Python.

How ``toolkit serve`` starts a batch's run: with its own interpreter and import path
(the console script may belong to another install), and without the serve layer
naming the CLI module above it.
"""

import sys

from toolkit.cli.main import run

if __name__ == "__main__":
    sys.exit(run())
