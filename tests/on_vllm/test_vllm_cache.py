"""The answer cache on vLLM: a prompt repeated in a run reaches vLLM once, and a rerun
is answered from the cache with the first run's answers (Ray Data LLM's stages rewrite
the rows' messages on the way: the repeats still come back whole)."""

from __future__ import annotations

import pyarrow.csv as pacsv
import pyarrow.parquet as pq
from vllm_cli import succeeded, toolkit_run

from toolkit.samples.customers import customers_batch
from toolkit.samples.tiny_model import tiny_chat_model_path

ROWS, REPEATED = 60, "Acme Corp"


def test_repeats_reach_vllm_once_and_a_rerun_comes_from_the_cache(tmp_path):
    table = customers_batch(0, ROWS, seed=3)
    companies = [REPEATED if i % 3 == 0 else c
                 for i, c in enumerate(table.column("Company").to_pylist())]
    table = table.set_column(table.schema.get_field_index("Company"), "Company", [companies])
    pacsv.write_csv(table, tmp_path / "rows.csv")
    flags = ["--engine", "vllm", "--accelerator", "none", "--concurrency", "1",
             "--model", str(tiny_chat_model_path()), "--input", str(tmp_path / "rows.csv"),
             "--partitions", "1", "--cache", str(tmp_path / "answers")]

    succeeded(toolkit_run("text-industry", *flags, "--output", str(tmp_path / "first")))
    first = pq.read_table(tmp_path / "first").to_pandas().set_index("Index")
    assert len(first) == ROWS and first.index.is_unique
    # 20 rows ask the same: the first reaches vLLM, the other 19 repeat its answer.
    repeated = first[first["Company"] == REPEATED]
    assert (repeated["answered_by"] == "repeat").sum() == len(repeated) - 1
    assert repeated["inferred_industry"].nunique() == 1
    assert first["answered_by"].isna().sum() == ROWS - (len(repeated) - 1)

    succeeded(toolkit_run("text-industry", *flags, "--output", str(tmp_path / "second")))
    second = pq.read_table(tmp_path / "second").to_pandas().set_index("Index")
    assert (second["answered_by"] == "cache").all()
    assert second["inferred_industry"].loc[first.index].tolist() == \
        first["inferred_industry"].tolist()
