"""Whether the cluster can ever hold what a run asks for: before it starts, and while it runs.

A model stage whose workers ask for something no node has (a GPU type the cluster
lacks, more CPUs than any node) or a fixed pool larger than the whole cluster never
starts: Ray queues the request, Ray Data waits for the pool, and the run sits at 0
rows while Ray writes why to a log nobody reads. Two checks close that gap:

- :func:`check_cluster_fits`, before the pipeline starts: what each model stage asks
  for (:func:`run_requests`) is placed on the nodes' total resources
  (:func:`shortfalls`); on a cluster that can't add nodes, what doesn't fit is
  refused with exit code 3, naming the stage, the request, what the cluster offers
  and the flag to change.
- :class:`ResourceWatch`, while it runs: Ray's own view of the requests it can't
  place (:func:`read_cluster_state`: the GCS's pending requests and, where an
  autoscaler reports them, the ones no node type can fulfil). A request of this run
  that can never be met is said at once and stops the run after
  ``compute.resource_wait_s``; one the autoscaler is adding a node for only waits.

Whether a cluster can grow is read from Ray: an autoscaler (v2) that reports its
state to the GCS can; a cluster whose monitor runs Ray's read-only provider (``ray
start`` by hand, a Ray started by ``toolkit run``) can't; anything else is unknown
and is never refused up front.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import math
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from toolkit.errors import ResourcesUnavailableError
from toolkit.run.progress.model import Clock, format_duration
from toolkit.run.run_stop import StopOutcome, stopping_when

if TYPE_CHECKING:
    from toolkit.spec.run_settings import EngineStages

#: CPUs a run keeps for Ray Data's reads, the job's own CPU steps and writes: tasks
#: of one CPU each, which can't run while model workers hold every CPU.
READ_WRITE_CPUS = 1.0
#: Where a ``ray start`` cluster's monitor writes its report (Ray's
#: ``ray_constants.DEBUG_AUTOSCALING_STATUS``; read through the public KV API).
AUTOSCALING_STATUS_KEY = "__autoscaling_status"
#: Ray's name for the node type of a node its read-only provider found (``ray
#: start`` by hand): such a cluster never adds a node.
READONLY_NODE_TYPE_PREFIX = "node_"
#: Resources every node has that no stage of ours asks for.
_BOOKKEEPING = ("memory", "object_store_memory")
_ACCELERATOR = "accelerator_type:"

Resources = Mapping[str, float]


@dataclass(frozen=True)
class WorkerRequest:
    """What one part of a run asks Ray for: ``workers`` of ``resources`` each, all
    placed before its first row. ``stage`` is the spec section (``engine``,
    ``stages.NAME``) or a part of the pipeline (``reading and writing``)."""

    stage: str
    resources: dict[str, float]
    workers: int = 1
    is_model_stage: bool = True

    def matches(self, bundle: Resources) -> bool:
        """Whether a request Ray reports (an actor's or a placement group bundle's
        resources) is one of this stage's workers."""
        # Ray may leave the GPU type out of a placement group's bundles.
        keys = {k for k in (*bundle, *self.resources) if k not in _BOOKKEEPING
                and not (k.startswith(_ACCELERATOR) and k not in bundle)}
        return all(math.isclose(bundle.get(k, 0.0), self.resources.get(k, 0.0), abs_tol=1e-6)
                   for k in keys)


def run_requests(stages: EngineStages) -> list[WorkerRequest]:
    """What a run's ``stages`` ask the cluster for: each model stage's workers (as its
    engine kind declares them), the engine's own CPU stages beside them, and one CPU for
    reading and writing."""
    requests = []
    for name, engine in stages.model_stages:
        requests.append(WorkerRequest(name, dict(engine.worker_resources),
                                      engine.workers_at_start))
        if engine.helper_cpus:
            requests.append(WorkerRequest(f"{name}'s CPU stages", {"CPU": engine.helper_cpus},
                                          is_model_stage=False))
    requests.append(WorkerRequest("reading and writing", {"CPU": READ_WRITE_CPUS},
                                  is_model_stage=False))
    return requests


@dataclass(frozen=True)
class ClusterState:
    """Ray's view of the cluster: each alive node's total resources, whether it can
    add nodes (None: can't tell), the resource bundles waiting to be placed, and those
    an autoscaler says no node type can fulfil."""

    nodes: tuple[dict[str, float], ...]
    can_grow: bool | None
    pending: tuple[dict[str, float], ...] = ()
    infeasible: tuple[dict[str, float], ...] = ()
    #: A ``ray start`` monitor runs but hasn't reported its autoscaler yet (a head
    #: started seconds ago): ``can_grow`` is known a few seconds later.
    settling: bool = False


@dataclass(frozen=True)
class Shortfall:
    """A request the nodes can't hold: ``placed`` of its workers fit (0 and
    ``fits_no_node``: not even one worker fits any node)."""

    request: WorkerRequest
    placed: int
    fits_no_node: bool


# -- placing requests on nodes -------------------------------------------------------


def fits(resources: Resources, node: Resources) -> bool:
    return all(node.get(k, 0.0) + 1e-9 >= v for k, v in resources.items() if v > 0)


def _placed(order: Sequence[WorkerRequest], nodes: Sequence[Resources]) -> dict[int, int]:
    """Workers of each request (by ``id``) placed in ``order``, each on the node it
    leaves least room on (best fit): a small piece never takes the one node a large
    worker needs while a smaller node can hold it."""
    free = [dict(node) for node in nodes]
    placed: dict[int, int] = {}
    for request in order:
        room = [n for n in free if fits(request.resources, n)]
        if room:
            node = min(room, key=lambda n: sum(n.get(k, 0.0) - v
                                               for k, v in request.resources.items()))
            for k, v in request.resources.items():
                node[k] = node.get(k, 0.0) - v
            placed[id(request)] = placed.get(id(request), 0) + 1
    return placed


def shortfalls(requests: Sequence[WorkerRequest], nodes: Iterable[Resources]) -> list[Shortfall]:
    """The requests that ``nodes`` (total resources) can't hold all at once.

    Workers are placed largest first (GPU workers, then by CPUs), each where it leaves
    least room (the order of Ray's node list says nothing). Where they don't all fit,
    the pipeline's own CPUs are placed first, so what is named short is a model
    stage's pool (which the user sizes).
    """
    nodes = list(nodes)
    workers = [r for r in requests for _ in range(r.workers)]
    by_size = sorted(workers, key=lambda r: (-r.resources.get("GPU", 0.0),
                                             -r.resources.get("CPU", 0.0)))
    if sum(_placed(by_size, nodes).values()) == len(workers):
        return []
    placed = _placed(sorted(by_size, key=lambda r: r.is_model_stage), nodes)
    return [Shortfall(r, placed.get(id(r), 0), not any(fits(r.resources, n) for n in nodes))
            for r in requests if placed.get(id(r), 0) < r.workers]


# -- saying it -------------------------------------------------------------------------


def _gpu_type(resources: Resources) -> str | None:
    """The GPU type a request names (Ray's ``accelerator_type:L4`` -> ``L4``)."""
    return next((k[len(_ACCELERATOR):] for k in resources if k.startswith(_ACCELERATOR)), None)


def _gpu_types(nodes: Iterable[Resources]) -> list[str]:
    """The GPU types the nodes declare."""
    return sorted({k[len(_ACCELERATOR):] for n in nodes for k in n if k.startswith(_ACCELERATOR)})


def _a(word: str) -> str:
    """``an L4``, ``a T4``: the article as the type's first letter is said."""
    return f"{'an' if word[:1].upper() in 'AEFHILMNORSX' else 'a'} {word}"


def describe_resources(resources: Resources) -> str:
    """``1 GPU (L4) and 4 CPUs``: a request as a user reads it."""
    gpu_type = _gpu_type(resources)
    parts = []
    gpus = resources.get("GPU", 0.0)
    if gpus:
        parts.append(f"{gpus:g} GPU{'' if gpus == 1 else 's'}"
                     + (f" ({gpu_type})" if gpu_type else ""))
    cpus = resources.get("CPU", 0.0)
    if cpus:
        parts.append(f"{cpus:g} CPU{'' if cpus == 1 else 's'}")
    parts += [f"{v:g} {k}" for k, v in resources.items()
              if k not in ("GPU", "CPU", *_BOOKKEEPING) and not k.startswith(_ACCELERATOR)
              and not k.startswith("node:")]
    return " and ".join(parts) or "no resources"


def describe_nodes(nodes: Sequence[Resources]) -> str:
    """``1 node: 4 CPUs, no GPU`` / ``3 nodes: 24 CPUs, 2 GPUs (T4)``."""
    cpus = sum(n.get("CPU", 0.0) for n in nodes)
    gpus = sum(n.get("GPU", 0.0) for n in nodes)
    types = _gpu_types(nodes)
    gpu_text = (f"{gpus:g} GPU{'' if gpus == 1 else 's'}"
                + (f" ({', '.join(types)})" if types else "")) if gpus else "no GPU"
    return (f"{len(nodes)} node{'' if len(nodes) == 1 else 's'}: "
            f"{cpus:g} CPU{'' if cpus == 1 else 's'}, {gpu_text}")


def _missing(resources: Resources, nodes: Sequence[Resources]) -> str:
    """What no node has, in words: ``a GPU``, ``an L4 GPU (its GPUs are T4)``, ``8 CPUs``."""
    gpu_type = _gpu_type(resources)
    has_gpu = [n for n in nodes if n.get("GPU", 0.0) >= resources.get("GPU", 0.0) > 0]
    if resources.get("GPU", 0.0) and not has_gpu:
        most = max((n.get("GPU", 0.0) for n in nodes), default=0.0)
        return ("a GPU" if not most else
                f"{resources['GPU']:g} GPUs on one node (at most {most:g})")
    if gpu_type and not any(n.get(_ACCELERATOR + gpu_type) for n in has_gpu):
        types = _gpu_types(has_gpu)
        return f"{_a(gpu_type)} GPU" + (f" (its GPUs are {', '.join(types)})" if types else
                                        " (its GPUs declare no type)")
    most_cpus = max((n.get("CPU", 0.0) for n in nodes), default=0.0)
    if resources.get("CPU", 0.0) > most_cpus:
        return f"{resources['CPU']:g} CPUs (the largest node has {most_cpus:g})"
    lacking = [k for k, v in resources.items() if v > 0 and not any(n.get(k, 0.0) >= v
                                                                    for n in nodes)]
    return " and ".join(f"the resource {k}" for k in lacking) or "room for it beside the rest"


def _fix(shortfall: Shortfall, nodes: Sequence[Resources]) -> str:
    request = shortfall.request
    r = request.resources
    on_engine = request.stage == "engine"
    set_ = "--" if on_engine else f"--set {request.stage}."
    if shortfall.fits_no_node and r.get("GPU"):
        types = _gpu_types(nodes)
        other = (f" or the type it has ({'--accelerator ' if on_engine else set_ + 'accelerator_type='}"
                 f"{types[0]})" if types and any(n.get("GPU") for n in nodes) else "")
        cpu = "--accelerator none" if on_engine else f"{set_}accelerator_type=none"
        return (f"Run {request.stage} on CPUs ({cpu}){other}, or send the job to a cluster "
                "with such GPUs "
                "(toolkit submit JOB --address http://HEAD:8265, or toolkit render for Anyscale).")
    if shortfall.fits_no_node:
        most = max((n.get("CPU", 0.0) for n in nodes), default=0.0)
        return (f"Ask for at most {most:g} CPUs per worker (--set {request.stage}.num_cpus={most:g}),"
                " or use a cluster with larger nodes.")
    if not request.is_model_stage:
        return "Ask for fewer model workers (--concurrency) or fewer CPUs each (engine.num_cpus)."
    flag = "--concurrency" if on_engine else f"--set {request.stage}.concurrency="
    sep = " " if on_engine else ""
    return (f"Ask for {shortfall.placed or 1} worker{'s' if shortfall.placed > 1 else ''} "
            f"({flag}{sep}{max(shortfall.placed, 1)}), or a range that starts with what fits "
            f"({flag}{sep}1-{request.workers}); or fewer CPUs each ({request.stage}.num_cpus); "
            "or a larger cluster.")


def shortfall_message(shortfall: Shortfall, nodes: Sequence[Resources]) -> str:
    """One paragraph: the stage, its request, what the cluster offers, and why it can't start."""
    request = shortfall.request
    offer = describe_nodes(nodes)
    if shortfall.fits_no_node:
        return (f"{request.stage} needs {describe_resources(request.resources)} per worker, "
                f"but no node of this cluster has {_missing(request.resources, nodes)} "
                f"({offer}), and it adds no nodes: the run would wait at 0 rows forever.")
    return (f"{request.stage} asks for {request.workers} workers of "
            f"{describe_resources(request.resources)} each, all started before the first "
            f"row, but this cluster holds {shortfall.placed} beside the run's other stages "
            f"and {READ_WRITE_CPUS:g} CPU for reading and writing ({offer}), and it adds no "
            "nodes: the run would wait at 0 rows forever.")


def check_cluster_fits(stages: EngineStages, state: ClusterState | None) -> None:
    """Refuse, before the pipeline starts, what a cluster that can't grow can never hold.

    Raises:
        ResourcesUnavailableError: a model stage's worker fits no node, or the
            stages' pools don't fit the nodes together (exit 3).
    """
    if state is None or state.can_grow is not False or not state.nodes:
        return  # an autoscaler may add the node; the watch says so while it waits
    short = shortfalls(run_requests(stages), state.nodes)
    if not short:
        return
    first = short[0]
    message = " ".join(shortfall_message(s, state.nodes) for s in short)
    raise ResourcesUnavailableError(message, hint=_fix(first, state.nodes))


# -- Ray's view ------------------------------------------------------------------------


def read_cluster_state() -> ClusterState:
    """Ray's view of the cluster this process is connected to (``ray.init`` done).

    The GCS's cluster status (what ``ray status`` shows: nodes, pending requests, and
    the autoscaler's state where one reports it) and the ``ray start`` monitor's
    report. Ray keeps the status call in its autoscaler SDK
    (``ray.autoscaler.v2.sdk.get_cluster_status``), whose parsed form drops the
    infeasible requests, so the reply is read here.
    """
    import ray
    from ray.experimental.internal_kv import _internal_kv_get

    gcs = ray._private.worker.global_worker.gcs_client
    reply = gcs.get_cluster_status(timeout_s=10)
    try:
        monitor = _internal_kv_get(AUTOSCALING_STATUS_KEY)
    except Exception:  # noqa: BLE001 - only says whether the cluster can grow
        monitor = None
    return parse_cluster_state(reply, monitor)


#: How long :func:`cluster_state` waits for a just-started head's monitor to report.
SETTLE_S = 15.0


def cluster_state(fixed: bool = False, settle_s: float = SETTLE_S) -> ClusterState | None:
    """:func:`read_cluster_state`, or None when Ray's status can't be read (the checks
    are then skipped, never the run); ``fixed``: the caller knows it can't grow.
    A head started seconds ago is given up to ``settle_s`` to say whether it can grow."""
    deadline = time.monotonic() + settle_s
    try:
        state = read_cluster_state()
        while state.settling and not fixed and time.monotonic() < deadline:
            time.sleep(1.0)
            state = read_cluster_state()
    except Exception:  # noqa: BLE001 - an older or newer Ray; the run goes on unchecked
        return None
    return dataclasses.replace(state, can_grow=False) if fixed else state


def parse_cluster_state(status_reply: bytes, monitor_report: bytes | None) -> ClusterState:
    """A :class:`ClusterState` from the GCS's ``GetClusterStatusReply`` (serialised)
    and the ``ray start`` monitor's JSON report (None when there is none)."""
    from ray.core.generated.autoscaler_pb2 import GetClusterStatusReply, NodeStatus

    reply = GetClusterStatusReply()
    reply.ParseFromString(status_reply)
    resources = reply.cluster_resource_state
    nodes = tuple(dict(node.total_resources) for node in resources.node_states
                  if node.status != NodeStatus.DEAD)
    pending = [dict(r.request.resources_bundle) for r in resources.pending_resource_requests]
    for gang in resources.pending_gang_resource_requests:
        pending += [dict(r.resources_bundle) for r in gang.requests]
    autoscaler = reply.autoscaling_state
    if autoscaler.autoscaler_state_version > 0:  # an autoscaler (v2) reports here
        infeasible = [dict(r.resources_bundle) for r in autoscaler.infeasible_resource_requests]
        for gang in autoscaler.infeasible_gang_resource_requests:
            infeasible += [dict(r.resources_bundle) for r in gang.requests]
        return ClusterState(nodes, True, tuple(pending), tuple(infeasible))
    can_grow = _monitor_can_grow(monitor_report)
    return ClusterState(nodes, can_grow, tuple(pending),
                        settling=can_grow is None and _monitor_yet_to_report(monitor_report))


def _monitor_yet_to_report(report: bytes | None) -> bool:
    """A monitor wrote its load metrics but no autoscaler report yet (it starts so)."""
    try:
        return bool(report) and "autoscaler_report" not in json.loads(report or b"{}")
    except ValueError:
        return False


def _monitor_can_grow(report: bytes | None) -> bool | None:
    """False when the monitor's autoscaler runs Ray's read-only provider (each node is
    its own type ``node_<id>``: nobody can add one); None when it can't be told."""
    if not report:
        return None
    try:
        mapping = json.loads(report).get("autoscaler_report", {}).get("node_type_mapping")
    except (ValueError, AttributeError):
        return None
    if not mapping:
        return None
    readonly = all(kind == f"{READONLY_NODE_TYPE_PREFIX}{node}" for node, kind in mapping.items())
    return False if readonly else None


# -- while it runs ---------------------------------------------------------------------

#: Seconds between looks at the cluster while a run waits or runs.
WATCH_INTERVAL_S = 5.0


@dataclass
class ResourceWatch:
    """Decides, from successive :class:`ClusterState` looks, what to tell the user about
    this run's requests Ray can't place, and when to give up on them.

    A request of the run that can never be met (an autoscaler says no node type
    fulfils it, or a cluster that can't grow has no node that could hold it) is said
    at once; if it still can't be met after ``wait_s`` seconds, :meth:`look` returns
    the error to stop with. A request that fits no node now but may once the
    autoscaler adds one is said as waiting, and never given up on. Requests that
    aren't this run's (other jobs on a shared cluster) are left alone.
    """

    requests: Sequence[WorkerRequest]
    wait_s: float | None
    clock: Clock
    _blocked_since: float | None = field(default=None, init=False)
    _said: str | None = field(default=None, init=False)

    def look(self, state: ClusterState) -> tuple[str | None, ResourcesUnavailableError | None]:
        """``(notice, give_up)``: a new line to tell the user (None: nothing new), and the
        error to stop the run with (None: keep going)."""
        blocked, waiting = self._classify(state)
        now = self.clock()
        if not blocked:
            self._blocked_since = None
        elif self._blocked_since is None:
            self._blocked_since = now
        give_up = None
        text: str | None = None
        if blocked:
            request, bundle = blocked[0]
            where = f"no node {'type ' if state.can_grow else ''}in this cluster"
            text = (f"waiting for {describe_resources(bundle)} for {request.stage}: {where} "
                    f"has it ({describe_nodes(state.nodes)}).")
            if self.wait_s is not None:
                text += f" Stopping after {format_duration(self.wait_s)} unless it appears."
                since = now if self._blocked_since is None else self._blocked_since
                if now - since >= self.wait_s:
                    give_up = ResourcesUnavailableError(
                        f"{request.stage} waited {format_duration(self.wait_s)} for "
                        f"{describe_resources(bundle)} per worker, which {where} has "
                        f"({describe_nodes(state.nodes)}); the run stopped, keeping the rows "
                        "it wrote (a rerun resumes).",
                        hint=_fix(Shortfall(request, 0, True), state.nodes)
                        + " compute.resource_wait_s sets how long a run waits.")
        elif waiting:
            request, bundle = waiting[0]
            text = (f"waiting for {describe_resources(bundle)} for {request.stage}: no node "
                    "has it now; it starts when one that has it joins the cluster.")
        notice = None
        if text != self._said:
            notice = text if text is not None else "the workers it waited for are placed; the run goes on."
            self._said = text
        return notice, give_up

    def _classify(self, state: ClusterState) -> tuple[list[tuple[WorkerRequest, dict[str, float]]],
                                                       list[tuple[WorkerRequest, dict[str, float]]]]:
        blocked, waiting = [], []
        for bundle in state.infeasible:
            request = self._ours(bundle)
            if request is not None:
                blocked.append((request, bundle))
        for bundle in state.pending:
            request = self._ours(bundle)
            if (request is None or bundle in state.infeasible
                    or any(fits(bundle, node) for node in state.nodes)):
                continue  # not ours, said above, or only busy: it fits once a node frees up
            (blocked if state.can_grow is False else waiting).append((request, bundle))
        return blocked, waiting

    def _ours(self, bundle: Resources) -> WorkerRequest | None:
        return next((r for r in self.requests if r.matches(bundle)), None)


@contextlib.contextmanager
def watching_resources(
    stages: EngineStages,
    resource_wait_s: float,
    on_notice: Callable[[str], None] | None,
    *,
    outcome: StopOutcome,
    interval_s: float = WATCH_INTERVAL_S,
    read: Callable[[], ClusterState] = read_cluster_state,
    clock: Clock = time.monotonic,
) -> Iterator[None]:
    """Watch the cluster for the requests of a run's ``stages`` while the block runs;
    it gives up on a request that waited ``resource_wait_s`` (``compute.resource_wait_s``)
    for resources no node has.

    Notices go to ``on_notice`` (from a background thread). When the watch gives up,
    the run is stopped as :func:`~toolkit.run.run_stop.stopping_when` does, with
    ``outcome.stopped_with`` a :class:`ResourcesUnavailableError`.
    """
    watch = ResourceWatch(run_requests(stages), resource_wait_s, clock)

    def judge() -> ResourcesUnavailableError | None:
        notice, give_up = watch.look(read())
        if notice and on_notice is not None:
            on_notice(notice)
        return give_up

    with stopping_when(judge, outcome, interval_s=interval_s):
        yield
