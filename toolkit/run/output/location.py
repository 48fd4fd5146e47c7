"""Where a run's results land, as the nodes that write them see ``data.output``.

Pure string checks (no Ray, no filesystem access), shared by ``toolkit run`` against
a cluster (:mod:`toolkit.run.ray.connection`) and by rendering and submitting jobs
(:mod:`toolkit.cluster.render` re-exports these names).

Example:
    >>> output_location_warning("s3://bucket/out", "ray") is None
    True
"""

from __future__ import annotations

import os

#: Storage every node of an Anyscale cluster shares.
SHARED_STORAGE_PREFIXES: tuple[str, ...] = (
    "/mnt/cluster_storage",
    "/mnt/shared_storage",
    "/mnt/user_storage",
)

_SHARED_SUGGESTION = "--output s3://<bucket>/<dir> or a path on storage every node shares"


def is_remote_path(output: str) -> bool:
    return "://" in output


def output_location_warning(output: str, target: str) -> str | None:
    """Warn when results would land on one node's disk.

    Args:
        output: ``data.output``.
        target: ``"anyscale"`` (rendered file or Anyscale backend), ``"ray"`` (a
            job submitted to a Ray cluster that is not on this machine) or
            ``"run"`` (``toolkit run`` driving such a cluster from here: a
            relative path is made absolute here, and each node writes to that
            path on its own disk).
    """
    if is_remote_path(output):
        return None
    if target == "anyscale" and output.startswith(SHARED_STORAGE_PREFIXES):
        return None
    kind = "a relative path" if not os.path.isabs(output) else "a local path"
    if target == "anyscale":
        where = (
            "on Anyscale it would be written to the head node's disk, which worker "
            "nodes can't see and which is lost when the cluster shuts down"
        )
        suggestion = "--output /mnt/cluster_storage/<dir> (shared by every node) or s3://<bucket>/<dir>"
    elif target == "run":
        resolved = os.path.abspath(os.path.expanduser(output))
        where = (
            (f"it resolves to {resolved} here, and " if kind == "a relative path" else "")
            + f"the Ray cluster's nodes write the results to {resolved} on their own "
            "disks, not on this machine"
        )
        suggestion = _SHARED_SUGGESTION
    else:
        where = (
            "on a remote Ray cluster it is written on the cluster's nodes"
            + (" inside the job's temporary working dir" if kind == "a relative path" else "")
            + ", not on this machine"
        )
        suggestion = _SHARED_SUGGESTION
    return f"data.output {output!r} is {kind}: {where}. Use {suggestion}."


def cache_location_problem(cache_dir: str, shared: bool, target: str) -> str | None:
    """Why an answer cache at ``cache_dir`` can't serve a run on a cluster that is not on
    this machine (``target`` as :func:`output_location_warning`'s), or None: object
    storage, a folder the user says every node mounts (``shared``), or Anyscale's
    shared storage."""
    if is_remote_path(cache_dir) or shared:
        return None
    if target == "anyscale" and cache_dir.startswith(SHARED_STORAGE_PREFIXES):
        return None
    kind = "a relative path" if not os.path.isabs(os.path.expanduser(cache_dir)) else "a local path"
    return (f"cache.dir {cache_dir!r} is {kind}: on a cluster that is not on this machine "
            "each node would keep the answers it stored on its own disk, so a rerun finds "
            "only those of the node that happens to run each row, and they go with the node.")


#: What to do instead, for :func:`cache_location_problem`.
CACHE_LOCATION_HINT = ("Keep the answers where every node reads and writes them: --cache "
                       "s3://<bucket>/<dir> (or gs://), or a folder every node mounts at the "
                       "same path with --set cache.shared=true; or run without --cache.")
