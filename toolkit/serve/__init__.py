"""``toolkit serve``: the OpenAI Files and Batches API on your own Ray cluster.

Layers, top down: :mod:`.app` (the HTTP endpoints), :mod:`.supervisor` (which batch
runs when: bookkeeping over child processes, each a ``toolkit run openai-batch``),
:mod:`.batch_runs` (one child process), :mod:`.batch_files` (a run directory's rows
as the batch's output and error files), :mod:`.store` (files and batches in SQLite)
and :mod:`.openai_objects` (the objects as OpenAI's clients read them). Beside them,
what holds untrusted requests to OpenAI's terms: :mod:`.limits` (OpenAI's documented
limits), :mod:`.body_limit` (bodies held to them as they arrive),
:mod:`.batch_validation` (an input file checked before its batch runs) and
:mod:`.server_paths` (no server path in what a client reads).
:func:`.server.serve` wires them together. Ray does the distributed work: each
batch is one ordinary run of the ``openai-batch`` job.
"""
