"""Finding jobs: built-ins by name, the user's job files by path or name, modules by import name."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from toolkit.errors import SpecError
from toolkit.spec.jobs.catalog import builtin_jobs, find_job, list_jobs, load_job, project_jobs
from toolkit.spec.jobs.scaffold import write_new_job
from toolkit.spec.loading import load_job_spec

PROMPT_JOB = """\
job: sentiment
description: Classify the sentiment of a product review.
prompt:
  user: "Review: {{ review }}"
output:
  column: sentiment
  choice: [positive, negative]
data:
  id_column: review_id
  input: reviews.csv
"""


def test_builtins_ship_with_the_toolkit():
    assert [job.name for job in builtin_jobs()] == [
        "date-reformat", "embed", "image-classify", "openai-batch", "review-triage",
        "tabular-predict", "text-classify", "text-industry", "vlm-caption"]
    assert all(job.builtin and job.description for job in builtin_jobs())


def test_a_yaml_job_in_the_project_is_found_by_path_and_by_name(tmp_path: Path):
    (tmp_path / "sentiment.yaml").write_text(PROMPT_JOB)
    (tmp_path / "notes.yaml").write_text("just: some yaml\n")  # not a job: left alone
    [found] = project_jobs(tmp_path)
    assert (found.name, found.description) == ("sentiment", "Classify the sentiment of a product review.")
    assert find_job("sentiment", tmp_path).path == found.path
    assert find_job(str(tmp_path / "sentiment.yaml")).path == found.path

    job = load_job(found)
    spec = load_job_spec(job, overrides={"data.rows": "10"})
    # Omitted keys take the toolkit's defaults.
    assert (spec.engine.kind, spec.sampling.temperature, spec.data.output) == (
        "vllm", 0.0, "out/sentiment")
    stage, options = job.main_stage, job.options_of(spec)
    assert stage.result_columns(options) == {"sentiment": "string",
                                             "sentiment_confidence": "double"}
    assert stage.required_columns(options) == ["review"]


def test_a_project_job_shadows_nothing_it_does_not_name(tmp_path: Path):
    assert [job.name for job in list_jobs(tmp_path)] == [job.name for job in builtin_jobs()]
    assert find_job("text-industry", tmp_path).builtin


def test_a_python_job_file_is_loaded_by_path_with_its_inline_defaults(tmp_path: Path):
    write_new_job(tmp_path, "review-words", python=True)
    ref = find_job("review-words", tmp_path)
    assert ref.path == (tmp_path / "review_words.py").resolve()
    job = load_job(ref)
    spec = load_job_spec(job, smoke=True)
    assert spec.data.input == "review-words.sample.csv"
    assert spec.engine.model == "sample:tiny-chat"
    assert job.main_stage.result_columns(spec.options) == {"sentiment": "string", "words": "int64"}
    assert job.main_stage.preprocess.__module__.startswith("toolkit_user_jobs.review_words_")


def test_a_job_in_an_importable_module(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    package = tmp_path / "myproject"
    package.mkdir()
    (package / "__init__.py").write_text("")
    write_new_job(tmp_path, "words", python=True)
    (tmp_path / "words.py").rename(package / "words.py")
    monkeypatch.syspath_prepend(str(tmp_path))
    job = load_job("myproject.words", tmp_path / "elsewhere")
    assert job.name == "words"
    sys.modules.pop("myproject.words", None)
    sys.modules.pop("myproject", None)


def test_a_yaml_job_can_name_its_python_code(tmp_path: Path):
    write_new_job(tmp_path, "review-words", python=True)
    (tmp_path / "wrapped.yaml").write_text(
        "job: wrapped\ndescription: Words, wrapped.\npython: review_words.py\n"
        "sampling:\n  max_tokens: 4\n")
    job = load_job(str(tmp_path / "wrapped.yaml"))
    spec = load_job_spec(job, smoke=True)
    assert (job.name, spec.sampling.max_tokens, spec.data.id_column) == ("wrapped", 4, "review_id")


@pytest.mark.parametrize(("content", "message"), [
    ("job: x\n", r"has neither 'prompt' \(a prompt job\) nor 'python'"),
    ("job: x\npython: missing.py\n", "python file missing.py does not exist"),
    ("job: x\nprompt: [unclosed\n", "is not valid YAML at line 3, column 1"),
])
def test_broken_job_files_say_what_is_wrong(tmp_path: Path, content: str, message: str):
    (tmp_path / "x.yaml").write_text(content)
    with pytest.raises(SpecError, match=message):
        load_job(str(tmp_path / "x.yaml"))


def test_python_code_without_a_job_is_named(tmp_path: Path):
    (tmp_path / "helper.py").write_text("VALUE = 1\n")
    with pytest.raises(SpecError, match="does not define JOB = JobDefinition"):
        load_job(str(tmp_path / "helper.py"))
    (tmp_path / "crash.py").write_text("raise RuntimeError('boom')\n")
    with pytest.raises(SpecError, match="failed to import: RuntimeError: boom"):
        load_job(str(tmp_path / "crash.py"))


def test_unknown_jobs_list_what_exists(tmp_path: Path):
    (tmp_path / "sentiment.yaml").write_text(PROMPT_JOB)
    with pytest.raises(SpecError) as refused:
        find_job("sentimnet", tmp_path)
    builtins = ", ".join(job.name for job in builtin_jobs())
    assert f"Available jobs: {builtins}, " in str(refused.value)  # the built-ins, then yours
    with pytest.raises(SpecError, match="Job file ./nope.yaml does not exist"):
        find_job("./nope.yaml", tmp_path)


def test_new_never_overwrites(tmp_path: Path):
    write_new_job(tmp_path, "mine")
    before = (tmp_path / "mine.yaml").read_text()
    with pytest.raises(SpecError, match="mine.yaml, mine.sample.csv already exist"):
        write_new_job(tmp_path, "mine")
    assert (tmp_path / "mine.yaml").read_text() == before
    with pytest.raises(SpecError, match="not usable as a file name"):
        write_new_job(tmp_path, "../escape")
