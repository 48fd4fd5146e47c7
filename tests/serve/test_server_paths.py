"""What a client reads of a run's messages: no path on the server, in any spelling."""

from __future__ import annotations

import pytest

from toolkit.serve.server_paths import without_server_paths


@pytest.mark.parametrize("text, shown", [
    ("data.input: /srv/store/files/file-1 does not exist.", "data.input: file-1 does not exist."),
    ("can't write ~/.cache/batch-llm-toolkit/serve/batches/b/run: disk full",
     "can't write <server path>: disk full"),
    ("opening file:///srv/store/batches/b/run/_input failed",
     "opening <server path> failed"),
    ("Stopped: 3 of 9 rows kept in '/srv/store/batches/b/run'; run it again.",
     "Stopped: 3 of 9 rows kept in '<server path>'; run it again."),
    # What is no path on the server stays: the API's own paths, ratios, URLs.
    ("url '/v1/embeddings' is not supported; 1/2 done; see https://example.com/a/b",
     "url '/v1/embeddings' is not supported; 1/2 done; see https://example.com/a/b"),
])
def test_paths_on_the_server_become_names_the_client_knows_or_are_hidden(text, shown):
    assert without_server_paths(text, {"/srv/store/files/file-1": "file-1"}) == shown
