"""What a job may be called.

A job's name is more than a label: it names the default output folder
(``out/<job>``), the rendered spec's folder and files, the Ray job's name and the log
file, and a run folder's manifest records it so ``toolkit retry`` can find the job
again. So it is a name, never a path: letters, digits, ``-``, ``_`` and ``.``, no
``/`` and no ``..``, so every path made from it stays inside its parent folder.
"""

from __future__ import annotations

import re

_JOB_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$")

#: The rule in words, for messages.
JOB_NAME_RULE = ("letters, digits, '-', '_' and '.' (starting with a letter or digit, "
                 "at most 100 characters, no '/' and no '..')")


def job_name_problem(name: object) -> str | None:
    """Why ``name`` can't be a job's name; None when it can."""
    if not isinstance(name, str) or not _JOB_NAME.match(name) or ".." in name:
        return f"{name!r} is not a job name: use {JOB_NAME_RULE}"
    return None
