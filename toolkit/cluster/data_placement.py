"""Where a submitted run reads its input and writes its results, as the cluster sees them.

A local ``--input`` or ``--output`` is a path on the user's machine; on a cluster it
must name the same data, and the results must land where the user (and every node)
can reach them afterwards. The rules, one per kind of target:

- **a Ray cluster on this machine** (``--address local``, or a head at a loopback
  address or this host's): its nodes see this machine's files at the same paths, so
  relative paths are made absolute here. The input is read in place: it is left out
  of the upload.
- **a remote Ray cluster**: the job runs in the uploaded project folder, so an input
  inside the project that the upload carries is named relative to it; any other
  local input can't be read there and is refused, naming the ways out (object
  storage, shared storage). A relative output would land in the job's temporary
  working dir on the head and be deleted with it, so it is refused too: results need
  a URI (``s3://``) or a path on storage every node and the user share.
- **Anyscale**: the input as for a remote cluster; a relative output goes under the
  cloud's artifact storage (``$ANYSCALE_ARTIFACT_STORAGE``, durable, readable with
  the cloud's credentials), resolved by the job on the cluster
  (:func:`resolve_output`), as Anyscale's own batch templates write there.

Nothing here imports Ray.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

from toolkit.cluster.upload import Upload, mib
from toolkit.errors import SpecError
from toolkit.run.output.location import (
    CACHE_LOCATION_HINT,
    SHARED_STORAGE_PREFIXES,
    cache_location_problem,
    is_remote_path,
    output_location_warning,
)
from toolkit.spec.models import SAMPLE_PREFIX, JobSpec

#: Anyscale sets this on every cluster: the cloud's durable storage for a job's files.
ARTIFACT_STORAGE_ENV = "ANYSCALE_ARTIFACT_STORAGE"
#: A relative output on Anyscale goes under ``$ANYSCALE_ARTIFACT_STORAGE/<this>/``.
ARTIFACT_FOLDER = "batch-llm-toolkit"
_NOT_FILES = (SAMPLE_PREFIX, "hf://")


@dataclass(frozen=True)
class Placement:
    """The spec as the cluster must see it, and what that means for the upload."""

    spec: JobSpec
    #: Upload excludes (anchored gitignore lines) for files read in place instead.
    excludes: list[str] = field(default_factory=list)
    #: What the user should know (shown before the submit).
    notes: list[str] = field(default_factory=list)
    #: What may go wrong (shown as warnings).
    warnings: list[str] = field(default_factory=list)


def local_input(spec: JobSpec) -> Path | None:
    """``data.input`` as a file or folder of this machine (absolute); None for a URI,
    generated samples or a Hugging Face dataset."""
    source = spec.data.input
    if source.startswith(_NOT_FILES) or "://" in source:
        return None
    return Path(os.path.abspath(os.path.expanduser(source)))


def place_for_this_machine(spec: JobSpec, working_dir: Path) -> Placement:
    """A cluster whose nodes share this machine's files: absolute paths, input read in place."""
    spec = spec.model_copy(deep=True)
    excludes = []
    path = local_input(spec)
    if path is not None:
        spec.data.input = str(path)
        inside = _inside(path, working_dir)
        if inside is not None:
            excludes.append(f"/{inside}")
    if not is_remote_path(spec.data.output) and not os.path.isabs(spec.data.output):
        spec.data.output = os.path.abspath(os.path.expanduser(spec.data.output))
    return Placement(spec, excludes)


def place_for_remote(spec: JobSpec, upload: Upload, target: str,
                     input_required: bool = True) -> Placement:
    """A cluster elsewhere (``target``: ``ray`` or ``anyscale``).

    Args:
        input_required: A local input must exist now (a submit); a rendered file is
            submitted later, so there a missing one is a warning.

    Raises:
        SpecError: a local input the upload doesn't carry; on Ray, a relative output;
            an answer cache in a folder only one node has.
    """
    spec = spec.model_copy(deep=True)
    notes, warnings = [], []
    path = local_input(spec)
    if path is not None and not input_required and not path.exists():
        warnings.append(f"data.input {spec.data.input} is not in {upload.working_dir} yet; "
                        "put it there before you submit the job (or read it from s3://).")
    elif path is not None:
        spec.data.input = _travelling_input(path, upload)
    output = spec.data.output
    if not is_remote_path(output) and not os.path.isabs(os.path.expanduser(output)):
        if target == "anyscale":
            relative = os.path.normpath(output).lstrip("/")
            spec.data.output = f"${ARTIFACT_STORAGE_ENV}/{ARTIFACT_FOLDER}/{relative}"
            notes.append(f"Results go to {spec.data.output} (the cloud's artifact storage: "
                         "durable; the job's log names the place).")
        else:
            raise SpecError(
                f"data.output: {output} is a relative path, and on a Ray cluster that is not "
                "on this machine it would land in the job's temporary working dir on the head "
                "node, which nobody reaches and which is deleted with the job. Nothing was "
                "sent.",
                hint="Name a place you and every node can reach: --output s3://bucket/dir "
                "(or gs://), or a path on storage every node mounts at the same place "
                "(e.g. /mnt/cluster_storage/dir).",
            )
    else:
        warning = output_location_warning(output, target)
        if warning:
            warnings.append(warning)
    if spec.cache is not None:
        problem = cache_location_problem(spec.cache.dir, spec.cache.shared, target)
        if problem is not None:
            raise SpecError(f"{problem} Nothing was sent.", hint=CACHE_LOCATION_HINT)
    return Placement(spec, [], notes, warnings)


def _travelling_input(path: Path, upload: Upload) -> str:
    """The input's path on the cluster: relative to the uploaded project folder.

    Raises:
        SpecError: the upload doesn't carry it.
    """
    if path.is_file() and upload.carries(path):
        return path.resolve().relative_to(upload.working_dir).as_posix()
    inside = _inside(path, upload.working_dir)
    if path.is_dir() and inside is not None and any(
            name == inside or name.startswith(f"{inside}/") for name in upload.files):
        return inside
    if not path.exists():
        raise SpecError(f"data.input: {path} does not exist.",
                        hint="Check the path, or try the job first with --smoke.")
    why = ("it is outside the project folder that travels with the job "
           f"({upload.working_dir})" if inside is None
           else "the upload leaves it out (.gitignore, .rayignore or an --exclude)")
    size = f" ({mib(path.stat().st_size)})" if path.is_file() else ""
    raise SpecError(
        f"data.input: {path}{size} is a file on this machine, and {why}, so the cluster "
        "can't read it. Nothing was sent.",
        hint="Put it where the cluster reads it: object storage (--input "
        "s3://bucket/file.csv; the job reads it with the cloud's credentials), storage every "
        f"node mounts ({SHARED_STORAGE_PREFIXES[0]} on Anyscale), or, if it is small, inside "
        "the project folder and not ignored.",
    )


def _inside(path: Path, folder: Path) -> str | None:
    """``path`` relative to ``folder`` (POSIX), or None when it is not inside it."""
    try:
        return path.resolve().relative_to(Path(folder).resolve()).as_posix()
    except ValueError:
        return None


def resolve_output(output: str, environ: dict[str, str] | None = None) -> str:
    """On the cluster: ``data.output`` with ``$ANYSCALE_ARTIFACT_STORAGE`` filled in.

    Raises:
        SpecError: the output names the artifact storage and the cluster has none.
    """
    environ = dict(os.environ) if environ is None else environ
    marker = f"${ARTIFACT_STORAGE_ENV}"
    if not output.startswith(marker):
        return output
    storage = environ.get(ARTIFACT_STORAGE_ENV, "").rstrip("/")
    if not storage:
        raise SpecError(
            f"data.output: {output} names Anyscale's artifact storage, but this cluster has "
            f"no {ARTIFACT_STORAGE_ENV}.",
            hint="Submit with --output s3://bucket/dir (or a path on shared storage).",
        )
    return storage + output[len(marker):]
