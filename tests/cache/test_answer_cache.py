"""The answer cache as a user meets it: `toolkit run JOB --cache DIR` keeps every answer
it paid for, a rerun over an input that shares most rows sends only the new and edited
prompts to the model, and a prompt repeated within a run reaches the model once.

The runs go through the `toolkit` command in its own process from a folder that is not
the checkout, on the tiny sample model; the steps around the model and the entries
are also checked on their own, on Arrow tables, without Ray.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pytest

from toolkit.engines.model_source import ModelLocation
from toolkit.run.answer_cache.answer_keys import row_key, stage_context
from toolkit.run.answer_cache.cache_steps import (
    FROM_CACHE,
    KEY,
    look_up_answers,
    settle_answers,
)
from toolkit.run.answer_cache.entries import ENTRY_SUFFIX, AnswerEntries
from toolkit.spec.jobs.catalog import load_job
from toolkit.spec.loading import load_job_spec

ROWS = 12
ANSWER = ["inferred_industry", "inferred_industry_confidence", "num_input_tokens",
          "num_generated_tokens", "finish_reason"]


def toolkit(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run(["toolkit", *args], cwd=cwd, capture_output=True, text=True,
                          timeout=600, env={**os.environ, "RAY_ADDRESS": ""})


def run(folder: Path, rows: str, output: str, cache: str = "cache",
        *extra: str) -> pd.DataFrame:
    ran = toolkit("run", "text-industry", "--smoke", "--input", rows, "--cache", cache,
                  "--output", output, *extra, cwd=folder)
    assert ran.returncode == 0, ran.stdout + ran.stderr
    return pd.read_parquet(folder / output).set_index("Index")


def summary(folder: Path, output: str) -> dict:
    return json.loads((folder / output / "_summary.json").read_text())


@pytest.fixture(scope="module")
def first(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, pd.DataFrame]:
    """A user's folder: rows.csv (rows 1 and 2 twice more, under new ids) run once
    into cache/."""
    folder = tmp_path_factory.mktemp("answer-cache")
    made = toolkit("samples", "customers", "--rows", str(ROWS), "-o", "base.csv", cwd=folder)
    assert made.returncode == 0, made.stderr
    base = pd.read_csv(folder / "base.csv", dtype=str)
    twice = base[base["Index"].isin(["1", "2"])].assign(Index=["101", "102"])
    pd.concat([base, twice]).to_csv(folder / "rows.csv", index=False)
    return folder, run(folder, "rows.csv", "out/first")


def test_a_run_fills_the_cache_and_answers_a_repeated_prompt_once(first):
    folder, rows = first
    assert len(rows) == ROWS + 2 and rows["error"].isna().all()
    assert list(folder.glob(f"cache/*{ENTRY_SUFFIX}"))
    cache = summary(folder, "out/first")["cache"]
    assert cache["rows_repeated"] == 2 and cache["rows_from_cache"] == 0
    assert (rows.loc[["101", "102"], "answered_by"] == "repeat").all()
    assert rows.drop(index=["101", "102"])["answered_by"].isna().all()
    for copy, original in (("101", "1"), ("102", "2")):
        assert rows.loc[copy, ANSWER].tolist() == rows.loc[original, ANSWER].tolist()
    assert rows.loc["101", "Email"] == rows.loc["1", "Email"]


def test_a_rerun_sends_only_the_new_and_edited_prompts_to_the_model(first):
    folder, before = first
    base = pd.read_csv(folder / "base.csv", dtype=str)
    rows = base.copy()
    rows.loc[rows["Index"] == "1", "Index"] = "201"  # renamed, the same text
    rows.loc[rows["Index"] == "2", "Company"] = "Acme Quantum Bakeries"  # edited
    new = base[base["Index"] == "3"].assign(Index=["301"], Company=["Northwind Rail Freight"])
    pd.concat([rows, new]).to_csv(folder / "next.csv", index=False)

    after = run(folder, "next.csv", "out/next")

    assert sorted(after.index) == sorted(rows["Index"].tolist() + ["301"])  # each id once
    asked = after[after["answered_by"].isna()]
    assert sorted(asked.index) == ["2", "301"]
    cache = summary(folder, "out/next")["cache"]
    assert cache["rows_from_cache"] == ROWS - 1 and cache["rows_repeated"] == 0
    assert cache["input_tokens_saved"] == int(after.drop(index=["2", "301"])[
        "num_input_tokens"].sum())
    kept = [i for i in after.index if i not in ("2", "301", "201")]
    assert after.loc[kept, ANSWER].equals(before.loc[kept, ANSWER])
    assert after.loc["201", ANSWER].tolist() == before.loc["1", ANSWER].tolist()


def test_two_runs_filling_one_cache_at_once_both_finish_right(first):
    folder, before = first
    runs = [subprocess.Popen(
        ["toolkit", "run", "text-industry", "--smoke", "--input", "rows.csv", "--cache",
         "shared", "--output", f"out/together-{n}"], cwd=folder, stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT, text=True, env={**os.environ, "RAY_ADDRESS": ""})
        for n in (1, 2)]
    for process in runs:
        out, _ = process.communicate(timeout=600)
        assert process.returncode == 0, out
    for n in (1, 2):
        rows = pd.read_parquet(folder / f"out/together-{n}").set_index("Index")
        assert rows["error"].isna().all()
        assert rows.loc[before.index, ANSWER].equals(before[ANSWER])


# -- the key, the entries and the steps, without Ray -------------------------------

def _spec(**sets: str):
    return load_job_spec(load_job("text-industry"), smoke=True,
                         sets=tuple(f"{k}={v}" for k, v in sets.items()))


def test_another_model_template_or_max_tokens_is_another_key():
    spec = _spec()
    context = stage_context(ModelLocation(spec.engine.model), spec.engine)
    messages = [{"role": "user", "content": "Acme"}]
    params = {"temperature": 0.0, "max_tokens": 8}
    key = row_key(context, messages, params)
    assert key == row_key(stage_context(ModelLocation(spec.engine.model), spec.engine),
                          messages, params)
    assert key != row_key(context, messages, {**params, "max_tokens": 9})
    assert key != row_key(context, [{"role": "user", "content": "Acme "}], params)
    other_model = _spec(**{"engine.model": "sample:tiny-chat-small"})
    assert context != stage_context(ModelLocation(other_model.engine.model), other_model.engine)
    template = _spec(**{"engine.chat_template_kwargs": '{"enable_thinking": false}'})
    assert context != stage_context(ModelLocation(spec.engine.model), template.engine)
    # The pool's size never changes an answer.
    bigger = _spec(**{"engine.batch_size": "7"})
    assert context == stage_context(ModelLocation(spec.engine.model), bigger.engine)


def _prepared(prompts: list[str], errors: list[str | None] | None = None) -> pa.Table:
    n = len(prompts)
    return pa.table({
        "id": [str(i) for i in range(n)],
        "messages": [[{"role": "user", "content": p}] for p in prompts],
        "sampling_params": [{"temperature": 0.0, "max_tokens": 8}] * n,
        "error": pa.array(errors or [None] * n, pa.string()),
        "__inference_error__": [e or "" for e in (errors or [None] * n)],
    })


def _engine(batch: pa.Table) -> pa.Table:
    """What an engine does: answers the rows with no error, skips the others."""
    errors = batch.column("error").to_pylist()
    prompts = batch.column("messages").to_pylist()
    text = [None if e else f"answer to {m[0]['content']}" for e, m in zip(errors, prompts)]
    return (batch.drop_columns(["messages", "sampling_params"])
            .append_column("generated_text", pa.array(text, pa.string()))
            .append_column("num_input_tokens", pa.array([None if e else 3 for e in errors],
                                                        pa.int64()))
            .append_column("num_generated_tokens", pa.array([None if e else 2 for e in errors],
                                                            pa.int64()))
            .append_column("finish_reason", pa.array([None if e else "stop" for e in errors])))


def test_repeats_reach_the_model_once_and_answers_come_back_from_the_cache(tmp_path):
    cache = str(tmp_path / "cache")
    batch = _prepared(["a", "b", "a", "c", "a", "x"], errors=[None] * 5 + ["preprocess: no"])
    sent = look_up_answers(batch, "ctx", "messages", cache, sampled=False)
    assert sent.num_rows == 4  # a, b, c once each, and the error row
    out = settle_answers(_engine(sent), cache).to_pylist()
    by_id = {row["id"]: row for row in out}
    assert sorted(by_id) == ["0", "1", "2", "3", "4", "5"]
    assert by_id["2"]["generated_text"] == by_id["4"]["generated_text"] == "answer to a"
    assert by_id["2"]["answered_by"] == "repeat" and by_id["0"]["answered_by"] is None
    assert by_id["5"]["error"] == "preprocess: no"

    again = look_up_answers(_prepared(["a", "c", "d"]), "ctx", "messages", cache, False)
    assert again.column("error").to_pylist() == [FROM_CACHE, FROM_CACHE, None]
    settled = {r["id"]: r for r in settle_answers(_engine(again), cache).to_pylist()}
    assert settled["0"]["generated_text"] == "answer to a"
    assert settled["0"]["answered_by"] == "cache" and settled["0"]["error"] is None
    assert settled["0"]["num_input_tokens"] == 3 and settled["2"]["answered_by"] is None
    # An error row is never stored.
    assert AnswerEntries(cache).look_up(sent.column(KEY).to_pylist()).keys() == {
        k for k in sent.column(KEY).to_pylist() if k}


def test_a_sampled_answer_is_cached_only_when_asked():
    batch = _prepared(["a", "a"]).set_column(2, "sampling_params", pa.array(
        [{"temperature": 0.7, "max_tokens": 8}] * 2))
    assert look_up_answers(batch, "ctx", "messages", None, False).num_rows == 2
    assert look_up_answers(batch, "ctx", "messages", None, True).num_rows == 1


def test_a_cut_short_entry_is_a_miss_named_in_the_log(tmp_path, capfd):
    AnswerEntries(str(tmp_path)).store({"k1": {"generated_text": "one"}})
    AnswerEntries(str(tmp_path)).store({"k2": {"generated_text": "two"}})
    damaged = sorted(tmp_path.glob(f"*{ENTRY_SUFFIX}"))[0]
    damaged.write_bytes(damaged.read_bytes()[:-3])
    found = AnswerEntries(str(tmp_path)).look_up(["k1", "k2"])
    assert len(found) == 1
    assert f"{damaged} is damaged" in capfd.readouterr().err
