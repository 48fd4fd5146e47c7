"""``toolkit new``: a job file and a small sample input, ready to run as written."""

from __future__ import annotations

import csv
from pathlib import Path

from toolkit.errors import SpecError
from toolkit.spec.jobs.catalog import check_job_name

SAMPLE_REVIEWS: list[tuple[str, str]] = [
    ("r-001", "Arrived quickly and works exactly as described. Would buy again."),
    ("r-002", "Stopped working after two days and support never answered."),
    ("r-003", "It is fine. Does the job, nothing special."),
    ("r-004", "The best purchase I made this year, my kids love it."),
    ("r-005", "Box was damaged and two parts were missing."),
    ("r-006", "Average quality for the price; shipping took a week."),
    ("r-007", "Brilliant battery life and the screen is gorgeous."),
    ("r-008", "Returned it. Much smaller than the photos suggest."),
]

YAML_JOB = """\
# {name}: a prompt job. Run it with: toolkit run {name} --smoke   (tiny model, offline)
# The prompt is Jinja over the input's columns ({{{{ review }}}}; a column with spaces is
# {{{{ row["Column Name"] }}}}); a name that isn't a column fails before any model loads.
# Put the row's columns last: the text before them is the same on every row, and both
# engines compute a shared prompt head once instead of once per row.
# Any spec key can be set here (data, engine, sampling, compute); 'toolkit show {name}'
# prints them all with their values.
job: {name}
description: Classify the sentiment of a product review.
prompt:
  system: You classify the sentiment of product reviews. Answer with one word.
  user: "Review: {{{{ review }}}}"
output:
  column: sentiment
  choice: [positive, negative, neutral]    # or regex: ..., or json_schema: {{...}}
data:
  input: {sample}
  id_column: review_id
  output: out/{name}
engine:
  kind: vllm                  # GPUs; on this machine: --engine transformers --accelerator none
  model: Qwen/Qwen2.5-7B-Instruct
  batch_size: 64
sampling:
  max_tokens: 16              # room for the longest choice, with a tokenizer that splits it
"""

PYTHON_JOB = '''\
"""{name}: classify the sentiment of a product review (a Python job).

Run it with: toolkit run {name} --smoke   (tiny model, offline)
preprocess turns a row into chat messages; postprocess turns the model's answer into
result columns. Raising ValueError in either makes that row an error row.
"""

from __future__ import annotations

from typing import Any

from pydantic import Field

from toolkit.spec.job_definition import JobDefinition, JobSpec, StrictModel

LABELS = ["positive", "negative", "neutral"]


class Options(StrictModel):
    review_column: str = Field("review", description="Column holding the review text.")
    instructions: str = Field(
        "You classify the sentiment of product reviews. Answer with one word.",
        description="System prompt.",
    )


class Spec(JobSpec):
    options: Options = Field(default_factory=Options)


def preprocess(row: dict[str, Any], options: Options) -> dict[str, Any]:
    text = str(row.get(options.review_column) or "").strip()
    if not text:
        raise ValueError(f"column {{options.review_column!r}} is empty")
    return {{"messages": [
        {{"role": "system", "content": options.instructions}},
        {{"role": "user", "content": f"Review: {{text}}"}},
    ]}}


def postprocess(row: dict[str, Any], options: Options) -> dict[str, Any]:
    answer = str(row["generated_text"]).strip()
    if answer not in LABELS:
        raise ValueError(f"model answered {{answer!r}}, not one of {{LABELS}}")
    return {{"sentiment": answer, "words": len(str(row[options.review_column]).split())}}


JOB = JobDefinition(
    name="{name}",
    description="Classify the sentiment of a product review (Python).",
    spec_model=Spec,
    preprocess=preprocess,
    postprocess=postprocess,
    required_columns=lambda options: [options.review_column],
    structured_output=lambda options: {{"choice": LABELS}},
    result_columns=lambda options: {{"sentiment": "string", "words": "int64"}},
    defaults={{
        "data": {{"input": "{sample}", "id_column": "review_id", "output": "out/{name}"}},
        "engine": {{"kind": "vllm", "model": "Qwen/Qwen2.5-7B-Instruct", "batch_size": 64}},
        "sampling": {{"max_tokens": 16}},
    }},
    smoke_overrides={{"engine.model": "sample:tiny-chat"}},
)
'''


def write_new_job(directory: Path, name: str, python: bool = False) -> list[Path]:
    """Write ``NAME.yaml`` (or ``NAME.py``) and ``NAME.sample.csv`` into ``directory``.

    Raises:
        SpecError: a bad name, or one of the files exists already (nothing is
            overwritten).
    """
    check_job_name(name)
    directory = Path(directory)
    job_file = directory / (f"{name.replace('-', '_')}.py" if python else f"{name}.yaml")
    sample = directory / f"{name}.sample.csv"
    existing = [p.name for p in (job_file, sample) if p.exists()]
    if existing:
        raise SpecError(
            f"{', '.join(existing)} already exist(s) in {directory}; nothing was written.",
            hint="Choose another NAME, or remove the file if you meant to start over.",
        )
    template = PYTHON_JOB if python else YAML_JOB
    job_file.write_text(template.format(name=name, sample=f"{sample.name}"), encoding="utf-8")
    with sample.open("w", newline="", encoding="utf-8") as stream:
        writer = csv.writer(stream)
        writer.writerow(["review_id", "review"])
        writer.writerows(SAMPLE_REVIEWS)
    return [job_file, sample]
