"""Careless and hostile input: ids that repeat or are missing, columns that would
overwrite one another, and your own files inside an output folder.

Each is refused before any model loads, with one paragraph naming the column, rows
or files and the fix, exit code 2 and no traceback, and nothing of yours is touched.
Each case is what a user would type: a YAML job of their own over their CSV.
"""

from __future__ import annotations

from pathlib import Path

import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner

from toolkit.cli.main import main

JOB_YAML = """\
job: sentiment
description: Classify the sentiment of a product review.
prompt:
  user: "Review: {{ review }}"
output:
  column: OUTPUT_COLUMN
  choice: [positive, negative, neutral]
data:
  input: reviews.csv
  id_column: review_id
sampling:
  max_tokens: 8
"""

INPUTS = {
    "reviews.csv": "review_id,review,stars\nr-1,Works well.,5\nr-2,Broke in a day.,1\n"
                   "r-3,It is fine.,3\n",
    # 200 rows, 100 ids: each id twice (what a careless export gives).
    "repeated.csv": "line,review_id,review\n" + "".join(
        f"{i + 1},r-{i % 100:03d},Review number {i}.\n" for i in range(200)),
    "twice.csv": "line,review_id,review\n1,r-1,Works well.\n2,r-2,Broke in a day.\n"
                 "3,r-1,Works well.\n4,r-3,It is fine.\n",
    "blank-ids.csv": "review_id,review\nr-1,Works well.\n,Broke in a day.\nr-3,It is fine.\n",
    "with-error.csv": "review_id,review,error\nr-1,Works well.,\nr-2,Broke in a day.,late\n",
    "with-generated-text.csv": "review_id,review,generated_text\nr-1,Works well.,draft\n",
    "no-id.csv": "review_key,review\nk-1,Works well.\n",
}

SAME_IDS = ("Rows are written, reported and resumed by their data.id_column, so each row "
            "needs an id of its own (a rerun would skip a repeated id's other rows as already "
            "written). Nothing was run.")
NOT_MINE = ("it never deletes or mixes results with files it doesn't own, even with "
            "--overwrite.\nHint: Choose an empty or new directory with --output.")

# (case, input file, output.column, files already in the output folder, flags,
#  exit code, what the user sees: {input} and {out} stand for their paths)
CASES = [
    ("repeated ids", "repeated.csv", "sentiment", {}, [], 2,
     "Error: data.input: {input} has repeated review_id values: 'r-000', 'r-001', 'r-002' and "
     f"97 more are each on more than one row (200 rows, 100 distinct ids). {SAME_IDS}\n"
     "Hint: Key the rows on a column that is unique per row with --set "
     "data.id_column=<column> (the other columns: line, review), or give every row its own "
     "review_id in the input.\n"),
    ("repeated ids among the --rows read", "twice.csv", "sentiment", {}, ["--rows", "3"], 2,
     "Error: data.input: {input} (in the first 3 rows, which this run reads) has repeated "
     "review_id values: 'r-1' is on more than one row (3 rows, 2 distinct ids). "
     f"{SAME_IDS}\n"),
    ("blank ids", "blank-ids.csv", "sentiment", {}, [], 2,
     "Error: data.input: {input} has 1 row without a review_id (null or empty): data row 2. "
     f"{SAME_IDS}\nHint: Key the rows on a column that is unique per row with --set "
     "data.id_column=<column> (the other columns: review), or give every row its own "
     "review_id in the input.\n"),
    ("output column is the id column", "reviews.csv", "review_id", {}, [], 2,
     "Error: output.column 'review_id' is data.id_column, so every row's id would be "
     "overwritten by its result (and the output, error rows and resume are keyed on it). "
     "Nothing was run.\nHint: Give the result column another name, or key the rows on "
     "another column with --set data.id_column=<column>.\n"),
    ("output column is an input column", "reviews.csv", "review", {}, [], 2,
     "Error: output.column 'review' is also a column of the input {input}, which every "
     "output row keeps, so the results would replace its values. Nothing was run.\n"
     "Hint: Give the result column another name, or rename that column in the input.\n"),
    ("input column named error", "with-error.csv", "sentiment", {}, [], 2,
     "Error: data.input: {input} has a column 'error', which the toolkit writes itself (why "
     "a row failed), so every output row would lose its values. Nothing was run.\n"
     "Hint: Rename 'error' in the input; every other input column is kept as it is.\n"),
    ("input column named generated_text", "with-generated-text.csv", "sentiment", {}, [], 2,
     "Error: data.input: {input} has a column 'generated_text', which the toolkit writes "
     "itself (the model's raw output), so every output row would lose its values."),
    ("your _input in a folder without a manifest", "reviews.csv", "sentiment",
     {"_input/precious.csv": b"id,notes\n1,keep me\n"}, [], 2,
     "Error: data.output: {out} holds 1 file(s) this toolkit did not write "
     f"(_input/precious.csv); {NOT_MINE}\n"),
    ("your _logs with --overwrite", "reviews.csv", "sentiment",
     {"_logs/notes.txt": b"my notes"}, ["--overwrite"], 2,
     "Error: data.output: {out} holds 1 file(s) this toolkit did not write "
     f"(_logs/notes.txt); {NOT_MINE}\n"),
    ("missing id column", "no-id.csv", "sentiment", {}, [], 2,
     "Error: data.input: {input} has no column 'review_id'. Available columns: review_key, "
     "review. ('review_id' -> did you mean 'review'?)\nHint: Key the rows on a column "
     "that is unique per row with --set data.id_column=<column> (one of: review_key, "
     "review), or add a review_id column to the input.\n"),
]


def write_job(folder: Path, output_column: str = "sentiment") -> Path:
    for name, text in INPUTS.items():
        (folder / name).write_text(text)
    job = folder / "sentiment.yaml"
    job.write_text(JOB_YAML.replace("OUTPUT_COLUMN", output_column))
    return job


def files_under(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in folder.rglob("*") if p.is_file()}


def run(job: Path, *args: str):
    return CliRunner().invoke(main, ["run", str(job), "--smoke", *args])


@pytest.mark.parametrize("case, input_file, output_column, existing, flags, code, expected",
                         CASES, ids=[c[0] for c in CASES])
def test_hostile_input_is_refused_before_any_model_loads(
        case, input_file, output_column, existing, flags, code, expected, local_ray, tmp_path):
    job = write_job(tmp_path, output_column)
    out = tmp_path / "out"
    for name, content in existing.items():
        (out / name).parent.mkdir(parents=True, exist_ok=True)
        (out / name).write_bytes(content)
    before = files_under(tmp_path)

    result = run(job, "--input", str(tmp_path / input_file), "--output", str(out), *flags)

    assert result.exit_code == code, result.output
    assert expected.format(input=tmp_path / input_file, out=out) in result.output
    assert "Traceback" not in result.output
    after = files_under(tmp_path)
    assert {name: after.get(name) for name in before} == before  # yours, byte for byte
    # At most the toolkit's manifest and log: no result, no staged rows.
    assert set(after) - set(before) <= {"out/_manifest.json", "out/_logs/run.log"}


def test_following_the_hint_runs_every_row_exactly_once(local_ray, tmp_path):
    job = write_job(tmp_path)
    out = tmp_path / "out"
    refused = run(job, "--input", str(tmp_path / "twice.csv"), "--output", str(out))
    assert refused.exit_code == 2
    assert "--set data.id_column=<column> (the other columns: line, review)" in refused.output

    fixed = run(job, "--input", str(tmp_path / "twice.csv"), "--output", str(out),
                "--set", "data.id_column=line")

    assert fixed.exit_code == 0, fixed.output
    assert "rows written:  4 " in fixed.output
    rows = sorted(pq.read_table(out).to_pylist(), key=lambda row: int(row["line"]))
    assert [(r["line"], r["review_id"], r["review"]) for r in rows] == [
        ("1", "r-1", "Works well."), ("2", "r-2", "Broke in a day."),
        ("3", "r-1", "Works well."), ("4", "r-3", "It is fine.")]
    assert all(r["sentiment"] in ("positive", "negative", "neutral") or r["error"] for r in rows)


def test_overwrite_deletes_only_what_the_toolkit_wrote(local_ray, tmp_path):
    job = write_job(tmp_path)
    out = tmp_path / "out"
    first = run(job, "--input", str(tmp_path / "reviews.csv"), "--output", str(out))
    assert first.exit_code == 0, first.output
    rows = sorted(pq.read_table(out).to_pylist(), key=lambda row: row["review_id"])
    assert [(r["review_id"], r["review"], r["stars"]) for r in rows] == [
        ("r-1", "Works well.", "5"), ("r-2", "Broke in a day.", "1"), ("r-3", "It is fine.", "3")]
    assert list(rows[0]) == ["review_id", "review", "stars", "sentiment", "sentiment_confidence",
                             "finish_reason", "failed_checks", "num_input_tokens",
                             "num_generated_tokens", "error"]
    (out / "_logs" / "notes.txt").write_text("what I saw in run.log")
    (out / "_input").mkdir()
    (out / "_input" / "precious.csv").write_text("id,notes\n1,keep me\n")
    before = files_under(out)

    for flags in ([], ["--overwrite"]):  # a rerun, and a rerun from scratch
        again = run(job, "--input", str(tmp_path / "reviews.csv"), "--output", str(out), *flags)
        assert again.exit_code == 2, again.output
        assert (f"Error: data.output: {out} holds 2 file(s) this toolkit did not write "
                f"(_input/precious.csv, _logs/notes.txt); {NOT_MINE}") in again.output
        assert files_under(out) == before  # results, log, summary and your files

    (out / "_logs" / "notes.txt").unlink()
    (out / "_input" / "precious.csv").unlink()
    rerun = run(job, "--input", str(tmp_path / "reviews.csv"), "--output", str(out),
                "--overwrite")
    assert rerun.exit_code == 0, rerun.output
    assert pq.read_table(out).num_rows == 3
