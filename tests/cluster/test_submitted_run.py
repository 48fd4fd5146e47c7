"""The submitted run as a user meets it: their project folder (data, a .gitignore, an
unrelated big folder), a two-node Ray cluster on this machine with token auth, and
`toolkit submit` with no --output; then what they read back: status, the results,
the report, and the Ray Dashboard's view of the run. The run is a cascade (a small
model first), so what a cluster run says of each model is read back too.
"""

from __future__ import annotations

import json
import os
import subprocess
import urllib.request
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from toolkit.cluster.backends.local_head import LocalHead
from toolkit.cluster.upload import RAY_UPLOAD_LIMIT_BYTES
from toolkit.run.ray.auth import auth_headers

ROWS = 300
SMALL, BIG = "sample:tiny-chat-small", "sample:tiny-chat"
ESCALATE_BELOW = 0.15  # random weights: some answers above it, some under


def toolkit(*args: str, cwd: Path, address: str, timeout: float = 600
            ) -> subprocess.CompletedProcess:
    env = {**os.environ, "RAY_ADDRESS": address}
    return subprocess.run(["toolkit", *args], cwd=cwd, capture_output=True, text=True,
                          timeout=timeout, env=env)


@pytest.fixture
def project(tmp_path: Path) -> Path:
    """A user's folder: their customers, a .gitignore, and 150 MB of something else."""
    folder = tmp_path / "my-project"
    folder.mkdir()
    made = subprocess.run(["toolkit", "samples", "customers", "--rows", str(ROWS), "-o",
                           "customers.csv"], cwd=folder, capture_output=True, text=True)
    assert made.returncode == 0, made.stderr
    (folder / ".gitignore").write_text("out/\n*.log\n")
    (folder / "recordings").mkdir()
    with open(folder / "recordings" / "session.wav", "wb") as big:
        big.truncate(150 * 10**6)  # sparse: no disk used, but it would travel
    return folder


def get_json(head: LocalHead, path: str):
    request = urllib.request.Request(f"{head.dashboard_url}{path}",
                                     headers=auth_headers(head.dashboard_url, os.environ))
    with urllib.request.urlopen(request, timeout=10) as response:
        return json.load(response)


def test_a_project_too_big_to_upload_is_refused_up_front_and_runs_once_fixed(project, two_nodes):
    address = two_nodes.dashboard_url
    submit = ["submit", "text-industry", "--smoke", "--input", "customers.csv",
              "--rows", str(ROWS), "--cascade-model", SMALL,
              "--escalate-below", str(ESCALATE_BELOW)]

    refused = toolkit(*submit, cwd=project, address=address)

    assert refused.returncode == 2, refused.stderr
    assert "HTTP" not in refused.stderr and "413" not in refused.stderr
    assert "The job would upload 143 MiB of" in refused.stderr
    assert "recordings/ (143 MiB)" in refused.stderr
    assert "add it to" in refused.stderr and "/.rayignore (a line 'recordings/')" in refused.stderr
    assert "customers.csv" not in refused.stderr  # read in place on this machine's cluster
    assert RAY_UPLOAD_LIMIT_BYTES == 100 * 2**20

    (project / ".rayignore").write_text("recordings/\n")
    done = toolkit(*submit, "--follow", cwd=project, address=address)

    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    job_id = done.stdout.strip().splitlines()[0]
    output = project / "out" / "text-industry"
    assert f"Output:  {output}" in done.stderr
    assert "Installs:" not in done.stderr  # the cluster has every package: no pip
    status = json.loads(toolkit("status", job_id, "--output", "json", cwd=project,
                                address=address).stdout)
    assert status["output"] == str(output)
    assert status["summary"]["rows_written"] == ROWS
    assert (output / "_report.html").is_file()
    rows = pq.read_table(output).to_pandas()
    assert sorted(int(i) for i in rows["Index"]) == list(range(1, ROWS + 1))

    # Who answered each row, as in a local run: the small model kept the rows it was
    # sure of; the cluster's summary, status and log count each model's rows.
    kept = rows[rows["answered_by"] == SMALL]
    escalated = rows[rows["answered_by"] == BIG]
    assert len(kept) + len(escalated) == ROWS
    assert (kept["inferred_industry_confidence"] >= ESCALATE_BELOW).all()
    assert (escalated["inferred_industry_first_confidence"] < ESCALATE_BELOW).all()
    assert status["summary"]["cascade"]["answered_by"] == {SMALL: len(kept), BIG: len(escalated)}
    assert status["summary"]["cascade"]["escalated"] == len(escalated)
    answered = f"answered by:   {SMALL} {len(kept)}, {BIG} {len(escalated)}"
    assert answered in done.stderr + done.stdout
    shown = toolkit("status", job_id, cwd=project, address=address)
    assert f"{len(escalated)} of {ROWS} rows escalated" in shown.stdout, shown.stdout
    assert answered in shown.stdout

    # The Ray Dashboard: the job carries its output and fingerprint, the Data view
    # lists the run under the job's name.
    jobs = get_json(two_nodes, "/api/jobs/")
    [job] = [j for j in jobs if j.get("submission_id") == job_id]
    assert job["metadata"]["toolkit_output"] == str(output)
    manifest = json.loads((output / "_manifest.json").read_text())
    assert job["metadata"]["toolkit_fingerprint"] == manifest["fingerprint"]
    datasets = get_json(two_nodes, f"/api/data/datasets/{job['job_id']}")["datasets"]
    assert any(d["dataset"].startswith(f"text-industry-{manifest['write_ids'][-1]}")
               for d in datasets), [d["dataset"] for d in datasets]


def test_an_input_the_upload_leaves_out_is_refused_for_a_remote_cluster(project, tmp_path):
    from toolkit.cluster.render import prepare_submission
    from toolkit.errors import SpecError
    from toolkit.spec.jobs.catalog import load_job
    from toolkit.spec.loading import load_job_spec

    (project / ".rayignore").write_text("recordings/\ncustomers.csv\n")
    job = load_job("text-industry")
    spec = load_job_spec(job, smoke=True, overrides={"data.input": str(project / "customers.csv"),
                                                      "data.output": "s3://bucket/industry"})
    with pytest.raises(SpecError, match=r"customers.csv \(\d+ KiB\) is a file on this machine, "
                                        r"and the upload leaves it out"):
        prepare_submission(job, spec, target="ray", working_dir=project)
    (project / ".rayignore").write_text("recordings/\n")
    travelling = prepare_submission(job, spec, target="ray", working_dir=project)
    assert travelling.spec.data.input == "customers.csv"  # relative to the uploaded folder
    relative = spec.model_copy(deep=True)
    relative.data.output = "out/industry"
    with pytest.raises(SpecError, match="data.output: out/industry is a relative path, and on a "
                                        "Ray cluster that is not on this machine"):
        prepare_submission(job, relative, target="ray", working_dir=project)


def test_a_cluster_installs_only_what_it_lacks(two_nodes, tmp_path, monkeypatch):
    from toolkit.cluster.backends.ray_jobs import RayJobsBackend

    monkeypatch.setenv("TOOLKIT_CACHE_DIR", str(tmp_path / "cache"))
    backend = RayJobsBackend.connect(two_nodes.dashboard_url)
    wanted = ["pydantic>=2.7,<3", "pyyaml>=6", "jinja2>=3.1"]
    assert backend.missing_requirements(wanted) == []  # the head's Python has them all
    assert backend.missing_requirements(["pydantic<2", "no-such-package-here>=1"]) == [
        "pydantic<2", "no-such-package-here>=1"]
    # A second submit to the same cluster session asks no probe job again.
    assert (tmp_path / "cache" / "cluster-packages.json").is_file()
    jobs_before = len(backend._client.list_jobs())
    assert backend.missing_requirements(wanted) == []
    assert len(backend._client.list_jobs()) == jobs_before
    assert not [job for job in backend.list() if job.name == "toolkit-probe"]
