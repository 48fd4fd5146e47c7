"""Careless and hostile jobs: templates that would build gigabytes or loop for hours, YAML
alias bombs, settings no engine can honour, and inputs in a shape the reader can't take.

Each case is what a user would type, through the real CLI. A job or setting that can't
work is refused before any model loads: exit code 2, one message naming the field, file
or flag and the fix, no traceback. A template that runs away on a row makes that row an
error row at once, naming the limit, and the run ends quickly instead of hanging.
"""

from __future__ import annotations

import gzip
import json
import time
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner

from toolkit.cli.main import main

REVIEWS = "review_id,review\nr-1,Works well.\nr-2,Broke in a day.\nr-3,It is fine.\n"


def job_yaml(user: str = "Review: {{ review }}",
             output: str = "column: verdict\n  choice: [positive, negative]") -> str:
    return (f"job: review-check\nprompt:\n  user: {json.dumps(user)}\noutput:\n  {output}\n"
            "data:\n  id_column: review_id\nsampling:\n  max_tokens: 16\n")


def alias_bomb() -> str:
    """'Billion laughs': nine aliases nine levels deep, 387 million values once expanded."""
    lines = [job_yaml().rstrip("\n"), 'a: &a ["lol", "lol", "lol", "lol", "lol", "lol", '
             '"lol", "lol", "lol"]']
    for level in range(8):
        name, previous = chr(ord("b") + level), chr(ord("a") + level)
        lines.append(f"{name}: &{name} [{', '.join([f'*{previous}'] * 9)}]")
    return "\n".join(lines) + "\n"


def batch_file_with_bom() -> bytes:
    lines = [json.dumps({"custom_id": f"req-{i}", "method": "POST",
                         "url": "/v1/chat/completions",
                         "body": {"model": "sample:tiny-chat", "max_tokens": 4,
                                  "messages": [{"role": "user", "content": f"{i} + {i}?"}]}})
             for i in (1, 2)]
    return "\ufeff".encode() + "\n".join(lines).encode() + b"\n"


CAP = ("template output exceeds 32,768 characters (engine.engine_kwargs.max_model_len 4096 x 8;"
       " options.max_prompt_chars sets another cap)")
STEPS = "template takes more than 50,000 steps (loop iterations and calls) for one row"
# {tmp} is the test's folder (and the current one): Ray's workers need absolute paths.
RUN_JOB = ["run", "./job.yaml", "--smoke", "--input", "{tmp}/reviews.csv",
           "--output", "{tmp}/out"]
RUN_BUILTIN = ["run", "text-industry", "--smoke", "--rows", "5", "--output", "{tmp}/out"]
DEEP_KEY = "a." * 20_000 + "a=1"

# (case, files written first (None: a folder), arguments, exit code, texts the user sees,
#  output rows by id -> a text of their error (None: no error); None: no output expected)
CASES: list[tuple[str, dict[str, Any], list[str], int, list[str], dict[str, Any] | None]] = [
    ("string-repeat bomb", {"job.yaml": job_yaml("{{ 'x' * 50000000 }} {{ review }}"),
                            "reviews.csv": REVIEWS}, RUN_JOB, 0,
     ["rows written:  3 (0 ok, 3 with an error)"],
     {f"r-{i}": f"preprocess: prompt.user: {CAP}: str * 50000000 would build 50,000,000 "
                "characters" for i in (1, 2, 3)}),
    ("nested range loops", {"job.yaml": job_yaml(
        "{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}"
        "{{ review }}"), "reviews.csv": REVIEWS}, RUN_JOB, 0,
     ["rows written:  3 (0 ok, 3 with an error)"],
     {f"r-{i}": f"preprocess: prompt.user: {STEPS}" for i in (1, 2, 3)}),
    ("5 MB cell", {"job.yaml": job_yaml(),
                   "reviews.csv": REVIEWS.replace("Broke in a day.", "x" * 5_000_000)},
     RUN_JOB, 0, ["rows written:  3 (2 ok, 1 with an error)"],
     {"r-1": None, "r-2": f"preprocess: prompt.user: {CAP}; column 'review' alone is "
                          "5,000,000 characters", "r-3": None}),
    ("YAML alias bomb, show", {"bomb.yaml": alias_bomb()}, ["show", "./bomb.yaml"], 2,
     ["bomb.yaml is refused: its aliases (*name) expand to more than 100,000 values (line",
      "Hint: YAML aliases repeat a value by reference"], None),
    ("YAML alias bomb, run", {"bomb.yaml": alias_bomb(), "reviews.csv": REVIEWS},
     ["run", "./bomb.yaml", "--smoke", "--input", "{tmp}/reviews.csv"], 2,
     ["bomb.yaml is refused: its aliases (*name) expand to more than 100,000 values"], None),
    ("YAML alias bomb in -f", {"bomb.yaml": alias_bomb().replace("job: review-check", "")},
     ["show", "text-industry", "-f", "bomb.yaml"], 2,
     ["Error: Spec file bomb.yaml is refused: its aliases (*name) expand to more than "
      "100,000 values"], None),
    ("impossible regex", {"job.yaml": job_yaml(output="column: verdict\n  regex: 'a{2,1}'"),
                          "reviews.csv": REVIEWS}, RUN_JOB, 2,
     ["output.regex: not a valid regular expression: min repeat greater than max repeat"],
     None),
    ("regex structured outputs can't enforce", {
        "job.yaml": job_yaml(output="column: price\n  regex: '(?<=[$])[0-9]+'"),
        "reviews.csv": REVIEWS}, RUN_JOB, 2,
     ["output.regex: '(?<=[$])[0-9]+': lookbehind (?<=...) is not supported by structured "
      "outputs (xgrammar); match the text itself instead"], None),
    ("invalid json_schema", {"job.yaml": job_yaml(
        output="json_schema: {type: object, properties: {mood: {type: foo}}}"),
        "reviews.csv": REVIEWS}, RUN_JOB, 2,
     ["output.json_schema: properties.mood.type: 'foo' is not a JSON schema type; use one of "
      "string, integer, number, boolean, object, array, null"], None),
    ("job file is a directory", {"jobs.yaml": None}, ["run", "./jobs.yaml", "--smoke"], 2,
     ["Error: Job file ./jobs.yaml is a directory, not a job file."], None),
    ("python: ../../etc/passwd", {"sub/job.yaml": "job: sneaky\npython: ../../etc/passwd\n"},
     ["show", "./sub/job.yaml"], 2,
     ["python: '../../etc/passwd' is neither a .py file nor a module name.",
      "Hint: Write python: my_job.py (a Python file beside the job file)"], None),
    ("python: a .py outside the job's folder", {
        "sub/job.yaml": "job: up\npython: ../shared_code.py\n", "shared_code.py": "JOB = 1\n"},
     ["show", "./sub/job.yaml"], 2,
     ["python: ../shared_code.py is outside the job file's folder"], None),
    ("gzipped CSV named .csv", {"job.yaml": job_yaml(),
                                "reviews.csv": gzip.compress(REVIEWS.encode())}, RUN_JOB, 2,
     ["Error: data.input: {tmp}/reviews.csv looks gzip-compressed (it starts with bytes 1f 8b",
      "Hint: Decompress it (gunzip -c reviews.csv > reviews-plain.csv), or name it "
      "reviews.csv.gz: a .gz file is read decompressed."], None),
    ("gzipped CSV named .csv.gz", {"job.yaml": job_yaml(),
                                   "reviews.csv.gz": gzip.compress(REVIEWS.encode())},
     ["run", "./job.yaml", "--smoke", "--input", "{tmp}/reviews.csv.gz",
      "--output", "{tmp}/out"], 0,
     ["rows written:  3 (3 ok, 0 with an error)"], {"r-1": None, "r-2": None, "r-3": None}),
    ("BOM before line 1 of a batch file", {"requests.jsonl": batch_file_with_bom()},
     ["run", "openai-batch", "--smoke", "--input", "{tmp}/requests.jsonl", "--output",
      "{tmp}/out"], 0,
     ["rows written:  2 (2 ok, 0 with an error)"], {"req-1": None, "req-2": None}),
    ("--output /", {}, [*RUN_BUILTIN, "--output", "/"], 2,
     ["data.output: / is the filesystem root; results need a directory of their own"], None),
    ("20,000-level --set key", {}, [*RUN_BUILTIN, "--set", DEEP_KEY], 2,
     ["Error: --set a.a.a.a.a.a.a.a.a.a.a.a.a.a.a.a.a.a.a.a.... (40,001 characters)=...: the "
      "key has 20,001 levels; spec keys have at most 32"], None),
    ("unknown engine_kwargs on transformers", {},
     [*RUN_BUILTIN, "--set", "engine.engine_kwargs.max_len=512"], 2,
     ["engine: engine_kwargs max_len: no engine reads this (check the spelling). The "
      "transformers engine reads max_model_len, dtype, enable_prefix_caching"], None),
    ("a vLLM engine argument on transformers: a note", {},
     ["show", "text-industry", "--smoke", "--set", "engine.engine_kwargs.quantization=fp8"], 0,
     ["Warning: engine.engine_kwargs quantization: vLLM setting the transformers engine "
      "doesn't use (it reads max_model_len, dtype, enable_prefix_caching); it applies with "
      "kind: vllm."], None),
]


def write_files(folder: Path, files: dict[str, Any]) -> None:
    for name, content in files.items():
        path = folder / name
        path.parent.mkdir(parents=True, exist_ok=True)
        if content is None:
            path.mkdir()
        elif isinstance(content, bytes):
            path.write_bytes(content)
        else:
            path.write_text(content)


def errors_by_id(out: Path) -> dict[str, Any]:
    table = pq.read_table(out)
    key = "custom_id" if "custom_id" in table.column_names else "review_id"
    return {row[key]: row["error"] for row in table.to_pylist()}


@pytest.mark.parametrize("case, files, args, code, expected, rows", CASES,
                         ids=[c[0] for c in CASES])
def test_a_hostile_job_gets_one_clear_answer_quickly(case, files, args, code, expected, rows,
                                                     local_ray, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    write_files(tmp_path, files)

    args = [arg.replace("{tmp}", str(tmp_path)) for arg in args]
    started = time.monotonic()
    result = CliRunner().invoke(main, args)
    elapsed = time.monotonic() - started

    assert result.exit_code == code, result.output
    for text in expected:
        assert text.replace("{tmp}", str(tmp_path)) in result.output
    assert "Traceback" not in result.output and "Unexpected error" not in result.output
    assert ("Error: " in result.output) == (code != 0)
    assert elapsed < 60, f"{case} took {elapsed:.0f} s"
    if rows is not None:
        errors = errors_by_id(tmp_path / "out")
        assert set(errors) == set(rows)
        for row_id, error in rows.items():
            assert (errors[row_id] is None) if error is None else (error in errors[row_id]), (
                row_id, errors[row_id])


def test_a_cell_longer_than_the_csv_readers_block_is_named(local_ray, tmp_path):
    """Past 16 MiB a row can't be read at all; Ray's message would only say to retry.
    (Through the library: the in-process Ray of the tests prints its workers' tracebacks,
    which ``toolkit run`` sends to the run's log file.)"""
    from toolkit.errors import InputDataError
    from toolkit.run.input.reading import input_schema, open_input
    from toolkit.spec.models import DataConfig

    path = tmp_path / "reviews.csv"
    path.write_text(REVIEWS.replace("Broke in a day.", "x" * (40 << 20)))
    data = DataConfig(input=str(path), id_column="review_id", output=str(tmp_path / "out"))
    with pytest.raises(InputDataError) as raised:
        input_schema(open_input(data), str(path))
    assert str(raised.value) == (
        f"data.input: can't read {path}: a row is longer than 16 MiB, the most the CSV "
        "reader takes in one piece (no prompt needs a cell that long: shorten or drop it)")


def test_every_builtin_job_loads_on_the_transformers_engine_without_a_note():
    """Built-in jobs carry vLLM tuning (date-reformat: enable_chunked_prefill,
    max_num_batched_tokens, gpu_memory_utilization): accepted, no warning."""
    from toolkit.spec.jobs.catalog import builtin_jobs, load_job
    from toolkit.spec.loading import load_job_spec

    for ref in builtin_jobs():
        job = load_job(ref)
        if load_job_spec(job).engine.kind not in ("vllm", "transformers"):
            continue  # tabular-predict: sklearn
        for spec in (load_job_spec(job, smoke=True),
                     load_job_spec(job, overrides={"engine.kind": "transformers"})):
            assert spec.engine.kind == "transformers"
            assert spec.engine.engine_warnings() == [], ref.name


def test_the_vllm_argument_list_matches_vllm():
    arg_utils = pytest.importorskip("vllm.engine.arg_utils")
    import dataclasses

    from toolkit.engines.vllm.engine_args import VLLM_ENGINE_ARGS

    fields = {f.name for f in dataclasses.fields(arg_utils.EngineArgs)
              if not f.name.startswith("_")}
    assert fields <= VLLM_ENGINE_ARGS, sorted(fields - VLLM_ENGINE_ARGS)


# -- the same limits on the row hooks, without Ray ------------------------------------------


def options(user: str, **settings: Any):
    from toolkit.spec.jobs.prompt_job import PromptJobSpec, prompt_options

    return prompt_options(PromptJobSpec.model_validate({
        "job": "review-check", "prompt": {"system": "Answer in one word.", "user": user},
        "options": settings,
        "data": {"input": "reviews.csv", "id_column": "review_id", "output": "out"},
        "engine": {"kind": "transformers", "model": "sample:tiny-chat", "batch_size": 8,
                   "engine_kwargs": {"max_model_len": 64}},
        "sampling": {"max_tokens": 4},
    }))


ROW = {"review_id": "r-1", "review": "Broke in a day."}
# (template, what the row's error says)
RUNAWAY_TEMPLATES = [
    ("{{ review * 100000 }}", "str * 100000 would build 1,500,000 characters"),
    ("{{ review|center(1000000000) }}", "the center filter would build 1,000,000,000"),
    ("{{ review.ljust(10 ** 9) }}", "str.ljust() would build 1,000,000,000 characters"),
    ("{{ '%*d' % (10 ** 9, 1) }}", "'%' formatting with a width of 1,000,000,000"),
    ("{{ '{:>{}}'.format(1, 10 ** 9) }}", "str.format with a width of 1,000,000,000"),
    ("{% set ns = namespace(s=review) %}{% for i in range(60) %}{% set ns.s = ns.s ~ ns.s %}"
     "{% endfor %}", "'~' would build"),
    ("{% set ns = namespace(n=10) %}{% for i in range(60) %}{% set ns.n = ns.n * ns.n %}"
     "{% endfor %}", "a number of about"),
    ("{{ 10 ** 100000000 }}", "a number of about 400,000,000 bits"),
    ("{% macro f(n) %}{% if n %}{{ f(n - 1) }}{{ f(n - 1) }}{% endif %}{% endmacro %}{{ f(60) }}",
     STEPS),
    ("{% set b %}{% for i in range(100000) %}{{ review }}{% endfor %}{% endset %}{{ b|length }}",
     "its {{ }} output would build"),
    ("{{ (['x' * 400] * 1000)|join }}", "list * 1000 would build"),
]


@pytest.mark.parametrize("template, expected", RUNAWAY_TEMPLATES,
                         ids=[t for t, _ in RUNAWAY_TEMPLATES])
def test_a_runaway_template_fails_its_row_at_once(template, expected):
    from toolkit.spec.jobs.prompt_job import preprocess

    started = time.monotonic()
    with pytest.raises(ValueError, match="^prompt.user: ") as raised:
        preprocess(ROW, options(template))
    assert expected in str(raised.value)
    assert time.monotonic() - started < 5


def test_the_prompt_cap_follows_max_model_len_or_the_option():
    from toolkit.spec.jobs.prompt_job import preprocess

    derived = options("{{ review }}")
    assert (derived.max_prompt_chars, derived.max_prompt_chars_from) == (
        512, "engine.engine_kwargs.max_model_len 64 x 8; options.max_prompt_chars sets "
             "another cap")
    tight = options("Review: {{ review }}", max_prompt_chars=35)  # the system prompt is 19
    with pytest.raises(ValueError) as raised:
        preprocess(ROW, tight)
    assert str(raised.value) == (
        "prompt.user: template output (with the 19 before it) exceeds 35 characters "
        "(options.max_prompt_chars)")
    assert preprocess({**ROW, "review": "Fine."}, tight)["messages"][1] == {
        "role": "user", "content": "Review: Fine."}


def test_ordinary_templates_render_as_in_jinjas_own_sandbox():
    import jinja2
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    from toolkit.spec.jobs.prompt_job import preprocess

    template = ("{% macro item(x) %}[{{ x|upper }}]{% endmacro %}"
                "{% for word in review.split() %}{{ item(word) }}{{ loop.index }}{% endfor %} "
                "{{ '{:,}'.format(8000000000) }} {{ '%.2f' % 3.14159 }} {{ review ~ '!' }} "
                "{{ row.get('notes', 'none') }} {{ (review * 2)|truncate(20) }}")
    content = preprocess(ROW, options(template))["messages"][1]["content"]
    plain = ImmutableSandboxedEnvironment(undefined=jinja2.StrictUndefined).from_string(template)
    assert content == plain.render({**ROW, "row": ROW})
    assert content.startswith("[BROKE]1[IN]2[A]3[DAY.]4 8,000,000,000 3.14 Broke in a day.! none")
