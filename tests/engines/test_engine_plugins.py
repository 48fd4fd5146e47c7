"""A third-party engine kind is a package of its own: installed from its wheel, it is
an ``--engine`` choice and runs a job; the built-in kinds are always there."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pyarrow.parquet as pq
import pytest

PLUGIN = Path(__file__).parent / "echo_plugin"
TOOLKIT = str(Path(sys.executable).parent / "toolkit")
BUILT_IN = ["vllm", "transformers", "http", "sklearn", "python", "batch-api"]


@pytest.fixture(scope="module")
def plugin_site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder the plugin's wheel is pip-installed into, for PYTHONPATH."""
    work = tmp_path_factory.mktemp("plugin")
    source = shutil.copytree(PLUGIN, work / "source")  # the build writes beside its sources
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation",
                    "-q", "-w", str(work / "dist"), str(source)], check=True)
    wheel, = (work / "dist").glob("toolkit_echo_engine-*.whl")
    site = work / "site"
    subprocess.run([sys.executable, "-m", "pip", "install", "--no-deps", "-q", "--target",
                    str(site), str(wheel)], check=True)
    return site


def toolkit(*args: str, cwd: Path, site: Path | None = None) -> subprocess.CompletedProcess:
    env = {**os.environ, "RAY_ADDRESS": ""}
    if site is not None:
        env["PYTHONPATH"] = str(site)
    return subprocess.run([TOOLKIT, *args], cwd=cwd, capture_output=True, text=True, env=env,
                          timeout=600)


def test_an_installed_engine_plugin_runs_a_job(plugin_site: Path, tmp_path: Path) -> None:
    shown = toolkit("run", "--help", cwd=tmp_path, site=plugin_site)
    assert "[vllm|transformers|http|sklearn|python|batch-api|echo]" in shown.stdout
    assert "echo (answers every row the same)" in " ".join(shown.stdout.split())

    done = toolkit("run", "text-industry", "--smoke", "--rows", "30", "--engine", "echo",
                   "--set", "engine.answer=Retail", "--output", "out", cwd=tmp_path,
                   site=plugin_site)
    assert done.returncode == 0, done.stderr[-3000:]
    rows = pq.read_table(tmp_path / "out").to_pylist()
    assert len(rows) == 30
    answered = [row for row in rows if row["error"] is None]
    assert len(answered) >= 25 and {row["inferred_industry"] for row in answered} == {"Retail"}


def test_without_the_plugin_its_kind_is_refused_by_name(tmp_path: Path) -> None:
    refused = toolkit("show", "text-industry", "--set", "engine.kind=echo", cwd=tmp_path)
    assert refused.returncode == 2
    assert "'echo' is not an engine kind; use one of vllm, transformers, http, sklearn, " \
           "python" in refused.stderr


def test_a_plugin_that_fails_to_load_is_named_and_the_built_ins_stay(tmp_path: Path) -> None:
    broken = tmp_path / "site" / "broken_engine-0.1.dist-info"
    broken.mkdir(parents=True)
    (broken / "METADATA").write_text("Metadata-Version: 2.1\nName: broken-engine\nVersion: 0.1\n")
    (broken / "entry_points.txt").write_text("[toolkit.engines]\nbroken = no_such_module:KIND\n")
    refused = toolkit("show", "text-industry", "--set", "engine.kind=broken", cwd=tmp_path,
                      site=tmp_path / "site")
    assert refused.returncode == 2
    assert "use one of vllm, transformers, http, sklearn, python, batch-api (the installed engine " \
           "plugin broken = no_such_module:KIND failed to load: ModuleNotFoundError: No " \
           "module named 'no_such_module')" in " ".join(refused.stderr.split())


def test_a_kind_registered_before_the_registry_is_read_keeps_the_built_ins() -> None:
    """It used to load the built-in kinds only into an empty registry: ['mine'] alone."""
    script = """
from toolkit.engines.registry import EngineKind, engine_kinds, register_engine
from toolkit.spec.engine_settings import EngineSettings
register_engine(EngineKind(name="mine", settings=EngineSettings, tasks=("generate",),
                           summary="mine", apply=lambda ds, settings, stage: ds))
print(list(engine_kinds()))
"""
    shown = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                           check=True)
    assert shown.stdout.split("\n")[0] == str([*BUILT_IN, "mine"])
