"""Bad input, caught early: one clear message naming the field, row or file, a hint,
a non-zero exit code and no traceback. Each case is what a user would type."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from click.testing import CliRunner

from toolkit.cli.main import main


def make_inputs(tmp: Path) -> dict[str, str]:
    (tmp / "empty.csv").write_text("")
    (tmp / "latin1.csv").write_bytes("Index,Company\n1,Société\n".encode("latin-1"))
    (tmp / "typo.csv").write_text("Index,Compnay\n1,Acme\n")
    (tmp / "broken.yaml").write_text("engine:\n  batch_size: [64\n")
    (tmp / "unknown.yaml").write_text("engine:\n  batch_sise: 64\n")
    (tmp / "a-file").write_text("not a directory")
    (tmp / "not-a-model").mkdir()
    names = ("empty.csv", "latin1.csv", "typo.csv", "broken.yaml", "unknown.yaml",
             "a-file", "not-a-model")
    return {name.split(".")[0].replace("-", "_"): str(tmp / name) for name in names}


# (case, arguments with {file} placeholders, exit code, text the user must see)
CASES = [
    ("missing input file", ["--input", "{tmp}/nope.csv"], 2,
     "data.input: {tmp}/nope.csv does not exist."),
    ("unreachable URL", ["--input", "http://127.0.0.1:9/customers.csv"], 2,
     "data.input: can't read http://127.0.0.1:9/customers.csv"),
    ("empty file", ["--input", "{empty}"], 2, "is empty (0 bytes)"),
    ("misspelled column", ["--input", "{typo}"], 2,
     "has no column 'Company'. Available columns: Index, Compnay."),
    ("non-UTF-8 bytes", ["--input", "{latin1}"], 2, "is not UTF-8 text (byte 20 is 0xe9)"),
    ("malformed YAML", ["-f", "{broken}"], 2, "broken.yaml is not valid YAML at line"),
    ("unknown spec key", ["-f", "{unknown}"], 2, "engine.batch_sise: unknown key"),
    ("negative rows", ["--rows", "-5"], 2, "data.rows: row count must be positive"),
    ("rows typo", ["--rows", "1Q"], 2, "data.rows: '1Q' is not a row count"),
    ("batch size 0", ["--batch-size", "0"], 2, "engine.batch_size: Input should be greater than 0"),
    ("model path missing", ["--model", "{tmp}/no-model"], 2,
     "engine.model: model directory {tmp}/no-model does not exist."),
    ("model dir without config", ["--model", "{not_a_model}"], 2, "has no config.json"),
    ("output is a file", ["--output", "{a_file}"], 2, "exists and is a file, not a directory"),
    ("output not writable", ["--output", "{a_file}/sub"], 2, "data.output: can't write to"),
]


@pytest.mark.parametrize("case, args, code, expected", CASES, ids=[c[0] for c in CASES])
def test_bad_input_gets_one_clear_message(case, args, code, expected, local_ray, tmp_path):
    files = {**make_inputs(tmp_path), "tmp": str(tmp_path)}
    args = [a.format(**files) for a in args]
    result = CliRunner().invoke(main, ["run", "text-industry", "--smoke", "--rows", "10",
                                       "--output", str(tmp_path / "out"), *args])
    assert result.exit_code == code, result.output
    assert expected.format(**files) in result.output
    assert "Error: " in result.output and "Traceback" not in result.output


def test_unreachable_cluster_exits_3_within_seconds():
    result = CliRunner().invoke(main, ["status", "raysubmit_x", "--address", "http://127.0.0.1:1"])
    assert result.exit_code == 3
    assert "Cannot reach the Ray cluster at http://127.0.0.1:1" in result.output


def test_anyscale_without_login_says_how_to_log_in(tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.delenv("ANYSCALE_CLI_TOKEN", raising=False)
    result = CliRunner().invoke(main, ["submit", "text-industry", "--rows", "1M",
                                       "--backend", "anyscale"])
    assert result.exit_code == 3
    assert "Not logged in to Anyscale" in result.output
    assert "anyscale login" in result.output


def test_an_image_that_is_not_an_image_is_an_error_row(local_ray, tmp_path):
    import pyarrow.parquet as pq

    from toolkit.samples.image_files import write_sample_images

    write_sample_images(tmp_path / "images", count=3, seed=0)
    (tmp_path / "images" / "notes.jpg").write_text("meeting notes, not a picture")
    result = CliRunner().invoke(main, ["run", "vlm-caption", "--smoke", "--input",
                                       str(tmp_path / "images"), "--output", str(tmp_path / "out")])
    assert result.exit_code == 0, result.output
    rows = {Path(r["path"]).name: r for r in pq.read_table(tmp_path / "out").to_pylist()}
    assert len(rows) == 4
    assert rows["notes.jpg"]["error"].startswith(
        "preprocess: column 'bytes': not a recognised image format")
    # The tiny random model's captions may run to max_tokens: ok or failed a check.
    written = re.search(r"rows written:  4 \((\d+) ok, (?:(\d+) failed a check, )?1 with an "
                        r"error\)", result.output)
    assert written is not None and int(written[1]) + int(written[2] or 0) == 3, result.output


def test_debug_shows_the_traceback(local_ray, tmp_path, monkeypatch):
    monkeypatch.setenv("TOOLKIT_DEBUG", "1")
    result = CliRunner().invoke(main, ["run", "text-industry", "--smoke",
                                       "--input", str(tmp_path / "nope.csv")])
    assert result.exit_code != 0
    assert result.exception is not None  # raised, so the traceback is shown


def test_a_gpu_engine_on_a_machine_without_gpus_is_refused_up_front(local_ray):
    from toolkit.errors import ResourcesUnavailableError, SpecError
    from toolkit.run.driver import check_runs_locally
    from toolkit.run.ray.cluster_fit import check_cluster_fits, cluster_state
    from toolkit.spec.jobs.catalog import load_job
    from toolkit.spec.loading import load_job_spec

    job = load_job("text-industry")
    with pytest.raises(SpecError, match="vllm, but its package vllm is not installed here"):
        check_runs_locally(load_job_spec(job))
    on_l4 = load_job_spec(job, overrides={"engine.kind": "transformers"})
    check_runs_locally(on_l4)  # its packages are here; its GPU is the cluster's question
    with pytest.raises(ResourcesUnavailableError,
                       match=r"engine needs 1 GPU \(L4\) and 1 CPU per worker, but no node "
                             "of this cluster has a GPU"):
        check_cluster_fits(on_l4, cluster_state(fixed=True))
    on_cpu = load_job_spec(job, overrides={"engine.kind": "transformers",
                                           "engine.accelerator_type": "none",
                                           "engine.concurrency": 1})
    assert on_cpu.engine.accelerator_type is None
    check_runs_locally(on_cpu)
    check_cluster_fits(on_cpu, cluster_state(fixed=True))
