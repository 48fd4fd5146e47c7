"""Paths on the server, kept out of what clients read.

A batch's run is an ordinary ``toolkit run`` on files in the server's store, so its
messages name them (``data.input: /srv/store/files/file-… does not exist``), as an
engine's error may name a model's folder. Clients have no business with the server's
layout: before such text becomes a batch's error or a line of its error file, known
paths become names the client knows (the input file's id) and any other absolute path
becomes :data:`HIDDEN`. The API's own paths (``/v1/chat/completions``) are left as
they are.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

#: What an absolute path on the server is replaced with.
HIDDEN = "<server path>"

# A "/" (or "~/", a home folder's, or "file:///") that starts no word (so "1/2", "and/or"
# and a URL's own path are left alone), then a path's characters; "/v1..." is the API's,
# not the server's. A "." or ":" it ends with is the sentence's.
_ABSOLUTE_PATH = re.compile(
    r"(?<![\w.~:/\-])(?:file://)?~?/(?!v1\b)[\w.@%+=~\-][^\s'\"`<>()\[\]{},;]*(?<![.:])")


def without_server_paths(text: str, names: Mapping[str, str] | None = None) -> str:
    """``text`` with each path of ``names`` replaced by its name (longest first, so a
    file in the store goes before the store), then every other absolute path hidden.

    Example:
        >>> without_server_paths("data.input: /srv/s/files/file-1 has 2 lines; see /tmp/x",
        ...                      {"/srv/s/files/file-1": "file-1"})
        'data.input: file-1 has 2 lines; see <server path>'
    """
    for path, name in sorted((names or {}).items(), key=lambda item: -len(item[0])):
        text = text.replace(path, name)
    return _ABSOLUTE_PATH.sub(HIDDEN, text)
