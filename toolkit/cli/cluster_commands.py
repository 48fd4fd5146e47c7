"""``toolkit render | plan | submit | status | logs | stop | list``: jobs that run elsewhere.

Each command parses its flags, calls the library (:mod:`toolkit.cluster.render`,
:mod:`toolkit.cluster.backends`, :mod:`toolkit.run.progress.following`) and prints.
Human-readable notes go to stderr; stdout carries what scripts want: the job id from
``submit``, the job's logs, ``status``/``list`` output (``--format json`` for machines).

Exit codes (see :mod:`toolkit.errors`): 0 ok / job SUCCEEDED, 2 bad spec, flag or
job id, 3 cluster unreachable or not logged in, 4 job FAILED, 5 job STOPPED, 6 a
wait timed out, 7 a followed job stalled (``--fail-on-stall``).

``toolkit.cli`` registers ``CLUSTER_COMMANDS`` on its ``main`` group.
"""

from __future__ import annotations

import functools
import json
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from toolkit.cli.click_errors import interrupted
from toolkit.cli.plan_command import plan_command, quick_estimate, sample_rows
from toolkit.cli.spec_options import (
    CHECK_TOKENS_HELP,
    input_changed_option,
    load_spec_from_flags,
    pop_spec_flags,
    spec_options,
    spot_option,
)
from toolkit.errors import WaitTimeoutError

if TYPE_CHECKING:
    from toolkit.cluster.backends.base import Backend

DEFAULT_FOLLOW_TIMEOUT_S = 24 * 3600.0


def _note(message: str) -> None:
    click.echo(message, err=True)


def backend_options(command: Callable[..., Any]) -> Callable[..., Any]:
    """``--backend`` and ``--address``, shared by every command that talks to a backend."""
    command = click.option(
        "--address",
        metavar="URL|local",
        help="Ray cluster (backend ray): its dashboard URL, e.g. http://HEAD:8265, or "
        "'local' to start or reuse a Ray head on this machine. Default: $RAY_ADDRESS.",
    )(command)
    command = click.option(
        "--backend",
        type=click.Choice(["ray", "anyscale"]),
        default="ray",
        show_default=True,
        envvar="TOOLKIT_BACKEND",
        help="Where jobs run: a Ray cluster (Ray Jobs API) or Anyscale ($TOOLKIT_BACKEND).",
    )(command)
    return command


def _open(backend: str, address: str | None) -> "Backend":
    from toolkit.cluster.backends import open_backend

    return open_backend(backend, address, on_event=_note)


def working_dir_option(command: Callable[..., Any]) -> Callable[..., Any]:
    command = click.option(
        "--exclude", "excludes", multiple=True, metavar="PATTERN",
        help="Leave PATTERN (a .gitignore line, e.g. data/ or *.parquet) out of the upload; "
        "repeatable. .gitignore and .rayignore in the project are honoured too.",
    )(command)
    return click.option(
        "--working-dir", type=click.Path(path_type=Path, file_okay=False, exists=True),
        help="Your project folder, uploaded with the job (default: the current directory). "
        "The job and the toolkit are staged in its .toolkit/ folder.",
    )(command)


def _target_flags(backend: str, address: str | None) -> str:
    if backend == "anyscale":
        return " --backend anyscale"
    return f" --address {address}" if address else ""


def _timeout_option(default: float, text: str) -> Callable[..., Any]:
    return click.option(
        "--timeout", type=click.FloatRange(min=0), default=default, show_default=True,
        metavar="SECONDS", help=text,
    )


def _report_interval() -> float:
    """Seconds between progress lines while following without a terminal:
    ``$TOOLKIT_PROGRESS_INTERVAL`` (as for ``toolkit run``), else one a minute."""
    from toolkit.run.progress.display import PLAIN_INTERVAL_ENV, plain_interval
    from toolkit.run.progress.watched_job import REPORT_INTERVAL_S

    return plain_interval() if os.environ.get(PLAIN_INTERVAL_ENV) else REPORT_INTERVAL_S


def _follow(target: Any, job_id: str, timeout: float, flags: str,
            stall_timeout: float | None = None, fail_on_stall: bool = False,
            raw: bool = False) -> None:
    """Show the job until it ends; exit 0 / 4 / 5, 6 on timeout, 7 on a stall with
    ``fail_on_stall``, 130 on Ctrl-C (the job keeps running).

    By default only the toolkit's own lines of its log are shown (what it does before
    rows come and a progress line, warnings, errors, the summary); ``raw`` streams the
    whole log instead (``--raw``: see :func:`_follow_options`).
    """
    display: Any = None

    def end_line() -> None:  # the job's outcome is said next: the live line goes
        if display is not None:
            display.close(keep=False)

    # Every import is inside the try: a Ctrl-C while the progress modules loaded
    # (pyarrow takes a moment) escaped to click, which printed `Aborted!`.
    try:
        from toolkit.run.progress.display import ProgressDisplay
        from toolkit.run.progress.following import ctrl_c_noticed, raise_for_outcome
        from toolkit.run.progress.watched_job import (
            DEFAULT_STALL_TIMEOUT_S,
            JobObserver,
            WatchOptions,
            watch_job,
        )

        # The job's lines on stdout, for scripts; the progress line and notes on stderr.
        display = ProgressDisplay(sys.stderr, interactive=sys.stderr.isatty(),
                                  plain_interval_s=0.0, lines=sys.stdout)

        # Colours only on a terminal, as click.echo does (Ray colours worker prefixes).
        plain = (lambda text: text) if sys.stdout.isatty() else click.unstyle

        class Followed(JobObserver):
            reads_log = "raw" if raw else "lines"

            def log(self, text: str) -> None:
                display.job_text(plain(text))

            def line(self, line: Any) -> None:
                display.job_line(plain(line.shown()), ended=line.kind == "summary")

            def status(self, info: Any) -> None:
                if not info.status.is_terminal():
                    display.message(f"Job {job_id} is {info.status}.")

            def progress(self, progress: Any) -> None:
                display.show(progress)

            def stall(self, message: str) -> None:
                display.message(f"Warning: {message}")

        options = WatchOptions(
            timeout_s=timeout,
            stall_timeout_s=(DEFAULT_STALL_TIMEOUT_S if stall_timeout is None
                             else stall_timeout),
            fail_on_stall=fail_on_stall,
            report_interval_s=0.0 if display.interactive else _report_interval(),
            sample_interval_s=None, sample_rows=sample_rows(), flags=flags)
        with ctrl_c_noticed() as clock:
            info = watch_job(target, job_id, Followed(), options, clock=clock)
        end_line()
        took = f" in {info.duration_s:.1f} s" if info.duration_s is not None else ""
        _note(f"Job {job_id} {info.status}{took}.")
    except KeyboardInterrupt:
        from toolkit.run.progress.following import stopped_following

        end_line()
        interrupted(stopped_following(job_id, flags))
    except WaitTimeoutError as exc:
        end_line()
        raise WaitTimeoutError(
            exc.message,
            hint=f"Watch it again with `toolkit logs {job_id}{flags} --follow`, or stop it "
            f"with `toolkit stop {job_id}{flags}`.",
        ) from None
    finally:
        end_line()
    raise_for_outcome(info)


def _stops_cleanly_on_ctrl_c(command: Callable[..., Any]) -> Callable[..., Any]:
    """``command``, where a Ctrl-C that lands outside :func:`_follow` (while the job is
    staged, uploaded or submitted, or the cluster is reached) exits 130 with what
    keeps running, as one inside it does: click would print ``Aborted!``."""

    @functools.wraps(command)
    def run(*args: Any, **kwargs: Any) -> Any:
        try:
            return command(*args, **kwargs)
        except KeyboardInterrupt:
            from toolkit.run.progress.following import stopped_following, stopped_submitting

            flags = _target_flags(kwargs.get("backend") or "ray", kwargs.get("address"))
            job_id = kwargs.get("job_id")  # `logs` has one; `submit` has none until it submits
            if job_id and not kwargs.get("follow"):
                interrupted("Stopped.")  # a plain `logs`: nothing was followed
            interrupted(stopped_following(job_id, flags) if job_id
                         else stopped_submitting(flags))

    return run


def _follow_options(command: Callable[..., Any]) -> Callable[..., Any]:
    """The flags of every command that follows a job: ``--stall-timeout``,
    ``--fail-on-stall``, ``--raw`` (``-v``, ``--verbose``); and Ctrl-C anywhere in
    the command exits 130 saying the job keeps running (:func:`_stops_cleanly_on_ctrl_c`)."""
    command = _stops_cleanly_on_ctrl_c(command)
    command = click.option(
        "--raw", "--verbose", "-v", "raw", is_flag=True,
        help="With --follow: stream the job's whole log (Ray Data's operator progress, "
             "worker output) instead of only the toolkit's lines.",
    )(command)
    command = click.option(
        "--fail-on-stall", is_flag=True,
        help="With --follow: stop following with exit code 7 when the job stalls (the job "
             "keeps running).",
    )(command)
    return click.option(
        "--stall-timeout", type=click.FloatRange(min=0), default=30 * 60.0, show_default=True,
        metavar="SECONDS",
        help="With --follow: warn when the job has written no row for this long (Ray Data LLM "
             "can hang instead of failing, e.g. on CUDA out of memory).",
    )(command)


# --- render ------------------------------------------------------------------------


@click.command("render")
@spec_options
@spot_option
@click.option("-o", "job_yaml", type=click.Path(path_type=Path, dir_okay=False),
              metavar="FILE", help="Write the job.yaml here (default: print it).")
@click.option("--overwrite", is_flag=True,
              help="Let the job replace results already in data.output.")
@working_dir_option
def render_command(job: str, spec_file: Path | None, sets: tuple[str, ...], smoke: bool,
                   job_yaml: Path | None, overwrite: bool, working_dir: Path | None,
                   excludes: tuple[str, ...], **kwargs: Any) -> None:
    """Render JOB as an Anyscale job.yaml, validated with anyscale's own models.

    The job (spec and code) and a copy of the toolkit are staged in the working
    dir's .toolkit/ folder, which the job.yaml uploads; submit the file from
    that folder.

    \b
    Example:
      toolkit render text-industry --rows 1M --output s3://bucket/industry -o job.yaml
      anyscale job submit -f job.yaml --env HF_TOKEN=$HF_TOKEN
    """
    from toolkit.cluster.render import render_job_yaml

    job_def, spec = load_spec_from_flags(job, spec_file, sets, smoke, **pop_spec_flags(kwargs))
    result = render_job_yaml(job_def, spec, overwrite=overwrite, working_dir=working_dir,
                             excludes=excludes)
    for note in result.notes:
        _note(note)
    for warning in result.warnings:
        _note(f"Warning: {warning}")
    if job_yaml is None:
        click.echo(result.text, nl=False)
        return
    job_yaml.parent.mkdir(parents=True, exist_ok=True)
    job_yaml.write_text(result.text, encoding="utf-8")
    _note(f"Wrote {job_yaml} (spec: {result.spec_path.as_posix()}).")
    _note(f"Submit it from {working_dir or 'this folder'}: anyscale job submit -f {job_yaml}")


# --- plan --------------------------------------------------------------------------


# --- submit ------------------------------------------------------------------------


@click.command("submit")
@spec_options
@spot_option
@backend_options
@click.option("--follow", is_flag=True,
              help="Stream the job's logs until it ends; exit 0 if it SUCCEEDED, 4 FAILED, "
                   "5 STOPPED, 6 on --timeout.")
@_timeout_option(DEFAULT_FOLLOW_TIMEOUT_S, "With --follow: stop watching after this long "
                                           "(the job keeps running).")
@_follow_options
@click.option("--overwrite", is_flag=True,
              help="Let the job replace results already in data.output.")
@click.option("--check-tokens", "check_tokens", is_flag=True,
              help=CHECK_TOKENS_HELP + " On the cluster, before its engines start.")
@input_changed_option
@working_dir_option
def submit_command(job: str, spec_file: Path | None, sets: tuple[str, ...], smoke: bool,
                   backend: str, address: str | None, follow: bool, timeout: float,
                   stall_timeout: float, fail_on_stall: bool, raw: bool,
                   overwrite: bool, working_dir: Path | None, excludes: tuple[str, ...],
                   check_tokens: bool, input_changed: str | None, **kwargs: Any) -> None:
    """Submit JOB to a Ray cluster or Anyscale; print its id and how to watch it.

    Secrets (HF_TOKEN, HUGGING_FACE_HUB_TOKEN, WANDB_API_KEY, AWS_*) are passed
    from your environment to the job; they are never written to a file or printed.

    \b
    Examples:
      toolkit submit text-industry --rows 1000 --smoke --address local --follow
      toolkit submit text-industry --rows 1M --output s3://bucket/industry \\
          --address http://head:8265
      toolkit submit text-industry --rows 1M --output s3://bucket/industry --backend anyscale
    """
    from toolkit.cluster.backends.base import describe_secrets, secret_env
    from toolkit.cluster.render import check_no_url_credentials, prepare_submission
    from toolkit.run.output.summary_text import SMOKE_WARNING

    job_def, spec = load_spec_from_flags(job, spec_file, sets, smoke, **pop_spec_flags(kwargs))
    check_no_url_credentials(spec)  # before any cluster is contacted
    target = _open(backend, address)
    submission = prepare_submission(job_def, spec, target=backend, local=target.same_machine,
                                    overwrite=overwrite, working_dir=working_dir,
                                    excludes=excludes, check_tokens=check_tokens,
                                    input_changed=input_changed)
    for note in submission.notes:
        _note(note)
    for warning in submission.warnings:
        _note(f"Warning: {warning}")
    spec = submission.spec
    secrets = secret_env(names=[name for _, engine in spec.model_stages for name in engine.secret_env_names])
    _note(f"Submitting {job} to {target.where}: {spec.engine.kind} with {spec.engine.model}, "
          f"{spec.data.input} -> {spec.data.output}")
    if spec.uses_sample_model:
        _note(SMOKE_WARNING)
    if secrets:
        _note(f"Passing from your environment: {describe_secrets(secrets)}")
    estimate = quick_estimate(job_def, spec)
    if estimate:
        _note(estimate)
    handle = target.submit(submission.request, secrets)
    flags = _target_flags(backend, address)
    click.echo(handle.job_id)
    _note(f"Submitted job {handle.job_id}" + (f"; watch it at {handle.url}" if handle.url else ""))
    _note(f"  Spec:    {submission.request.spec_path.as_posix()}")
    _note(f"  Output:  {spec.data.output}")
    if handle.installs:
        _note(f"  Installs: {', '.join(handle.installs)} (the cluster lacks them; a virtualenv "
              "is made for the job first)")
    if not follow:
        _note("Next:")
        _note(f"  toolkit status {handle.job_id}{flags}")
        _note(f"  toolkit logs {handle.job_id}{flags} --follow")
        _note(f"  toolkit stop {handle.job_id}{flags}")
        return
    _note(f"Following its logs (Ctrl-C stops watching, not the job; "
          f"`toolkit stop {handle.job_id}{flags}` stops it).")
    _follow(target, handle.job_id, timeout, flags, stall_timeout, fail_on_stall, raw)


# --- status, logs, list, stop ------------------------------------------------------


def _when(value: Any) -> str:
    return value.strftime("%Y-%m-%d %H:%M:%S UTC") if value is not None else "-"


def format_info(info: Any) -> str:
    """The job's facts, one ``  label: value`` line each (what the backend knows)."""
    lines = [f"Job {info.job_id}: {info.status}"]
    rows = [
        ("name", info.name),
        ("entrypoint", info.entrypoint),
        ("message", info.message),
        ("started", _when(info.start_time) if info.start_time else None),
        ("ended", _when(info.end_time) if info.end_time else None),
        ("duration", f"{info.duration_s:.1f} s" if info.duration_s is not None else None),
        ("url", info.url),
        ("output", info.output),
    ]
    lines += [f"  {label + ':':11} {value}" for label, value in rows if value]
    return "\n".join(lines)


def format_results(results: Any) -> str:
    """An ended job's report location and summary, below :func:`format_info` (whose
    ``output:`` line says where they are), or why there is no summary to show."""
    from toolkit.run.output.summary_text import format_summary

    if results.summary is None:
        return f"  {'summary:':11} {results.summary_note or 'none'}"
    report = results.report or "none: the run wrote no _report.html (see its notes)"
    return f"  {'report:':11} {report}\n" + format_summary(results.summary, locations=False)


def format_options(command: Callable[..., Any]) -> Callable[..., Any]:
    """``--format text|json``, spelt as on ``toolkit plan``, and ``--output``, its old
    spelling here, still taken (with a notice): on ``run`` and ``plan``, ``--output`` is
    the output folder, so one word meant two things."""
    command = click.option("--output", "old_format", type=click.Choice(["text", "json"]),
                           hidden=True, help="The old spelling of --format.")(command)
    return click.option("--format", "output_format", type=click.Choice(["text", "json"]),
                        help="text, or json for scripts.  [default: text]")(command)


def chosen_format(output_format: str | None, old_format: str | None) -> str:
    if old_format is not None and output_format is None:
        _note(f"--output {old_format} is now --format {old_format} (as on toolkit plan; "
              "--output names an output folder elsewhere); --output still works for now.")
    return output_format or old_format or "text"


@click.command("status")
@click.argument("job_id")
@backend_options
@format_options
def status_command(job_id: str, backend: str, address: str | None, output_format: str | None,
                   old_format: str | None) -> None:
    """Show JOB_ID's status (PENDING, RUNNING, SUCCEEDED, FAILED, STOPPED) and progress;
    once it has ended, where its results are, its summary and its report.

    Progress (rows done of rows total, rows/s since the job started, ETA) is read
    from the job's output directory when this machine can reach it, else from the
    progress lines in its log. A running job that waits for resources Ray can't
    place shows what it waits for (its log's newest resources line). The summary
    and report are read from the output (recorded at submit); when this machine
    can't read it, one line says why. ``--format json`` has the same: ``output``,
    ``summary``, ``report`` (null when unknown) and ``summary_note``.
    """
    from toolkit.cluster.job_results import job_results
    from toolkit.run.progress.watched_job import job_progress, waiting_for

    output = chosen_format(output_format, old_format)
    target = _open(backend, address)
    info = target.status(job_id)
    results = job_results(info, same_machine=target.same_machine)
    progress = job_progress(info, summary=results.summary, logs=lambda: target.logs(job_id),
                            sample_rows=sample_rows())
    waiting = waiting_for(info, lambda: target.logs(job_id))
    if output == "json":
        payload = info.model_dump(mode="json")
        payload["progress"] = progress.as_json()
        payload["waiting_for"] = waiting
        payload.update(results.as_json())
        click.echo(json.dumps(payload, indent=2))
        return
    click.echo(format_info(info))
    if results.summary is None and progress.rows_done is not None:
        click.echo(f"  {'progress:':11} {progress.describe()}")
    if waiting is not None:
        click.echo(f"  {'resources:':11} {waiting}")
    if info.status.is_terminal():
        click.echo(format_results(results))


@click.command("logs")
@click.argument("job_id")
@backend_options
@click.option("--follow", "-f", is_flag=True,
              help="Keep streaming until the job ends; exit 0 SUCCEEDED, 4 FAILED, 5 STOPPED, "
                   "6 on --timeout, 130 on Ctrl-C (the job keeps running).")
@_timeout_option(DEFAULT_FOLLOW_TIMEOUT_S, "With --follow: stop watching after this long.")
@_follow_options
def logs_command(job_id: str, backend: str, address: str | None, follow: bool,
                 timeout: float, stall_timeout: float, fail_on_stall: bool, raw: bool) -> None:
    """Print JOB_ID's log; with --follow, only what the toolkit says, until the job ends.

    Without --follow: the job's whole log as the cluster recorded it (the driver's
    output: the toolkit's lines, marked [toolkit], among Ray's), for the record and
    for scripts.

    With --follow: what the job is doing before rows come (starting, reading the
    input, loading the model), then a progress line (rows done of total, rows/s over
    the last 2 minutes, ETA), warnings, errors and the run's summary; Ray Data's
    operator blocks and other Ray output are left out. --raw (-v) streams the whole
    log instead. Ctrl-C stops following, not the job.
    """
    target = _open(backend, address)
    if follow:
        _follow(target, job_id, timeout, _target_flags(backend, address), stall_timeout,
                fail_on_stall, raw)
    else:
        click.echo(target.logs(job_id), nl=False)


@click.command("list")
@backend_options
@format_options
def list_command(backend: str, address: str | None, output_format: str | None,
                 old_format: str | None) -> None:
    """List submitted jobs, newest first."""
    output = chosen_format(output_format, old_format)
    infos = _open(backend, address).list()
    if output == "json":
        click.echo(json.dumps([info.model_dump(mode="json") for info in infos], indent=2))
        return
    if not infos:
        _note("No jobs yet.")
        return
    width = max(len(info.job_id) for info in infos)
    click.echo(f"{'JOB ID':{width}}  {'STATUS':9}  {'STARTED':23}  NAME")
    for info in infos:
        click.echo(f"{info.job_id:{width}}  {info.status.value:9}  {_when(info.start_time):23}  "
                   f"{info.name or info.entrypoint or ''}")


@click.command("stop")
@click.argument("job_id", required=False)
@backend_options
@click.option("--wait/--no-wait", default=True, show_default=True,
              help="Wait until the job has stopped.")
@_timeout_option(60.0, "With --wait: give up waiting after this long (exit 6).")
@click.option("--local-head", is_flag=True,
              help="Instead of a job, stop the Ray head that --address local started.")
def stop_command(job_id: str | None, backend: str, address: str | None, wait: bool,
                 timeout: float, local_head: bool) -> None:
    """Stop JOB_ID (or, with --local-head, the local Ray head)."""
    if local_head:
        if job_id:
            raise click.UsageError("Give a JOB_ID or --local-head, not both.")
        from toolkit.cluster.backends.local_head import stop_local_head

        head = stop_local_head()
        _note(f"Stopped the local Ray head at {head.dashboard_url}." if head
              else "No local Ray head was running.")
        return
    if not job_id:
        raise click.UsageError("Missing JOB_ID (or pass --local-head).")
    from toolkit.run.progress.following import follow

    target = _open(backend, address)
    if not target.stop(job_id):
        _note(f"Job {job_id} had already ended ({target.status(job_id).status}).")
        return
    if not wait:
        _note(f"Stop requested for job {job_id}.")
        return
    _note(f"Stopping job {job_id}...")
    info = follow(target, job_id, timeout_s=timeout)
    _note(f"Job {job_id} is {info.status}.")


CLUSTER_COMMANDS: list[click.Command] = [
    render_command, plan_command, submit_command, status_command, logs_command, stop_command,
    list_command,
]
