"""``toolkit serve``: the OpenAI Files and Batches API, each batch a run on Ray."""

from __future__ import annotations

import os
from pathlib import Path

import click

from toolkit.engines.registry import engine_kinds


@click.command("serve")
@click.option("--store", type=click.Path(path_type=Path),
              help="Folder for files, batches and their runs (default: "
                   "$TOOLKIT_CACHE_DIR/serve or ~/.cache/batch-llm-toolkit/serve). A server "
                   "started again on it lists every batch and finishes those that were running.")
@click.option("--host", default="127.0.0.1", show_default=True,
              help="Interface to bind; set TOOLKIT_API_KEY before opening it to others.")
@click.option("--port", type=int, default=8000, show_default=True)
@click.option("--max-running", type=click.IntRange(min=1), default=1, show_default=True,
              help="Batches run at once; the others wait in order.")
@click.option("--smoke", is_flag=True,
              help="Offline try-out: a tiny random-weight model (answers are noise).")
@click.option("--model", help="Model every batch runs on.")
@click.option("--served-model-name", "served_model_names", multiple=True, metavar="NAME",
              help="A name the requests' body.model may give for the model (repeatable, as "
                   "vLLM's); lines naming another model are error lines (404). Default: the "
                   "--model as given.")
@click.option("--engine", type=click.Choice(list(engine_kinds())), help="Inference engine.")
@click.option("--address", help="Ray cluster for the runs (default: RAY_ADDRESS, else a "
                                "local Ray per run).")
@click.option("--batch-size", help="Rows per engine batch.")
@click.option("--concurrency", metavar="N|MIN-MAX", help="Engine workers (model replicas).")
@click.option("--accelerator", help="GPU type per engine worker; none runs on CPUs.")
@click.option("-f", "--file", "spec_file", type=click.Path(path_type=Path),
              help="YAML spec file for the openai-batch job (engine, sampling, compute).")
@click.option("--set", "sets", multiple=True, metavar="KEY=VALUE",
              help="Set any spec key of the openai-batch job (repeatable).")
def serve_command(store: Path | None, host: str, port: int, max_running: int,
                  spec_file: Path | None, sets: tuple[str, ...],
                  served_model_names: tuple[str, ...], **flags: str | bool | None) -> None:
    """Your own OpenAI Batch API: Files and Batches under /v1, each batch a
    `toolkit run openai-batch` on Ray with this command's engine flags.

    With TOOLKIT_API_KEY set, every request needs it as its bearer key.

    \b
    Example (offline, tiny model):
      TOOLKIT_API_KEY=secret toolkit serve --smoke --port 8000
    then, in Python:
      from openai import OpenAI
      client = OpenAI(base_url="http://127.0.0.1:8000/v1", api_key="secret")
      file = client.files.create(file=open("requests.jsonl", "rb"), purpose="batch")
      batch = client.batches.create(input_file_id=file.id, completion_window="24h",
                                    endpoint="/v1/chat/completions")
      batch = client.batches.retrieve(batch.id)   # until batch.status == "completed"
      print(client.files.content(batch.output_file_id).text)

    Batches of /v1/chat/completions (function calls included) and of
    /v1/embeddings (run on the embed task) are answered. Requests that can't run
    as given (a model not served, a field the toolkit can't honour, another
    endpoint) go to the batch's error file, naming their line; a line that is no
    request with a custom_id fails the batch. completion_window is not enforced.
    """
    from toolkit.serve.batch_runs import API_KEY_ENV, RunFlags
    from toolkit.serve.server import ServeConfig, default_store, serve

    run_flags = RunFlags(spec_file=str(spec_file.resolve()) if spec_file else None,
                         sets=list(sets), served_model_names=list(served_model_names), **flags)
    config = ServeConfig(store=store or default_store(), host=host, port=port,
                         max_running=max_running, flags=run_flags,
                         api_key=os.environ.get(API_KEY_ENV) or None)
    try:
        serve(config, on_ready=click.echo)
    except KeyboardInterrupt:
        click.echo("Stopped. Batches that were running go on when toolkit serve starts "
                   f"again with --store {config.store}.", err=True)
        raise SystemExit(130) from None
