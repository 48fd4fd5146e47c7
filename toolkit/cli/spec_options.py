"""The spec flags every spec-taking command shares (run, show, render, submit)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

import click

from toolkit.engines.registry import engine_kinds

if TYPE_CHECKING:
    from toolkit.spec.job_definition import JobDefinition
    from toolkit.spec.models import JobSpec

# Flag name -> dotted spec path. Only flags the user actually gave are applied.
SPEC_FLAGS: dict[str, str] = {
    "rows": "data.rows",
    "input": "data.input",
    "output": "data.output",
    "partitions": "data.partitions",
    "model": "engine.model",
    "engine": "engine.kind",
    "batch_size": "engine.batch_size",
    "concurrency": "engine.concurrency",
    "accelerator": "engine.accelerator_type",
    "strict": "strict",
    "served_model_names": "options.served_model_names",
    "cascade_model": "cascade.model",
    "escalate_below": "cascade.escalate_below",
    "spot": "compute.market_type",
    "cache": "cache.dir",
}


#: What ``--cache`` given alone stands for: :func:`default_answer_cache`.
DEFAULT_CACHE = "<default answer cache>"


def default_answer_cache() -> str:
    """Where ``--cache`` alone keeps answers: ``$TOOLKIT_CACHE_DIR/answers``, else
    ``~/.cache/batch-llm-toolkit/answers`` (beside the toolkit's other caches)."""
    from toolkit.cluster.backends.local_head import cache_dir

    return str(cache_dir() / "answers")


#: ``--check-tokens`` of run and submit.
CHECK_TOKENS_HELP = ("Before any model loads, count every input row's prompt tokens with the "
                     "model's tokenizer (as toolkit plan --tokens does) and refuse the run if a "
                     "row is longer than the engine's max_model_len, naming those rows.")


#: ``--input-changed`` of run, retry and submit (see :mod:`toolkit.run.input.identity`).
input_changed_option = click.option(
    "--input-changed", "input_changed", type=click.Choice(["keep", "redo"]),
    help="When the input changed since the run in the output folder wrote its rows (a "
         "rerun is refused, naming what changed): keep = leave every written row as it is "
         "and run the ids not written yet; redo = also redo the rows whose columns the job "
         "reads changed, and take out rows whose ids left the input.")


#: ``--spot`` of render, submit and plan: the commands that read ``compute``.
spot_option = click.option(
    "--spot", "spot", flag_value="SPOT", default=None,
    help="Spot workers (compute.market_type SPOT; the head stays on demand): cheaper, but "
         "a node can be taken back and its rows in flight are redone. PREFER_SPOT (on "
         "demand when there is no spot): --set compute.market_type=PREFER_SPOT.")


def spec_options(command: Callable[..., Any]) -> Callable[..., Any]:
    """The options every spec-taking command shares (run, show, render, submit)."""
    options = [
        click.argument("job", metavar="JOB"),
        click.option("-f", "--file", "spec_file", type=click.Path(path_type=Path),
                     help="YAML spec file: a copy of a template, or just the keys to change."),
        click.option("--rows", help="Process the first N rows: 1000, 10k, 1M, 2_000_000 or 'all'."),
        click.option("--input", help="Input: a csv/parquet/jsonl path or URL, an image folder, "
                                     "hf://DATASET, or sample:customers / sample:images."),
        click.option("--output", help="Output directory (local or s3://)."),
        click.option("--partitions", help="Number of blocks to split the rows into."),
        click.option("--model", help="Hugging Face id or local checkpoint directory."),
        click.option("--engine", type=click.Choice(list(engine_kinds())),
                     help="Inference engine: " + ", ".join(
                         kind.summary for kind in engine_kinds().values()) + "."),
        click.option("--batch-size", help="Rows per engine batch."),
        click.option("--concurrency", metavar="N|MIN-MAX",
                     help="Engine workers (model replicas): 4 is a fixed pool of 4, 1-4 "
                          "autoscales between 1 and 4."),
        click.option("--accelerator", help="GPU type per engine worker, e.g. L4, A10G, H100; "
                                           "none runs the engine on CPUs."),
        click.option("--set", "sets", multiple=True, metavar="KEY=VALUE",
                     help="Set any spec key, e.g. --set sampling.temperature=0.2 (repeatable)."),
        click.option("--strict", is_flag=True, default=None,
                     help="Fail at the first row that errors (default: write it with its "
                          "error and go on)."),
        click.option("--served-model-name", "served_model_names", multiple=True,
                     metavar="NAME",
                     help="openai-batch: a name the request lines' body.model may give for "
                          "the model (repeatable, as vLLM's); lines naming another model "
                          "are error lines (404). Default: the --model as given."),
        click.option("--cascade-model", metavar="SMALL",
                     help="Small model first: SMALL answers every row, and only the rows "
                          "it is unsure of (see --escalate-below), that fail a check or that "
                          "it errors on go on to --model. Its engine settings follow "
                          "engine's unless cascade.* sets them."),
        click.option("--escalate-below", type=float, metavar="CONFIDENCE",
                     help="With --cascade-model: a row whose answer's confidence is under "
                          "this (0-1] goes on to the big model."),
        click.option("--cache", metavar="[DIR]", is_flag=False, flag_value=DEFAULT_CACHE,
                     help="Answer cache (cache.dir): a folder or s3://... A row answered "
                          "before with the same prompt, model and settings is answered "
                          "from it, without the model; new answers are added to it. "
                          "--cache alone: $TOOLKIT_CACHE_DIR/answers, else "
                          "~/.cache/batch-llm-toolkit/answers."),
        click.option("--smoke", is_flag=True,
                     help="Offline check: generated input and a tiny random-weight model on "
                          "one CPU worker (results are not meaningful)."),
    ]
    for option in reversed(options):
        command = option(command)
    return command


def load_spec_from_flags(job_name: str, spec_file: Path | None, sets: tuple[str, ...],
                         smoke: bool, **flags: Any) -> tuple["JobDefinition[Any]", "JobSpec"]:
    """The job and its validated spec from a command's spec flags (None = not given).

    Settings that are valid but costly (e.g. too few batches in flight to keep vLLM
    busy) are printed to stderr as warnings.
    """
    from toolkit.errors import SpecError
    from toolkit.spec.jobs.catalog import load_job
    from toolkit.spec.loading import load_job_spec

    job = load_job(job_name)
    if flags.get("cache") == DEFAULT_CACHE:
        flags = {**flags, "cache": default_answer_cache()}
    # A repeatable flag not given is an empty tuple: not given either.
    overrides = {SPEC_FLAGS[name]: list(value) if isinstance(value, tuple) else value
                 for name, value in flags.items() if value is not None and value != ()}
    if "options.served_model_names" in overrides and "served_model_names" not in getattr(
            job.spec_model.model_fields["options"].annotation, "model_fields", {}):
        raise SpecError(f"--served-model-name names the model for the lines of an OpenAI "
                        f"batch file; job {job.name!r} reads none (it has no "
                        "options.served_model_names).",
                        hint="Leave --served-model-name out, or run it with openai-batch.")
    spec = load_job_spec(job, spec_file=spec_file, overrides=overrides, sets=sets, smoke=smoke)
    for warning in spec.engine.engine_warnings():
        click.echo(f"Warning: {warning}", err=True)
    return job, spec


def pop_spec_flags(kwargs: dict[str, Any]) -> dict[str, Any]:
    """Take the spec flags out of a command's keyword arguments."""
    return {name: kwargs.pop(name) for name in list(kwargs) if name in SPEC_FLAGS}
