"""batch-llm-toolkit: offline LLM and vision-LLM batch inference on Ray in one command."""

from toolkit.spec.engine_catalog import EngineCatalog, install_engine_catalog

__version__ = "0.1.0"


def _engines() -> EngineCatalog:
    # The package wires its layers here, above all of them: the spec layer checks
    # engine.kind against the engines' registry without importing it, and a spec
    # validated on its own (a test, a script, a Ray worker unpickling one) still
    # knows every kind. Imported on first use, so `import toolkit` stays light.
    from toolkit.engines.registry import ENGINE_CATALOG

    return ENGINE_CATALOG


install_engine_catalog(loader=_engines)
