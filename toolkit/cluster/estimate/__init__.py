"""The cost estimate ``toolkit plan`` prints: what a job will take before it runs:
time, GPU-hours, money.

An estimate multiplies a few figures, and says where each one came from:

- **rows**: ``data.rows`` (spec), a ``sample:`` input's default, or counted in a
  local input file (measured);
- **tokens per row** of the chat stage (the last ``generate`` one, else the main
  one, with placeholders for what earlier stages add): its prompts for a sample
  of the input rows (generated rows for ``sample:`` inputs, the first rows of a
  local file), tokenized with the
  model's own tokenizer when it is on this machine (a local model directory or
  the Hugging Face cache, loaded offline: measured); otherwise about
  :data:`CHARS_PER_TOKEN` characters per token over the rendered prompts, or over
  the prompt template with placeholder values when no input rows can be read
  from here (estimate). The answer's tokens come from a pilot run (measured),
  the choices of a ``choice`` output (estimate), or ``sampling.max_tokens`` (an
  upper bound);
- for each model stage (``spec.model_stages``: a multi-stage job's
  ``stages.NAME`` sections, then ``engine``):

  - **workers** (its ``concurrency``, capped by what ``compute.max_workers``
    instances hold) and their instance type (:mod:`toolkit.cluster.compute_table`);
  - **rows/s per worker**: measured by a pilot run (``--from-run DIR``: its
    ``_summary.json``; one rate for the whole pipeline), or, for the chat stage
    on a kind the table covers, tokens/s from
    :mod:`toolkit.cluster.throughput_table` divided by the tokens per row
    (table, rough); other stages have no table figure;
  - **price per hour** of a worker instance: :mod:`toolkit.cluster.price_table`
    or ``--price-per-hour`` (flag).

Rows stream through every stage, so the slowest sets the pace: wall time = rows
/ min over stages of (rows/s per worker x workers); GPU-hours = wall time x every
stage's workers x GPUs per worker; cost = wall time x (every stage's worker
instances x their price + the head node's). A stage with no rate is assumed to
keep up (and said so). Model loading, autoscaling and retries are not included.

Light: no Ray, no torch; transformers is imported only when the model's
tokenizer is on this machine.

The estimate is :func:`~toolkit.cluster.estimate.job_estimate.estimate_job`; its
figures and how they print are :mod:`~toolkit.cluster.estimate.figures`, the rows and
tokens per row :mod:`~toolkit.cluster.estimate.workload`, what a pilot run measured
:mod:`~toolkit.cluster.estimate.pilot`. (A run's own plan, what preflight resolves, is
:class:`toolkit.run.run_plan.RunPlan`: this is an estimate, not a plan.)
"""
