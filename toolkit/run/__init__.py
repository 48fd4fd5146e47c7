"""Running a job: the Ray Data pipeline, planned and checked once, and what it needs.

- ``input/``: reading the input and checking its rows before any model loads, the
  resumable input plan, and the formats with behaviour of their own (OpenAI batch).
- ``output/``: the run directory (manifest, lock, resume, ``--overwrite``), where
  results land, the summary and the report.
- ``ray/``: joining Ray (embedded or ``RAY_ADDRESS``), its auth, its own output, and
  whether the cluster can hold the run.
- ``progress/``: the one progress model, where its figures come from, the terminal
  line, a submitted job's log (written and read back) and the watcher of a job.
- Here: the run itself (``preflight``, the one ``driver`` that executes a plan for
  ``toolkit run`` (``local_run``) and a submitted job alike, the ``pipeline`` that
  builds the dataset, the ``row_steps`` its workers run, its model stages, row checks,
  the stop-loss, ``retry``).

Imports the spec and engine layers below it; never the cluster or CLI layers.
"""
