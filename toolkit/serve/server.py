"""``toolkit serve`` as one call: open the store, pick up where a last server left off,
watch the batches in a thread and answer HTTP until stopped (Ctrl-C, SIGTERM)."""

from __future__ import annotations

import signal
import threading
from collections.abc import Callable
from pathlib import Path

from pydantic import BaseModel, Field

from toolkit.serve.batch_runs import RunFlags

#: Where --store defaults to, inside the toolkit's cache folder.
STORE_FOLDER = "serve"


class ServeConfig(BaseModel):
    store: Path = Field(description="Files, batches and their run directories (SQLite index).")
    host: str = Field("127.0.0.1", description="Interface to bind: 127.0.0.1 keeps the API "
                                               "to this machine; 0.0.0.0 opens it (set "
                                               "TOOLKIT_API_KEY then).")
    port: int = 8000
    max_running: int = Field(1, ge=1, description="Batches run at once; more share the "
                                                  "cluster, fewer finish each one sooner.")
    flags: RunFlags = RunFlags()
    api_key: str | None = Field(None, repr=False,
                                description="Bearer key every request must carry.")


def default_store() -> Path:
    """``$TOOLKIT_CACHE_DIR/serve``, else ``~/.cache/batch-llm-toolkit/serve``."""
    from toolkit.cluster.backends.local_head import cache_dir

    return cache_dir() / STORE_FOLDER


def served_names(flags: RunFlags, endpoint: str | None = None) -> list[str]:
    """The names a request's ``body.model`` may give (the batches' ``model`` first), from
    the openai-batch job and the flags: ``--served-model-name``s, else the model as
    ``--model`` (or the spec) names it, for a batch of ``endpoint`` (None: the spec's
    own). Checks the flags as ``toolkit run`` would, so a typo fails now, not at the
    first batch.

    Raises:
        ToolkitError: a flag or spec file that ``toolkit run`` would refuse.
    """
    from toolkit.run.input.openai_batch import served_model_names
    from toolkit.spec.jobs.catalog import load_job
    from toolkit.spec.loading import load_job_spec

    overrides = {path: value for path, value in (
        ("engine.model", flags.model), ("engine.kind", flags.engine),
        ("engine.batch_size", flags.batch_size), ("engine.concurrency", flags.concurrency),
        ("engine.accelerator_type", flags.accelerator)) if value is not None}
    if flags.served_model_names:
        overrides["options.served_model_names"] = list(flags.served_model_names)
    if endpoint is not None:
        overrides["options.endpoint"] = endpoint
    spec = load_job_spec(load_job("openai-batch"), spec_file=Path(flags.spec_file)
                         if flags.spec_file else None, overrides=overrides,
                         sets=tuple(flags.sets), smoke=flags.smoke)
    return served_model_names(spec.options, spec.engine.model)


def serve(config: ServeConfig, on_ready: Callable[[str], None] | None = None) -> None:
    """Serve until interrupted; running batches are stopped (keeping their rows) on the way
    out and resume when a server on the same store starts again.

    Raises:
        KeyboardInterrupt: stopped by Ctrl-C or SIGTERM (once the runs are stopped).
        ToolkitError: flags ``toolkit run`` would refuse, or fastapi/uvicorn missing.
    """
    import importlib.util

    # python-multipart (module python_multipart, formerly multipart) reads file uploads.
    missing = [name for name, modules in (("fastapi", ["fastapi"]), ("uvicorn", ["uvicorn"]),
                                          ("python-multipart", ["python_multipart", "multipart"]))
               if not any(importlib.util.find_spec(module) for module in modules)]
    if missing:
        from toolkit.errors import SpecError

        raise SpecError(f"toolkit serve needs {', '.join(missing)}, not installed here.",
                        hint="pip install 'batch-llm-toolkit[serve]'")
    import uvicorn

    from toolkit.errors import ToolkitError
    from toolkit.run.input.openai_batch import ENDPOINT_TASKS
    from toolkit.serve.app import create_app
    from toolkit.serve.store import Store
    from toolkit.serve.supervisor import Supervisor

    served = served_names(config.flags)
    model = served[0]
    by_endpoint: dict[str, list[str] | str] = {}
    for endpoint in ENDPOINT_TASKS:
        try:
            by_endpoint[endpoint] = served_names(config.flags, endpoint)
        except ToolkitError as exc:  # e.g. an engine that can't embed: its batches are refused
            by_endpoint[endpoint] = str(exc)
    store = Store(config.store)
    supervisor = Supervisor(store, config.flags, by_endpoint, max_running=config.max_running)
    supervisor.recover()
    stop = threading.Event()
    watcher = threading.Thread(target=supervisor.run_until, args=(stop,), daemon=True,
                               name="toolkit-serve-batches")
    watcher.start()
    server = uvicorn.Server(uvicorn.Config(create_app(store, supervisor, config.api_key),
                                           host=config.host, port=config.port,
                                           log_level="warning"))
    if on_ready is not None:
        on_ready(f"Serving the OpenAI Batch API at http://{config.host}:{config.port}/v1 "
                 f"(model {model}; store {store.root}).")
    # uvicorn stops on SIGINT/SIGTERM, then raises the signal again: SIGTERM's default
    # would end this process before the runs are stopped, so it becomes a Ctrl-C here.
    in_main = threading.current_thread() is threading.main_thread()
    previous = signal.signal(signal.SIGTERM, _as_interrupt) if in_main else None
    try:
        server.run()
    finally:
        stop.set()
        watcher.join(timeout=60)
        store.close()
        if in_main:
            signal.signal(signal.SIGTERM, previous)


def _as_interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt
