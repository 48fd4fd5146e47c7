"""Engine kinds plug in through one registry: specs, the CLI, render and the pipeline
all ask it, and a new kind is one registration away from running a job."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner
from pydantic import Field

from toolkit.cli.main import main
from toolkit.cluster.render import job_requirements
from toolkit.engines import registry
from toolkit.engines.registry import EngineKind, engine_kind, engine_kinds
from toolkit.errors import SpecError
from toolkit.run.driver import run_pipeline
from toolkit.run.output.fingerprint import results_fingerprint
from toolkit.samples.provider import SAMPLES
from toolkit.spec.engine_settings import EngineSettings
from toolkit.spec.jobs.catalog import load_job
from toolkit.spec.loading import load_job_spec

#: Each built-in job's resume fingerprint as computed before engine settings became one
#: model per kind: a run started then still resumes now.
FINGERPRINTS = {
    ("date-reformat", "default"): "c072a8f8ad0ea043",
    ("date-reformat", "smoke"): "ff19a7117bc43034",
    ("date-reformat", "http"): "9c6d57c8191607f6",
    ("date-reformat", "vllm-cpu"): "4bf1bc0c49376315",
    ("embed", "default"): "fc98a1c9a4fc87dc",
    ("embed", "smoke"): "ab60cb5be283b081",
    ("embed", "vllm-cpu"): "0593bcc93dbdc0bc",
    ("image-classify", "default"): "a0bae8a6e629ec08",
    ("image-classify", "smoke"): "9ce01b5083f62c2f",
    # openai-batch: a new spec when it turned its truncated check off, again when its
    # options gained served_model_names (which lines are answered, and as which model):
    # a run staged before checked no line's model, so it doesn't resume; and again with
    # the endpoint and tool calls (a new result column, tool_call: old files lack it).
    ("openai-batch", "default"): "77d813771d403bca",
    ("openai-batch", "smoke"): "c0ef3364af76eb1b",
    ("openai-batch", "http"): "8d23589ae999e5d0",
    ("openai-batch", "vllm-cpu"): "dcafa70ec91aaa90",
    ("review-triage", "default"): "0e620d09f5b80563",
    ("review-triage", "smoke"): "2479f9f54608eea5",
    ("review-triage", "http"): "2d59337e0cff3c03",
    ("review-triage", "vllm-cpu"): "f020ccaf04144188",
    ("tabular-predict", "default"): "a4bc8988a5450575",
    ("tabular-predict", "smoke"): "e328a328629cf86c",
    ("text-classify", "default"): "a9e93b65d27ba4ae",
    ("text-classify", "smoke"): "7f0ea936e6508fa5",
    ("text-classify", "vllm-cpu"): "3594209b938122af",
    ("text-industry", "default"): "140ee3472ee0290a",
    ("text-industry", "smoke"): "01dc47d3e8d4aefd",
    ("text-industry", "http"): "499334fe0d0d4576",
    ("text-industry", "vllm-cpu"): "34ec88a2fbd8d9dd",
    ("vlm-caption", "default"): "a1eedb98ddb7a3e6",
    ("vlm-caption", "smoke"): "0a1abfa752672b0e",
    ("vlm-caption", "http"): "9631067ca5f465d1",
    ("vlm-caption", "vllm-cpu"): "4a612ed41fec4806",
}
VARIANTS: dict[str, dict[str, Any]] = {
    "default": {},
    "smoke": {"smoke": True},
    "http": {"overrides": {"engine.kind": "http", "engine.accelerator_type": "none"},
             "sets": ["engine.base_url=http://127.0.0.1:9/v1", "engine.api_key_env=MY_KEY"]},
    "vllm-cpu": {"overrides": {"engine.kind": "vllm", "engine.accelerator_type": "none"},
                 "sets": ["engine.kv_cache_gib=2"]},
}


@pytest.mark.parametrize(("job", "variant"), sorted(FINGERPRINTS))
def test_built_in_specs_keep_their_resume_fingerprints(job, variant):
    spec = load_job_spec(load_job(job), **VARIANTS[variant])
    assert results_fingerprint(spec) == FINGERPRINTS[job, variant]


def test_each_section_is_its_kinds_model_with_only_its_kinds_settings():
    spec = load_job_spec(load_job("text-industry"), **VARIANTS["http"])
    assert type(spec.engine) is engine_kind("http").settings
    assert spec.engine.secret_env_names == ["MY_KEY"]
    assert spec.model_dump()["engine"]["base_url"] == "http://127.0.0.1:9/v1"
    with pytest.raises(SpecError, match="engine.kv_cache_gib only applies to kind: vllm, "
                                        "not sklearn; remove it or set kind: vllm"):
        load_job_spec(load_job("tabular-predict"), sets=["engine.kv_cache_gib=2"])


def test_smoke_drops_the_settings_of_the_engine_it_replaces(tmp_path):
    tuned = tmp_path / "tuned.yaml"
    tuned.write_text("engine: {kv_cache_gib: 2, max_concurrent_batches: 4}\n")
    spec = load_job_spec(load_job("text-industry"), spec_file=tuned, smoke=True)
    assert spec.engine.kind == "transformers"
    # A flag comes after --smoke: the user's own word, refused by name.
    with pytest.raises(SpecError, match="max_concurrent_batches only applies to kind: vllm"):
        load_job_spec(load_job("text-industry"), smoke=True,
                      sets=["engine.max_concurrent_batches=4"])


def test_the_cli_offers_every_registered_kind():
    result = CliRunner().invoke(main, ["run", "--help"])
    for name, kind in engine_kinds().items():
        assert name in result.output
    result = CliRunner().invoke(main, ["show", "text-industry", "--engine", "nope"])
    assert result.exit_code == 2
    assert "'nope' is not one of 'vllm', 'transformers', 'http', 'sklearn', 'python'" in result.output


def test_render_installs_each_stages_engine_from_its_kind():
    spec = load_job_spec(load_job("review-triage"))  # a classifier, then a chat model
    wanted = job_requirements(spec, "anyscale/ray:2.60.0-py311")
    assert any(r.startswith("ray[llm]") for r in wanted)  # vllm's extra (engine)
    assert any(r.startswith("transformers") for r in wanted)  # local's (stages.sentiment)


# -- a new engine kind: one registration ----------------------------------------------


class EchoSettings(EngineSettings):
    answer: str = Field("Other", description="What every row is answered.")


def apply_echo(ds, settings, stage):
    """Answers every chat row that reached the engine with ``settings.answer``."""
    answer = settings.answer

    def echo(batch):
        failed = [isinstance(error, str) and bool(error) for error in batch["error"]]
        batch["generated_text"] = [None if bad else answer for bad in failed]
        return batch

    return ds.map_batches(echo, batch_format="pandas", batch_size=settings.batch_size)


@pytest.fixture
def echo_kind() -> Iterator[EngineKind]:
    kind = registry.register_engine(EngineKind(
        name="echo", settings=EchoSettings, tasks=("generate",), summary="echo (a test)",
        apply=apply_echo, loads_checkpoint=False))
    yield kind
    registry.unregister_engine("echo")


def test_a_new_engine_kind_runs_a_job_once_registered(echo_kind, local_ray, tmp_path):
    job = load_job("text-industry")
    spec = load_job_spec(job, smoke=True, overrides={
        "data.rows": 20, "data.output": str(tmp_path / "out"), "engine.kind": "echo",
    }, sets=["engine.answer=Retail"])
    assert type(spec.engine) is EchoSettings
    summary = run_pipeline(job, spec, samples=SAMPLES)
    assert summary.rows_written == 20
    rows = pq.read_table(tmp_path / "out").to_pylist()
    assert {row["inferred_industry"] for row in rows if row["error"] is None} == {"Retail"}
    assert sum(row["error"] is None for row in rows) >= 18  # blank companies fail first
