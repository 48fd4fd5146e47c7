"""A submit from a folder holding a ``toolkit`` package of its own (the toolkit's
checkout, or a user's folder of that name) runs the staged toolkit, not that package.

On the cluster the working dir is first on the import path, so the checkout's
``toolkit/`` used to be imported instead of the staged copy, and a checkout older than
the installed toolkit failed with ``No module named 'toolkit.cluster.job_progress'``.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pyarrow.parquet as pq

from toolkit.cluster.backends.local_head import LocalHead
from toolkit.cluster.render import prepare_submission
from toolkit.cluster.staging import shadowing_toolkit
from toolkit.cluster.upload import measure_upload
from toolkit.spec.jobs.catalog import load_job, package_dir
from toolkit.spec.loading import load_job_spec

#: Not the toolkit: importing it fails, as a stale checkout's missing module does.
FAKE_TOOLKIT = 'raise ImportError("the working dir\'s toolkit/ was imported, not the staged one")\n'


def _fake_checkout(folder: Path) -> Path:
    (folder / "toolkit").mkdir()
    (folder / "toolkit" / "__init__.py").write_text(FAKE_TOOLKIT)
    return folder


def test_the_toolkits_own_checkout_is_left_out_of_its_upload() -> None:
    assert shadowing_toolkit(package_dir().parent) == ["/toolkit/"]


def test_a_top_level_toolkit_package_is_left_out_and_said(tmp_path: Path) -> None:
    _fake_checkout(tmp_path)
    (tmp_path / "data" / "toolkit").mkdir(parents=True)  # deeper down: imported by no one
    (tmp_path / "data" / "toolkit" / "__init__.py").write_text("")
    job = load_job("text-industry")
    spec = load_job_spec(job, overrides={"data.output": "s3://bucket/out"}, smoke=True)

    submission = prepare_submission(job, spec, target="ray", working_dir=tmp_path)

    assert "/toolkit/" in submission.request.excludes
    upload = measure_upload(tmp_path, submission.request.excludes)
    assert "toolkit/__init__.py" not in upload.files
    assert "data/toolkit/__init__.py" in upload.files
    assert submission.notes[-1] == (
        "Leaving toolkit out of the upload: on the cluster it would be imported instead of "
        "the toolkit staged in .toolkit/py_modules/ (the working dir comes first on the "
        "import path).")


def test_a_folder_named_toolkit_without_a_package_travels(tmp_path: Path) -> None:
    (tmp_path / "toolkit").mkdir()
    (tmp_path / "toolkit" / "notes.txt").write_text("data, not code")
    job = load_job("text-industry")
    spec = load_job_spec(job, overrides={"data.output": "s3://bucket/out"}, smoke=True)

    submission = prepare_submission(job, spec, target="ray", working_dir=tmp_path)

    assert not any("toolkit" in note for note in submission.notes)
    assert "/toolkit/" not in submission.request.excludes


def test_submit_from_a_folder_with_its_own_toolkit_runs_the_staged_one(
        ray_head: LocalHead, tmp_path: Path) -> None:
    _fake_checkout(tmp_path)
    done = subprocess.run(
        ["toolkit", "submit", "text-industry", "--smoke", "--rows", "20", "--output", "out",
         "--address", "local", "--follow"],
        cwd=tmp_path, capture_output=True, text=True, timeout=600, check=False)
    assert done.returncode == 0, done.stderr[-3000:] + done.stdout[-3000:]
    assert "Leaving toolkit out of the upload" in done.stderr
    assert pq.read_table(tmp_path / "out").num_rows == 20
    assert (tmp_path / "toolkit" / "__init__.py").read_text() == FAKE_TOOLKIT
