"""Loading a spec: template -> -f file -> --smoke -> flags -> --set, validated once."""

from __future__ import annotations

from pathlib import Path

import pytest

from toolkit.errors import SpecError
from toolkit.spec.jobs.catalog import builtin_jobs, load_job
from toolkit.spec.loading import load_job_spec, spec_to_yaml
from toolkit.spec.models import parse_row_count

JOB = load_job("text-industry")


def test_the_builtin_job_file_holds_the_seed_defaults():
    spec = load_job_spec(JOB)
    assert spec.engine.kind == "vllm"
    assert spec.engine.model == "unsloth/Llama-3.1-8B-Instruct"
    assert spec.engine.engine_kwargs == {"max_model_len": 256}
    assert (spec.engine.batch_size, spec.engine.concurrency) == (256, 4)
    assert spec.engine.accelerator_type == "L4"
    assert spec.data.partitions == 128
    assert spec.data.input.endswith("customers-2000000.csv")
    assert (spec.sampling.temperature, spec.sampling.max_tokens) == (0.0, 16)
    assert spec.output.choice == [
        "Law Firm", "Healthcare", "Technology", "Retail", "Consulting",
        "Manufacturing", "Finance", "Real Estate", "Other",
    ]
    assert spec.compute.head_instance_type == "m5.2xlarge"
    assert (spec.compute.min_workers, spec.compute.max_workers) == (0, 10)


@pytest.mark.parametrize(
    "text, rows",
    [("1000", 1000), ("10k", 10_000), ("1M", 1_000_000), ("2_000_000", 2_000_000),
     ("1.5k", 1500), ("all", None), (250, 250)],
)
def test_rows_are_written_the_way_people_write_them(text, rows):
    assert parse_row_count(text) == rows
    assert load_job_spec(JOB, overrides={"data.rows": text}).data.rows == rows


@pytest.mark.parametrize("bad", ["1Q", "-5", "0", "ten", "1.5"])
def test_bad_row_counts_name_the_field(bad):
    with pytest.raises(SpecError) as excinfo:
        load_job_spec(JOB, overrides={"data.rows": bad})
    assert "data.rows:" in excinfo.value.format_message()
    assert excinfo.value.exit_code == 2


def test_a_spec_file_changes_only_the_keys_it_names(tmp_path: Path):
    spec_file = tmp_path / "mine.yaml"
    spec_file.write_text("engine:\n  batch_size: 32\nsampling:\n  max_tokens: 8\n")
    spec = load_job_spec(JOB, spec_file=spec_file)
    assert spec.engine.batch_size == 32
    assert spec.sampling.max_tokens == 8
    assert spec.engine.model == "unsloth/Llama-3.1-8B-Instruct"


def test_flags_beat_the_file_and_set_beats_flags(tmp_path: Path):
    spec_file = tmp_path / "mine.yaml"
    spec_file.write_text("data:\n  rows: 10\n")
    spec = load_job_spec(
        JOB,
        spec_file=spec_file,
        overrides={"data.rows": "1M", "engine.model": "Qwen/Qwen2.5-0.5B-Instruct"},
        sets=["data.rows=5k", "engine.engine_kwargs.gpu_memory_utilization=0.8"],
    )
    assert spec.data.rows == 5000
    assert spec.engine.model == "Qwen/Qwen2.5-0.5B-Instruct"
    assert spec.engine.engine_kwargs == {"max_model_len": 256, "gpu_memory_utilization": 0.8}


def test_unknown_keys_are_errors_naming_the_path(tmp_path: Path):
    spec_file = tmp_path / "typo.yaml"
    spec_file.write_text("engine:\n  batch_sise: 32\n")
    with pytest.raises(SpecError) as excinfo:
        load_job_spec(JOB, spec_file=spec_file)
    assert "engine.batch_sise: unknown key" in excinfo.value.format_message()


def test_every_problem_is_listed_at_once():
    with pytest.raises(SpecError) as excinfo:
        load_job_spec(JOB, sets=["engine.batch_size=0", "sampling.temperature=-1", "data.oops=1"])
    message = excinfo.value.format_message()
    assert "engine.batch_size: Input should be greater than 0 (got 0)" in message
    assert "sampling.temperature:" in message
    assert "data.oops: unknown key" in message


def test_malformed_yaml_says_where(tmp_path: Path):
    spec_file = tmp_path / "broken.yaml"
    spec_file.write_text("engine:\n  batch_size: [1, 2\n")
    with pytest.raises(SpecError) as excinfo:
        load_job_spec(JOB, spec_file=spec_file)
    assert f"Spec file {spec_file} is not valid YAML at line" in str(excinfo.value)


def test_missing_spec_file_and_bad_set_expressions(tmp_path: Path):
    with pytest.raises(SpecError, match="does not exist"):
        load_job_spec(JOB, spec_file=tmp_path / "nope.yaml")
    with pytest.raises(SpecError, match="not of the form section.key=value"):
        load_job_spec(JOB, sets=["batch_size"])


def test_a_spec_file_for_another_job_is_refused(tmp_path: Path):
    spec_file = tmp_path / "other.yaml"
    spec_file.write_text("job: date-reformat\n")
    with pytest.raises(SpecError, match="is for job 'date-reformat', not 'text-industry'"):
        load_job_spec(JOB, spec_file=spec_file)


def test_smoke_swaps_in_sample_data_and_tiny_model_on_cpu():
    spec = load_job_spec(JOB, smoke=True, overrides={"data.rows": "1000"})
    assert spec.engine.kind == "transformers"
    assert spec.engine.model == "sample:tiny-chat"
    assert spec.engine.accelerator_type is None
    assert spec.engine.concurrency == 1
    assert spec.data.input == "sample:customers"
    assert spec.uses_sample_model


def test_smoke_keeps_the_users_own_model_and_input():
    spec = load_job_spec(
        JOB, smoke=True, overrides={"engine.model": "/models/mine", "data.input": "c.csv"}
    )
    assert (spec.engine.model, spec.data.input) == ("/models/mine", "c.csv")


def test_show_output_loads_back_as_the_same_spec(tmp_path: Path):
    spec = load_job_spec(JOB, overrides={"data.rows": "10k"})
    spec_file = tmp_path / "shown.yaml"
    spec_file.write_text(spec_to_yaml(spec))
    assert load_job_spec(JOB, spec_file=spec_file) == spec


def test_a_prompt_template_error_names_the_field_and_line():
    with pytest.raises(SpecError, match=r"prompt.user: .*template syntax error at line 1"):
        load_job_spec(JOB, sets=["prompt.user=Industry of {{ Company }?"])


def test_unknown_job_lists_the_real_ones():
    with pytest.raises(SpecError) as excinfo:
        load_job("text-industri")
    assert "Available jobs: " in str(excinfo.value)
    assert "text-industry" in str(excinfo.value)
    assert {"text-industry", "date-reformat", "vlm-caption"} <= {j.name for j in builtin_jobs()}
