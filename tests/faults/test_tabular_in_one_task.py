"""tabular-predict runs its stage as one function (preprocess, the model, postprocess)
and Ray Data writes each piece's results in the same task: one operator after the read,
one result file per piece, and a run killed after its first pieces resumes with
exactly the rows it had not written.

Run as users run it: ``toolkit run tabular-predict`` on a Parquet file and a model file
of their own, in its own process group with its own local Ray, killed for real.
"""

from __future__ import annotations

import re
import subprocess
import warnings
from pathlib import Path

import joblib
import numpy as np
import pyarrow.parquet as pq
from sklearn.neural_network import MLPClassifier
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler

from test_no_row_lost import killed_after_a_piece_and_resumed, toolkit_run_command
from toolkit.samples.tiny_task_models import TABLE_FEATURES, sample_table

ROWS = 20_000
BATCH = 1000  # pieces of 2 batches: 10 result files


def accounts_and_model(folder: Path) -> tuple[Path, Path]:
    """The sample accounts as Parquet, and a classifier slow enough (a wide network:
    about 0.3 s a piece here) that a kill lands between its pieces."""
    table = sample_table(ROWS, seed=3)
    pq.write_table(table, folder / "accounts.parquet")
    features = np.column_stack([table[c].to_numpy(zero_copy_only=False)
                                for c in TABLE_FEATURES])[:300]
    features = np.nan_to_num(features, nan=60_000.0)
    with warnings.catch_warnings():  # one iteration: it only has to be slow, not good
        warnings.simplefilter("ignore")
        model = make_pipeline(StandardScaler(), MLPClassifier(
            hidden_layer_sizes=(1000, 1000), max_iter=1, random_state=0)).fit(
            features, table["churned"].to_numpy()[:300])
    joblib.dump(model, folder / "model.joblib")
    return folder / "accounts.parquet", folder / "model.joblib"


def run_tabular(data: Path, model: Path, out: Path) -> subprocess.Popen:
    return toolkit_run_command(
        ["toolkit", "run", "tabular-predict", "--input", str(data), "--model", str(model),
         "--batch-size", str(BATCH), "--concurrency", "1", "--output", str(out)])


def test_a_killed_tabular_run_resumes_and_each_piece_is_one_task_with_its_write(tmp_path):
    data, model = accounts_and_model(tmp_path)
    out = tmp_path / "out"

    killed_after_a_piece_and_resumed(lambda: run_tabular(data, model, out), out, ROWS,
                                     "account_id")
    written = pq.read_table(out, columns=["account_id", "prediction", "error"])
    # One row in 50 lacks its income: an error row, without a prediction.
    assert written["prediction"].null_count == ROWS - written["error"].null_count == ROWS // 50
    # One file per piece, as it went: 2,000 rows each (a resumed run's first piece is
    # whatever its checkpoint filter left of it).
    assert len(list(out.glob("*.parquet"))) >= 10
    # After the read, one operator: the stage's three steps and the write, in the same
    # tasks (a resumed run adds Ray Data's checkpoint filter after the read).
    plans = re.findall(r"Execution plan of Dataset tabular-predict[^:]*: (.*)",
                       (out / "_logs" / "run.log").read_text())
    assert len(plans) == 2 and all(plan.replace(
        "ActorPoolMapOperator[CheckpointFilter] -> ", "").endswith(
        "StreamingRepartition[num_rows_per_block=2000,strict=False]] -> "
        "TaskPoolMapOperator[MapBatches(preprocess_model_postprocess)->Write]")
        for plan in plans), plans
