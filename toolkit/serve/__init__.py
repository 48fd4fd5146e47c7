"""``toolkit serve``: the OpenAI Files and Batches API on your own Ray cluster.

Layers, top down: :mod:`.app` (the HTTP endpoints), :mod:`.supervisor` (which batch
runs when: bookkeeping over child processes, each a ``toolkit run openai-batch``),
:mod:`.batch_runs` (one child process), :mod:`.batch_files` (a run directory's rows
as the batch's output and error files), :mod:`.store` (files and batches in SQLite)
and :mod:`.openai_objects` (the objects as OpenAI's clients read them).
:func:`.server.serve` wires them together. Ray does the distributed work: each
batch is one ordinary run of the ``openai-batch`` job.
"""
