"""Noticing the cluster's nodes being taken back while a run goes (spot preemption).

A spot node is taken back with a notice: Ray's autoscaler (v2), KubeRay and Anyscale
drain it through the GCS ``DrainNode`` call with reason ``PREEMPTION`` and a deadline
(``ray drain-node`` is the same call). From then on Ray schedules no new task or
actor there; what runs there is lost when the node goes, and Ray Data redoes the
blocks it had in flight and restarts its engine actors elsewhere (within
``max_restarts``). Nothing in that tells the user, so while a run goes
:func:`watching_nodes` looks at Ray's node state every few seconds from the driver
(no actor of its own, as the progress sources): the nodes being drained
(``get_draining_nodes``: id and deadline) and the nodes that died of a drain (the
GCS's death info: ``AUTOSCALER_DRAIN_PREEMPTED``, ``AUTOSCALER_DRAIN_IDLE``). Each
node is told once, and the progress line and the summary count them.

Ray keeps a drain's reason to itself until the node dies (the GCS answers draining
nodes with their deadline only), so a node still draining is named by its deadline:
a deadline is a preemption notice (Ray refuses an idle-termination drain of a node
that runs work, and those carry none). A node killed outright after its notice dies
``AUTOSCALER_DRAIN_PREEMPTED``; one stopped gracefully (SIGTERM) dies "expected",
and keeps the reason its notice gave.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, replace
from typing import Any

from toolkit.run.progress.model import polling

#: Seconds between two looks at the cluster's nodes (Ray Train's preemption watcher
#: looks as often; a spot notice gives 30 s to 2 min).
LOOK_INTERVAL_S = 5.0

#: ``ray.rpc.NodeDeathInfo.Reason`` values that mean the node was drained away.
_DRAIN_DEATHS = {3: "preemption", 4: "idle termination"}


@dataclass(frozen=True)
class NodeDrain:
    """A node of the cluster being taken back, or taken back, during the run.

    Attributes:
        node_id: Ray's node id (hex).
        node_ip: The node's address.
        reason: ``preemption``, ``idle termination``, or None where Ray has not said.
        deadline: When the node goes (seconds since the epoch); None: no deadline.
        message: The drain's own words (``ray drain-node --reason-message``), once dead.
        gone: The node has died.
    """

    node_id: str
    node_ip: str
    reason: str | None = None
    deadline: float | None = None
    message: str | None = None
    gone: bool = False

    def describe(self, now: float | None = None) -> str:
        """``node 10.0.0.7 (3f2a9c1e) is being taken back (preemption), in 28 s``."""
        now = time.time() if now is None else now
        what = "was taken back" if self.gone else "is being taken back"
        reason = f" ({self.reason})" if self.reason else ""
        text = f"node {self.node_ip} ({self.node_id[:8]}) {what}{reason}"
        if self.deadline is not None and not self.gone:
            text += f", in {max(0, round(self.deadline - now))} s"
        if self.message:
            text += f": {self.message}"
        return text

    def as_json(self) -> dict[str, Any]:
        """The summary's entry (``nodes_taken_back``)."""
        return {"node_id": self.node_id, "node_ip": self.node_ip, "reason": self.reason,
                "deadline": self.deadline, "message": self.message, "gone": self.gone}


def drains_seen(draining: Mapping[str, int], nodes: Iterable[Mapping[str, Any]],
                known: Mapping[str, NodeDrain], ignored: set[str]) -> dict[str, NodeDrain]:
    """The drains one look at Ray shows, merged into those ``known`` from earlier looks.

    Args:
        draining: ``get_draining_nodes()``: node id -> deadline in ms (0: none).
        nodes: ``ray.nodes()`` entries (``NodeID``, ``Alive``, ``NodeManagerAddress``,
            ``DeathReason``, ``DeathReasonMessage``).
        known: The drains seen so far, by node id.
        ignored: Nodes dead before the run began: their deaths are not this run's.
    """
    seen = dict(known)
    for node in nodes:
        node_id = str(node.get("NodeID", ""))
        if not node_id or node_id in ignored:
            continue
        drain = seen.get(node_id)
        ip = str(node.get("NodeManagerAddress") or "?")
        if node.get("Alive"):
            if node_id in draining and drain is None:
                deadline_ms = int(draining[node_id] or 0)
                seen[node_id] = NodeDrain(
                    node_id, ip, "preemption" if deadline_ms else None,
                    deadline_ms / 1000 if deadline_ms else None)
            continue
        died_of = _DRAIN_DEATHS.get(int(node.get("DeathReason") or 0))
        if died_of is not None:
            base = drain or NodeDrain(node_id, ip)
            seen[node_id] = replace(base, reason=died_of, gone=True,
                                    message=str(node.get("DeathReasonMessage") or "") or None)
        elif drain is not None and not drain.gone:
            seen[node_id] = replace(drain, gone=True)
    return seen


def taken_back_text(drains: Iterable[NodeDrain]) -> str | None:
    """``1 node taken back (preemption)``, ``2 nodes taken back (preemption, idle
    termination)``; None for none."""
    drains = list(drains)
    if not drains:
        return None
    reasons = sorted({d.reason for d in drains if d.reason})
    why = f" ({', '.join(reasons)})" if reasons else ""
    return f"{len(drains)} node{'' if len(drains) == 1 else 's'} taken back{why}"


def _ray_look() -> tuple[dict[str, int], list[dict[str, Any]]]:
    """What Ray says now: the draining nodes' deadlines and every node's entry."""
    import ray
    from ray._private.state import state

    # The GCS's own list (Ray Train's preemption watcher reads the same).
    return dict(state.get_draining_nodes()), list(ray.nodes())


class NodeWatch:
    """The drains seen so far; :meth:`look` adds what Ray says now.

    Args:
        on_drain: Told (from the watching thread) each drain once, when first seen,
            and once more when its node is gone.
        look_at_ray: Ray's draining nodes and node entries (default: the joined Ray's).
    """

    def __init__(self, on_drain: Callable[[NodeDrain], None] | None = None,
                 look_at_ray: Callable[[], tuple[dict[str, int], list[dict[str, Any]]]] = _ray_look
                 ) -> None:
        self._on_drain = on_drain
        self._look_at_ray = look_at_ray
        self._seen: dict[str, NodeDrain] = {}
        self._ignored: set[str] | None = None

    @property
    def drains(self) -> list[NodeDrain]:
        return list(self._seen.values())

    def text(self) -> str | None:
        """What the progress line says of the nodes taken back so far."""
        return taken_back_text(self._seen.values())

    def look(self) -> None:
        draining, nodes = self._look_at_ray()
        if self._ignored is None:  # the first look: deaths before the run are not its own
            self._ignored = {str(n.get("NodeID")) for n in nodes if not n.get("Alive")}
        seen = drains_seen(draining, nodes, self._seen, self._ignored)
        for node_id, drain in seen.items():
            before = self._seen.get(node_id)
            if before is None or (drain.gone and not before.gone):
                self._seen[node_id] = drain
                if self._on_drain is not None:
                    self._on_drain(drain)
            else:
                self._seen[node_id] = drain


def watching_nodes(on_drain: Callable[[NodeDrain], None] | None = None,
                   interval_s: float = LOOK_INTERVAL_S) -> tuple[NodeWatch, Callable[[], None]]:
    """Look at the joined Ray's nodes every ``interval_s`` in a daemon thread; the
    watch, and ``stop()``. A look that fails (the GCS busy) is skipped."""
    watch = NodeWatch(on_drain)
    return watch, polling(watch.look, interval_s, join_timeout_s=10.0)
