"""Engine restarts, as Ray's GCS counts them: the run's model workers that died and
were started again.

Ray Data runs every model stage as a pool of actors (its ``MapWorker``); Ray restarts
one that died up to the stage's ``max_restarts`` and keeps the count on the actor.
The driver asks Ray's state API for its own job's actors, so nothing runs on the
workers for it.
"""

from __future__ import annotations

#: Ray Data's actor-pool worker: the class every model stage's workers are.
POOL_WORKER_CLASS = "MapWorker"


def engine_restarts() -> int | None:
    """Restarts of this job's actor-pool workers so far; None where Ray's state API
    can't tell (a Ray started without its dashboard)."""
    try:
        import ray
        from ray.util.state import list_actors

        job_id = ray.get_runtime_context().get_job_id()
        actors = list_actors(filters=[("job_id", "=", job_id)], detail=True,
                             limit=10_000, raise_on_missing_output=False, timeout=10)
    except Exception:  # noqa: BLE001 - unknown: nothing recorded
        return None
    return sum(actor.num_restarts or 0 for actor in actors
               if POOL_WORKER_CLASS in (actor.class_name or ""))
