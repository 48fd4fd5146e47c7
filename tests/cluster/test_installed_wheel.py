"""The toolkit as a new user meets it: a wheel installed non-editable, run from their own folder.

The wheel is built from this checkout and installed with ``--no-deps`` into a fresh
virtualenv; its dependencies come from the test environment through a ``.pth``
entry (which, unlike a site dir, runs no editable-install hooks), so nothing of the
checkout is importable there. Every command runs through the real ``toolkit``
script in a subprocess, from a temporary project folder, and the tests read the
files it writes. (CI also installs the wheel with its dependencies from scratch.)
"""

from __future__ import annotations

import csv
import os
import shutil
import subprocess
import sys
import sysconfig
import zipfile
from dataclasses import dataclass
from pathlib import Path

import pyarrow.parquet as pq
import pytest

REPO = Path(__file__).resolve().parents[2]
CHOICES = ["positive", "negative", "neutral"]

SENTIMENT_JOB = """\
job: sentiment
description: Classify the sentiment of a product review.
prompt:
  system: You classify the sentiment of product reviews. Answer with one word.
  user: "Review: {{ review }}"
output:
  column: sentiment
  choice: [positive, negative, neutral]
data:
  id_column: review_id
"""


@dataclass(frozen=True)
class Installed:
    venv: Path
    package: Path  # the installed toolkit package directory
    env: dict[str, str]

    def toolkit(self, *args: str, cwd: Path, timeout: float = 300) -> subprocess.CompletedProcess:
        return subprocess.run([str(self.venv / "bin" / "toolkit"), *args], cwd=cwd, env=self.env,
                              capture_output=True, text=True, timeout=timeout, check=False)


def _snapshot(directory: Path) -> dict[str, tuple[int, int]]:
    return {str(p.relative_to(directory)): (p.stat().st_size, p.stat().st_mtime_ns)
            for p in directory.rglob("*")}


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Installed:
    root = tmp_path_factory.mktemp("wheel")
    # Built from a copy: setuptools leaves build/ and *.egg-info beside the sources.
    source = root / "source"
    for name in ("toolkit", "jobs", "templates"):
        shutil.copytree(REPO / name, source / name, ignore=shutil.ignore_patterns("__pycache__"))
    for name in ("pyproject.toml", "README.md"):
        shutil.copy2(REPO / name, source / name)
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--quiet", "-w",
                    str(root / "dist"), str(source)], check=True, timeout=600)
    [wheel] = (root / "dist").glob("batch_llm_toolkit-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    assert "toolkit/builtin/templates/text-industry.yaml" in names
    assert "toolkit/builtin/jobs/date_reformat.py" in names
    venv = root / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=300)
    python = venv / "bin" / "python"
    subprocess.run([str(python), "-m", "pip", "install", "--quiet", "--no-deps", "--no-index",
                    str(wheel)], check=True, timeout=300)
    site = Path(subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True, text=True, check=True).stdout.strip())
    (site / "test_dependencies.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env["PATH"] = f"{venv / 'bin'}{os.pathsep}{env.get('PATH', '')}"
    found = subprocess.run([str(python), "-c", "import toolkit; print(toolkit.__file__)"],
                           env=env, capture_output=True, text=True, check=True, cwd=root)
    package = Path(found.stdout.strip()).parent
    assert package.parent == site, f"toolkit imported from {package}, not the wheel"
    return Installed(venv=venv, package=package, env=env)


@pytest.fixture
def project(tmp_path: Path) -> Path:
    """A user's folder with their own reviews CSV, far from the checkout."""
    folder = tmp_path / "my-project"
    folder.mkdir()
    with (folder / "reviews.csv").open("w", newline="") as stream:
        writer = csv.writer(stream)
        writer.writerow(["review_id", "review", "stars"])
        for i in range(40):
            writer.writerow([f"r{i:03d}", f"Review number {i}: {'great' if i % 2 else 'awful'}.",
                             str(i % 5 + 1)])
    (folder / "sentiment.yaml").write_text(SENTIMENT_JOB)
    return folder


def test_builtin_jobs_are_listed_and_run_from_any_folder(installed: Installed, project: Path):
    listed = installed.toolkit("jobs", cwd=project)
    assert listed.returncode == 0, listed.stderr
    names = [line.split()[0] for line in listed.stdout.splitlines()]
    assert names == ["date-reformat", "embed", "image-classify", "openai-batch",
                     "review-triage", "tabular-predict", "text-classify", "text-industry",
                     "vlm-caption",
                     "./sentiment.yaml"]

    before = _snapshot(installed.package)
    done = installed.toolkit("run", "text-industry", "--rows", "100", "--smoke", cwd=project)
    assert done.returncode == 0, done.stderr[-3000:]
    written = pq.read_table(project / "out" / "text-industry")
    assert written.num_rows == 100
    assert written["error"].null_count == 100
    assert _snapshot(installed.package) == before  # the install dir is never written to


def test_a_yaml_job_runs_on_the_users_csv(installed: Installed, project: Path):
    done = installed.toolkit("run", "./sentiment.yaml", "--input", "reviews.csv", "--smoke",
                             cwd=project)
    assert done.returncode == 0, done.stderr[-3000:]
    written = pq.read_table(project / "out" / "sentiment").to_pylist()
    source = list(csv.DictReader((project / "reviews.csv").open()))
    assert sorted(row["review_id"] for row in written) == [row["review_id"] for row in source]
    by_id = {row["review_id"]: row for row in written}
    for row in source:
        out = by_id[row["review_id"]]
        assert (out["review"], out["stars"]) == (row["review"], row["stars"])
        assert out["sentiment"] in CHOICES and out["error"] is None


def test_a_template_naming_a_missing_column_fails_before_any_model_loads(
        installed: Installed, project: Path):
    (project / "typo.yaml").write_text(SENTIMENT_JOB.replace("{{ review }}", "{{ review_text }}"))
    done = installed.toolkit("run", "./typo.yaml", "--input", "reviews.csv", "--smoke",
                             cwd=project)
    assert done.returncode == 2
    assert ("reviews.csv has no column 'review_text'. Available columns: review_id, review, "
            "stars") in done.stderr
    assert "Traceback" not in done.stderr

    (project / "broken.yaml").write_text(SENTIMENT_JOB.replace(
        '"Review: {{ review }}"', '"Review:\\n{{ review }"'))
    done = installed.toolkit("show", "./broken.yaml", cwd=project)
    assert done.returncode == 2
    assert "prompt.user: template syntax error at line 2" in done.stderr


def test_new_jobs_run_as_generated(installed: Installed, project: Path):
    for name, extra in (("review-sentiment", []), ("review-words", ["--python"])):
        made = installed.toolkit("new", name, *extra, cwd=project)
        assert made.returncode == 0, made.stderr
        done = installed.toolkit("run", name, "--smoke", cwd=project)
        assert done.returncode == 0, done.stderr[-3000:]
        written = pq.read_table(project / "out" / name)
        assert written.num_rows == 8
        assert set(written["sentiment"].to_pylist()) <= set(CHOICES)
    assert pq.read_table(project / "out" / "review-words")["words"].type == "int64"
    listed = installed.toolkit("jobs", cwd=project).stdout
    assert "./review-sentiment.yaml" in listed and "./review_words.py" in listed


def test_submit_ships_the_users_project_and_the_toolkit(installed: Installed, project: Path,
                                                       ray_head):
    before = _snapshot(installed.package)
    done = installed.toolkit("submit", "./sentiment.yaml", "--input", "reviews.csv", "--smoke",
                             "--address", "local", "--follow", "--output", "results",
                             cwd=project, timeout=600)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    written = pq.read_table(project / "results")
    assert written.num_rows == 40 and written["error"].null_count == 40
    # The staged toolkit is the wheel's record: its report template travelled too.
    assert (project / "results" / "_report.html").is_file()
    staged = project / ".toolkit" / "py_modules" / "toolkit"
    assert (staged / "run" / "output" / "report" / "report.html.j2").is_file()
    assert (staged / "builtin" / "templates" / "text-industry.yaml").is_file()
    # A Python job travels as a copy of its file, staged beside its spec.
    assert installed.toolkit("new", "review-words", "--python", cwd=project).returncode == 0
    done = installed.toolkit("submit", "review-words", "--smoke", "--address", "local",
                             "--follow", "--output", "words", cwd=project, timeout=600)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert pq.read_table(project / "words").num_rows == 8
    assert list((project / ".toolkit" / "specs").glob("review-words-*/job_code.py"))
    assert _snapshot(installed.package) == before

    rendered = installed.toolkit("render", "./sentiment.yaml", "--input", "reviews.csv",
                                 "-o", "job.yaml", cwd=project)
    assert rendered.returncode == 0, rendered.stderr
    from anyscale.job.models import JobConfig

    config = JobConfig.from_yaml(str(project / "job.yaml"))
    assert config.working_dir == "."
    assert config.py_modules == [".toolkit/py_modules/toolkit"]
    assert (project / ".toolkit/py_modules/toolkit/cli/entrypoint.py").is_file()
    text = (project / "job.yaml").read_text()
    assert "site-packages" not in text and str(REPO) not in text
