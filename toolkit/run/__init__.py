"""Running a job: the Ray Data pipeline, planned and checked once, and what it needs.

- ``input/``: reading the input and checking its rows before any model loads, the
  resumable input plan, and the formats with behaviour of their own (OpenAI batch).
- ``output/``: the run directory (manifest, lock, resume, ``--overwrite``), where
  results land, the summary and the report.
- ``ray/``: joining Ray (embedded or ``RAY_ADDRESS``), its auth, its own output, and
  whether the cluster can hold the run.
- ``progress/``: the one progress model, where its figures come from, and the
  terminal line of a local run.
- Here: the run itself (``local_run``, ``preflight``, ``pipeline`` and its model
  stages, row checks, the stop-loss, ``retry``).

Imports the spec and engine layers below it; never the cluster or CLI layers.
"""
