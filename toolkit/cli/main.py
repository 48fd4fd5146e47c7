"""The ``toolkit`` command. Each command parses, calls one library function, prints.

Heavy libraries (ray, torch, transformers) are imported only inside the commands
that run a pipeline or talk to a cluster, so ``toolkit --help``, ``show`` and
``render`` start in well under a second.
"""

from __future__ import annotations

import gc
import sys
from pathlib import Path
from typing import Any

import click

from toolkit.cli.cluster_commands import CLUSTER_COMMANDS
from toolkit.cli.click_errors import interrupted, to_click
from toolkit.cli.cache_command import cache_group
from toolkit.cli.dashboard_command import dashboard_command
from toolkit.cli.serve_command import serve_command
from toolkit.cli.spec_options import (
    CHECK_TOKENS_HELP,
    input_changed_option,
    load_spec_from_flags,
    pop_spec_flags,
    spec_options,
)
from toolkit.error_causes import root_cause
from toolkit.errors import RunInterruptedError, SpecError, ToolkitError, debug_enabled

class ToolkitGroup(click.Group):
    """Shows the library's errors as click's (``Error:``, ``Hint:``, their exit code) and
    turns unexpected exceptions into one paragraph (tracebacks with TOOLKIT_DEBUG=1).

    Every subcommand, nested groups' included, runs inside this ``invoke``, so this
    is the one place where errors are converted.
    """

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except (click.ClickException, click.exceptions.Exit, click.Abort, KeyboardInterrupt):
            raise
        except ToolkitError as exc:
            # Expected failures: the message and hint say it all, even with TOOLKIT_DEBUG=1.
            raise to_click(exc) from exc
        except Exception as exc:
            if debug_enabled():
                raise
            raise to_click(ToolkitError(
                f"Unexpected error: {root_cause(exc)}",
                hint="Rerun with TOOLKIT_DEBUG=1 to see the traceback.",
            )) from None


@click.group(cls=ToolkitGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="batch-llm-toolkit")
def main() -> None:
    """Offline LLM and vision-LLM batch inference on Ray, in one command.

    \b
    Try it offline (generated data, tiny model, local Ray):
      toolkit run text-industry --rows 1000 --smoke
    Real model, your data, on this machine's CPU:
      toolkit run text-industry --rows 10k --input customers.csv --output out/ \\
          --engine transformers --accelerator none --model Qwen/Qwen2.5-0.5B-Instruct
    See every setting of a job:
      toolkit show text-industry

    \b
    Your own job, in this folder:
      toolkit new review-sentiment && toolkit run review-sentiment --smoke

    JOB is a built-in name (toolkit jobs), a job file (./my-job.yaml, my_job.py)
    or the name of a job file here. Specs are layered: the toolkit's defaults,
    the job file, -f FILE, --smoke, flags, then --set KEY=VALUE; the result is
    validated once.
    """


@main.command("jobs")
def jobs_command() -> None:
    """List the built-in jobs and the job files in this folder."""
    from toolkit.spec.jobs.catalog import builtin_jobs, project_jobs

    found = project_jobs()
    rows = [("built-in", job) for job in builtin_jobs()] + [("here", job) for job in found]
    width = max(len(job.shown_as) for _, job in rows)
    for where, job in rows:
        click.echo(f"{job.shown_as:{width}}  {where:8}  {job.description}")
    if not found:
        click.echo("\nNo job files in this folder; 'toolkit new NAME' writes one.", err=True)


@main.command("new")
@click.argument("name")
@click.option("--python", "as_python", is_flag=True,
              help="Write a Python job (preprocess/postprocess in code) instead of a YAML one.")
def new_command(name: str, as_python: bool) -> None:
    """Write a new job NAME into this folder, with a small sample input, ready to run.

    \b
    Example:
      toolkit new review-sentiment
      toolkit run review-sentiment --smoke      # tiny model, offline
      toolkit run review-sentiment --input reviews.csv --engine transformers \\
          --accelerator none --model Qwen/Qwen2.5-0.5B-Instruct
    """
    from toolkit.spec.jobs.scaffold import write_new_job

    written = write_new_job(Path.cwd(), name, python=as_python)
    for path in written:
        click.echo(f"Wrote {path.name}")
    click.echo(f"Try it offline: toolkit run {name} --smoke")


@main.command("show")
@spec_options
def show_command(job: str, spec_file: Path | None, sets: tuple[str, ...], smoke: bool,
                 **kwargs: Any) -> None:
    """Print the full effective spec of JOB as YAML (after -f, flags and --set)."""
    from toolkit.spec.loading import spec_to_yaml

    _, spec = load_spec_from_flags(job, spec_file, sets, smoke, **pop_spec_flags(kwargs))
    click.echo(spec_to_yaml(spec), nl=False)


@main.command("run")
@spec_options
@click.option("--overwrite", is_flag=True, help="Replace results already in the output directory.")
@click.option("--address", help="Ray cluster to run the driver against (default: RAY_ADDRESS, "
                                "else a local Ray started for this run).")
@click.option("-v", "--verbose", is_flag=True,
              help="Show Ray's own output (its logs, warnings and progress bars) here "
                   "instead of in <output>/_logs/run.log.")
@click.option("--dashboard", is_flag=True,
              help="Start the Ray Dashboard with the local Ray (off by default: about 1 GB "
                   "and a slower start that the engine would otherwise have).")
@click.option("--check-tokens", "check_tokens", is_flag=True, help=CHECK_TOKENS_HELP)
@input_changed_option
def run_command(job: str, spec_file: Path | None, sets: tuple[str, ...], smoke: bool,
                overwrite: bool, address: str | None, verbose: bool, dashboard: bool,
                check_tokens: bool, input_changed: str | None, **kwargs: Any) -> None:
    """Run JOB's pipeline from here, on a local Ray (or RAY_ADDRESS), and summarise it.

    Shows one progress line (rows done of total, rows/s, ETA, error rows); Ray's
    own output goes to <output>/_logs/run.log (-v shows it here instead).

    \b
    Examples:
      toolkit run text-industry --rows 1000 --smoke
      toolkit run text-industry --input customers.csv --rows 10k --output out/industry \\
          --engine transformers --accelerator none --model Qwen/Qwen2.5-0.5B-Instruct
    """
    job_def, spec = load_spec_from_flags(job, spec_file, sets, smoke, **pop_spec_flags(kwargs))
    _run_with_progress(job_def, spec, overwrite=overwrite, address=address, verbose=verbose,
                       dashboard=dashboard, check_tokens=check_tokens,
                       input_changed=input_changed)


@main.command("retry")
@click.argument("output")
@click.option("--only", "only", multiple=True, metavar="CHECK",
              help="Redo only rows that failed this check (truncated, empty, invalid, "
                   "refusal, low_confidence, your own) or 'error' for error rows; repeatable. "
                   "Default: every row with an error or a failed check.")
@click.option("--set", "sets", multiple=True, metavar="KEY=VALUE",
              help="Change a setting for the rows redone, e.g. sampling.max_tokens=16 "
                   "(repeatable; the manifest records it as a new attempt).")
@click.option("--job", "job", metavar="JOB",
              help="The run's job as 'toolkit run' names it (a built-in, ./my-job.yaml). "
                   "Default: the job the run's manifest names, looked up among the built-ins "
                   "and the job files in this folder.")
@click.option("--address", help="Ray cluster to run the driver against (default: RAY_ADDRESS, "
                                "else a local Ray started for this run).")
@click.option("-v", "--verbose", is_flag=True,
              help="Show Ray's own output here instead of in <output>/_logs/run.log.")
@input_changed_option
def retry_command(output: str, only: tuple[str, ...], sets: tuple[str, ...], job: str | None,
                  address: str | None, verbose: bool, input_changed: str | None) -> None:
    """Redo, in place, only the rows of OUTPUT that failed, plus any a stopped run never reached.

    Rows with an error or a failed check are taken out of the result files and run
    again with the run's spec and your --set changes; every other row stays. A plain
    reader (pandas.read_parquet(OUTPUT)) then sees one row per id, the latest
    attempt's, and the summary lists every attempt. Interrupted, it resumes when
    run again.

    \b
    Examples:
      toolkit retry out/text-industry --set sampling.max_tokens=16
      toolkit retry out/text-industry --only truncated --set sampling.max_tokens=32
    """
    from toolkit.redaction import redact
    from toolkit.run.input.identity import InputChanged
    from toolkit.run.retry import holding, prepare_retry

    choice = InputChanged(input_changed) if input_changed else None
    with holding(output):  # from the setup through the run: no other run writes here
        job_def, spec, setup = prepare_retry(output, sets, list(only) or None, job=job,
                                             input_changed=choice)
        if setup.nothing_to_do and not setup.input_changed:
            click.echo(f"Nothing to retry: no row in {redact(output)} failed"
                       + (f" {', '.join(only)}" if only else "") + ".")
            return
        if setup.nothing_to_do:
            click.echo(f"No row in {redact(output)} failed; its input changed: "
                       f"--input-changed {input_changed}.")
        elif setup.resumed:
            click.echo(f"Resuming retry attempt {setup.attempt} in {redact(output)}.")
        else:
            missing = (f", {setup.rows_missing:,} missing from the result files"
                       if setup.rows_missing else "")
            click.echo(f"Retry attempt {setup.attempt}: redoing {setup.rows_to_redo:,} failed "
                       f"rows{missing} and any not reached; keeping {setup.rows_kept:,}.")
        _run_with_progress(job_def, spec, overwrite=False, address=address, verbose=verbose,
                           dashboard=False, input_changed=input_changed)


def _run_with_progress(job_def: Any, spec: Any, *, overwrite: bool, address: str | None,
                       verbose: bool, dashboard: bool, check_tokens: bool = False,
                       input_changed: str | None = None) -> None:
    """Run a loaded spec with the progress line, then print its summary."""
    from toolkit.redaction import redact
    from toolkit.run.input.identity import InputChanged
    from toolkit.run.local_run import run_job
    from toolkit.run.output.summary_text import SMOKE_WARNING, format_summary
    from toolkit.run.progress.display import ProgressDisplay, plain_interval
    from toolkit.run.ray.log_output import default_log_file, terminal
    from toolkit.samples.provider import SAMPLES

    log_file = None if verbose else default_log_file(spec)
    with terminal() as out:
        # Under -v Ray draws its own bars, so ours is a plain line now and then.
        live = out.isatty() and not verbose
        display = ProgressDisplay(out, interactive=live, plain_interval_s=plain_interval())
        first = ""
        if spec.cascade is not None:
            below = (f" below {spec.cascade.escalate_below:g}"
                     if spec.cascade.escalate_below is not None else "")
            first = f" (after {spec.cascade.model}, escalating{below})"
        display.message(redact(f"Running {job_def.name} on {spec.engine.kind} with "
                               f"{spec.engine.model}{first}: {spec.data.input} -> "
                               f"{spec.data.output}"))
        if spec.uses_sample_model:
            display.message(SMOKE_WARNING)
        if log_file:
            display.message(f"Ray's own output goes to {log_file} (-v shows it here).")
        try:
            summary = run_job(job_def, spec, overwrite=overwrite, address=address,
                              samples=SAMPLES, log_file=log_file, observer=display,
                              dashboard=dashboard, check_tokens=check_tokens,
                              input_changed=InputChanged(input_changed) if input_changed
                              else None)
        except RunInterruptedError as stopped:
            display.close()
            interrupted(stopped.message)
        except KeyboardInterrupt:  # before the run's folder was taken: nothing to keep
            display.close()
            interrupted("Stopped before any row was run.")
        finally:
            display.close()
    click.echo(format_summary(summary))


@main.command("report")
@click.argument("output")
@click.option("-o", "--out", "destination", type=click.Path(dir_okay=False, path_type=Path),
              help="HTML file to write (default: _report.html inside OUTPUT).")
def report_command(output: str, destination: Path | None) -> None:
    """Write the HTML report of the finished run in OUTPUT and print its path.

    One self-contained file (no scripts, nothing from the network): the run's counts,
    checks and figures, a chart per result column, errors grouped by kind, rows/s
    over the run, tokens and GPU-hours, and sample rows with inputs beside outputs.
    Every finished run writes it already, as OUTPUT/_report.html; this rewrites it
    or writes it elsewhere.

    \b
    Examples:
      toolkit report out/date-reformat
      toolkit report s3://my-bucket/runs/industry -o industry.html
    """
    from toolkit.run.output.report import write_report

    try:
        click.echo(write_report(output, destination))
    except FileNotFoundError as exc:
        raise SpecError(f"{exc}.", hint="Give the --output directory of a run that "
                           "finished (it holds _summary.json).") from None


@main.group("samples")
def samples_group() -> None:
    """Generate sample data and tiny models for offline runs and tests."""


@samples_group.command("customers")
@click.option("--rows", default="1000", show_default=True, help="Rows to write: 1000, 10k, 1M.")
@click.option("-o", "--output", type=click.Path(path_type=Path), required=True,
              help="CSV file to write.")
@click.option("--seed", type=int, default=0, show_default=True, help="Same seed, same rows.")
def samples_customers(rows: str, output: Path, seed: int) -> None:
    """Write customers in the schema of the Ray Data LLM example's customers CSV."""
    import time

    from toolkit.samples.customers import write_customers_csv
    from toolkit.spec.models import parse_row_count

    try:
        count = parse_row_count(rows)
    except ValueError as exc:
        raise ToolkitError(f"--rows: {exc}") from None
    if count is None:
        raise ToolkitError("--rows: give a number of rows to generate, not 'all'.")
    started = time.monotonic()
    path = write_customers_csv(output, rows=count, seed=seed)
    click.echo(f"Wrote {count:,} customers to {path} in {time.monotonic() - started:.1f} s.")


@samples_group.command("images")
@click.option("--count", type=click.IntRange(min=1), default=50, show_default=True)
@click.option("--corrupt", type=click.IntRange(min=0), default=0, show_default=True,
              help="How many of them to break on purpose (truncated, not an image, empty).")
@click.option("-o", "--output", type=click.Path(path_type=Path), required=True,
              help="Directory to write into.")
@click.option("--seed", type=int, default=0, show_default=True)
def samples_images(count: int, corrupt: int, output: Path, seed: int) -> None:
    """Write generated pictures, some deliberately broken, for vlm-caption runs."""
    from toolkit.samples.image_files import write_sample_images

    try:
        paths = write_sample_images(output, count=count, corrupt=corrupt, seed=seed)
    except ValueError as exc:
        raise ToolkitError(f"samples images: {exc}") from None
    click.echo(f"Wrote {len(paths)} images ({corrupt} broken on purpose) to {output}.")


@samples_group.command("model")
@click.option("--kind", type=click.Choice(["chat", "vision"]), default="chat", show_default=True)
@click.option("-o", "--output", type=click.Path(path_type=Path),
              help="Directory to build into (default: the toolkit cache).")
def samples_model(kind: str, output: Path | None) -> None:
    """Build a tiny random-weight model (seconds, offline). Its outputs are noise."""
    if kind == "chat":
        from toolkit.samples.tiny_model import build_tiny_chat_model, tiny_chat_model_path

        path = build_tiny_chat_model(output) if output else tiny_chat_model_path()
    else:
        from toolkit.samples.tiny_vision_model import (
            build_tiny_vision_model,
            tiny_vision_model_path,
        )

        path = build_tiny_vision_model(output) if output else tiny_vision_model_path()
    click.echo(f"Tiny {kind} model ready at {path} (use it with --model {path}).")


def run() -> None:
    """Console-script entry point."""
    try:
        main(prog_name="toolkit")
    finally:
        # Every file is closed by now. Left alone, the interpreter's exit walks
        # Ray Data's and pyarrow's object graphs for cycles to collect: half a
        # second of every run spent after its last line. Frozen objects are skipped.
        gc.freeze()


for _command in CLUSTER_COMMANDS:
    main.add_command(_command)
main.add_command(serve_command)
main.add_command(dashboard_command)
main.add_command(cache_group)


if __name__ == "__main__":
    sys.exit(run())
