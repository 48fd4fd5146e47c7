"""text-classify and embed a block at a time: the same rows as through Python rows.

Their batch hooks read the text column and the engine's outputs in Arrow; a text column
Arrow would print otherwise than Python (floats) goes row by row, so every row reads as
it did. The model in between is the real transformers stage on the tiny sample models.
"""

from __future__ import annotations

from typing import Any

import pyarrow as pa
import pytest

from toolkit.engines.batch_stage import through_numpy
from toolkit.engines.transformers.text_stages import TextClassifier, TextEncoder
from toolkit.run.row_steps import prepare_batch, prepare_table
from toolkit.run.row_steps import finish_batch, output_schema
from toolkit.run.task_rows import prepare_task_row
from toolkit.samples.tiny_task_models import tiny_task_model_path
from toolkit.spec.jobs.catalog import load_job


@pytest.fixture(scope="module", params=[("text-classify", TextClassifier, "tiny-classifier"),
                                        ("embed", TextEncoder, "tiny-encoder")],
                ids=["text-classify", "embed"])
def job_and_model(request):
    name, stage, model = request.param
    return load_job(name), stage(str(tiny_task_model_path(model)), {})


def both_ways(job: Any, model: Any, texts: pa.Array) -> tuple[list[dict], list[dict]]:
    """A block through the batch hooks and through the row hooks, the same model
    between: the output rows of each, as the pipeline writes them."""
    stage = job.main_stage
    options = job.spec_model.model_fields["options"].annotation()
    table = pa.table({"review_id": [f"r-{i}" for i in range(len(texts))], "review": texts})
    results = stage.result_columns(options)
    finish = {"postprocess": stage.postprocess, "options": options,
              "schema": output_schema(table.schema, results),
              "result_columns": list(results), "engine_output": next(iter(results))}
    by_batch = prepare_table(table, stage.preprocess_batch, options, ("prompt",))
    by_row = prepare_batch(table, prepare_task_row, preprocess=stage.preprocess,
                           options=options, input_columns=("prompt",))
    return (finish_batch(through_numpy(by_batch, model), postprocess_batch=stage.postprocess_batch,
                         **finish).to_pylist(),
            finish_batch(through_numpy(by_row, model), **finish).to_pylist())


def test_texts_blank_and_missing_read_the_same_a_block_at_a_time(job_and_model):
    by_batch, by_row = both_ways(*job_and_model,
                                 pa.array(["Great kettle.", "  ", None, "Broke in a week."]))
    assert by_batch == by_row
    assert [row["error"] for row in by_batch] == [
        None, "preprocess: column 'review' is empty", "preprocess: column 'review' is empty",
        None]


@pytest.mark.parametrize("texts", [pa.array([7, 42], pa.int64()), pa.array([1.0, 2.5])],
                         ids=["whole numbers", "decimals, row by row"])
def test_numbers_as_texts_read_as_python_prints_them(job_and_model, texts):
    by_batch, by_row = both_ways(*job_and_model, texts)
    assert by_batch == by_row and all(row["error"] is None for row in by_batch)
