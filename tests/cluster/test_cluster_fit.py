"""A run that can never start says so (exit 3) instead of waiting at 0 rows (issue 26).

Against real Ray heads started by the tests (``ray start --head``, which can't add
nodes): the CLI, as a user runs it, refuses a GPU type no node has, a GPU on a CPU-only
head and a pool larger than the cluster, naming the stage, the request, what the
cluster offers and the flag to change; a submitted job ends its ``--follow`` with the
same message. While a run goes, a request no node can give is said at once and stops
the run after ``compute.resource_wait_s``. A request an autoscaler is adding a node
for only waits: that part is tested on recorded autoscaler states (the GCS reply an
autoscaler v2 leaves), since no autoscaler runs here.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from ray.core.generated import autoscaler_pb2 as pb

from toolkit.cluster.backends.base import JobInfo, JobStatus
from toolkit.cluster.backends.local_head import LocalHead
from toolkit.run.progress.watched_job import format_resources_line, waiting_for
from toolkit.errors import ResourcesUnavailableError
from toolkit.run.ray.cluster_fit import (
    ClusterState,
    ResourceWatch,
    WorkerRequest,
    check_cluster_fits,
    parse_cluster_state,
    run_requests,
    shortfalls,
)
from toolkit.spec.jobs.catalog import load_job
from toolkit.spec.loading import load_job_spec

TOOLKIT = str(Path(sys.executable).parent / "toolkit")
ON_TRANSFORMERS = ("--engine", "transformers")


def toolkit(*args: str, cwd: Path, timeout: float = 240) -> tuple[subprocess.CompletedProcess[str], float]:
    started = time.monotonic()
    result = subprocess.run([TOOLKIT, *args], capture_output=True, text=True, cwd=cwd,
                            timeout=timeout)
    print(result.stdout[-3000:], result.stderr[-3000:])  # shown when a test fails
    return result, time.monotonic() - started


# -- the CLI against real heads ---------------------------------------------------------


def test_a_gpu_stage_on_a_head_without_gpus_exits_3_naming_gpu_l4_and_the_fix(
        ray_head: LocalHead, tmp_path: Path) -> None:
    result, seconds = toolkit("run", "text-industry", "--smoke", "--rows", "20",
                              *ON_TRANSFORMERS, "--accelerator", "L4",
                              "--address", ray_head.gcs_address, "--output", "out", cwd=tmp_path)
    assert result.returncode == 3
    assert ("Error: engine needs 1 GPU (L4) and 1 CPU per worker, but no node of this "
            "cluster has a GPU (1 node: 4 CPUs, no GPU), and it adds no nodes") in result.stderr
    assert "Hint: Run engine on CPUs (--accelerator none)" in result.stderr
    assert "Traceback" not in result.stderr and "Exception in thread" not in result.stderr
    assert seconds < 90
    assert not list((tmp_path / "out").glob("part-*"))


def test_a_gpu_type_no_node_has_names_the_types_there_are(t4_head: LocalHead,
                                                          tmp_path: Path) -> None:
    result, _ = toolkit("run", "text-industry", "--smoke", "--rows", "20", *ON_TRANSFORMERS,
                        "--accelerator", "L4", "--address", t4_head.gcs_address,
                        "--output", "out", cwd=tmp_path)
    assert result.returncode == 3
    assert ("no node of this cluster has an L4 GPU (its GPUs are T4) (1 node: 4 CPUs, "
            "1 GPU (T4))") in result.stderr
    assert "or the type it has (--accelerator T4)" in result.stderr


def test_the_gpu_type_the_cluster_has_runs(t4_head: LocalHead, tmp_path: Path) -> None:
    """The same check lets a run through that fits: the T4 'GPU' is declared, so the
    transformers engine finds no CUDA and runs on the CPU behind it."""
    result, _ = toolkit("run", "text-industry", "--smoke", "--rows", "20", *ON_TRANSFORMERS,
                        "--accelerator", "T4", "--concurrency", "1",
                        "--address", t4_head.gcs_address, "--output", "out", cwd=tmp_path)
    assert result.returncode == 0
    assert "rows written:  20" in result.stdout


def test_a_pool_larger_than_the_cluster_exits_3_with_the_concurrency_that_fits(
        ray_head: LocalHead, tmp_path: Path) -> None:
    result, _ = toolkit("run", "text-industry", "--smoke", "--rows", "20", *ON_TRANSFORMERS,
                        "--accelerator", "none", "--concurrency", "8",
                        "--address", ray_head.gcs_address, "--output", "out", cwd=tmp_path)
    assert result.returncode == 3
    assert ("engine asks for 8 workers of 1 CPU each, all started before the first row, but "
            "this cluster holds 3 beside the run's other stages and 1 CPU for reading and "
            "writing (1 node: 4 CPUs, no GPU)") in result.stderr
    assert "Hint: Ask for 3 workers (--concurrency 3), or a range that starts with what " \
           "fits (--concurrency 1-8)" in result.stderr


def test_a_submitted_job_ends_its_follow_with_the_message(ray_head: LocalHead,
                                                          tmp_path: Path) -> None:
    result, seconds = toolkit("submit", "text-industry", "--smoke", "--rows", "20",
                              *ON_TRANSFORMERS, "--accelerator", "L4", "--address", "local",
                              "--output", str(tmp_path / "out"), "--follow", cwd=tmp_path)
    assert result.returncode == 4  # the job FAILED, as its own exit code 3 says why
    assert "engine needs 1 GPU (L4) and 1 CPU per worker, but no node of this cluster has " \
           "a GPU" in result.stdout + result.stderr
    assert seconds < 120


# -- while it runs: Ray's own pending requests, on a real Ray ---------------------------


def test_a_running_stage_that_can_never_start_is_stopped_after_the_wait(tmp_path: Path) -> None:
    """The library's run, past the up-front check (as on a cluster whose growth can't be
    told): Ray queues the L4 workers, the watch says so at once and gives up after
    compute.resource_wait_s, and the run directory is left to resume."""
    script = tmp_path / "run.py"
    script.write_text(textwrap.dedent("""
        import sys, time
        import ray
        from toolkit.errors import ResourcesUnavailableError
        from toolkit.run.driver import run_pipeline
        from toolkit.samples.provider import SAMPLES
        from toolkit.spec.jobs.catalog import load_job
        from toolkit.spec.loading import load_job_spec

        ray.init(num_cpus=2, include_dashboard=False, logging_level="ERROR")
        job = load_job("text-industry")
        spec = load_job_spec(job, overrides={
            "engine.kind": "transformers", "engine.accelerator_type": "L4",
            "engine.model": "sample:tiny-chat", "data.input": "sample:customers",
            "data.rows": 20, "data.output": sys.argv[1], "compute.resource_wait_s": 10})
        started = time.monotonic()
        try:
            run_pipeline(job, spec, samples=SAMPLES,
                         on_notice=lambda line: print("notice:", line, flush=True))
        except ResourcesUnavailableError as error:
            print(f"stopped after {time.monotonic() - started:.0f}s: {error}")
            print(f"hint: {error.hint}")
    """))
    out = tmp_path / "out"
    result = subprocess.run([sys.executable, str(script), str(out)], capture_output=True,
                            text=True, timeout=240, cwd=tmp_path)
    print(result.stdout, result.stderr[-3000:])
    assert ("notice: waiting for 1 GPU (L4) and 1 CPU for engine: no node in this cluster "
            "has it (1 node: 2 CPUs, no GPU). Stopping after 10s unless it appears.") \
        in result.stdout
    assert ("engine waited 10s for 1 GPU (L4) and 1 CPU per worker, which no node in this "
            "cluster has (1 node: 2 CPUs, no GPU); the run stopped, keeping the rows it wrote"
            ) in result.stdout
    assert "hint: Run engine on CPUs (--accelerator none)" in result.stdout
    seconds = int(result.stdout.split("stopped after ")[1].split("s:")[0])
    assert 10 <= seconds < 60
    assert (out / "_manifest.json").exists()  # the run directory stays, to resume


# -- recorded states: an autoscaler's, a `ray start` monitor's -------------------------

L4_WORKER = {"CPU": 1.0, "GPU": 1.0, "accelerator_type:L4": 0.001}
HEAD = {"CPU": 8.0, "memory": 3.2e10, "object_store_memory": 1e10, "node:__internal_head__": 1}


def status_reply(*, pending: list[dict[str, float]] = (), infeasible: list[dict[str, float]] = (),
                 autoscaler: bool = True, launching: str | None = None) -> bytes:
    """A ``GetClusterStatusReply`` as the GCS serves it: one CPU head node, the given
    pending requests, and (``autoscaler``) the state an autoscaler v2 reported."""
    reply = pb.GetClusterStatusReply()
    node = reply.cluster_resource_state.node_states.add()
    node.total_resources.update(HEAD)
    node.status = pb.NodeStatus.RUNNING
    for bundle in pending:
        reply.cluster_resource_state.pending_resource_requests.add(
            request=pb.ResourceRequest(resources_bundle=bundle), count=1)
    if autoscaler:
        state = reply.autoscaling_state
        state.autoscaler_state_version = 7
        for bundle in infeasible:
            state.infeasible_resource_requests.add(resources_bundle=bundle)
        if launching:
            state.pending_instance_requests.add(ray_node_type_name=launching, count=1)
    return reply.SerializeToString()


class FakeClock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def engine_on(accelerator: str, wait_s: float | None = 180.0) -> list[WorkerRequest]:
    job = load_job("text-industry")
    spec = load_job_spec(job, overrides={"engine.kind": "transformers",
                                         "engine.accelerator_type": accelerator,
                                         "compute.resource_wait_s": wait_s})
    return run_requests(spec)


def test_waiting_for_the_autoscaler_to_add_a_node_is_never_cut_short() -> None:
    state = parse_cluster_state(status_reply(pending=[L4_WORKER], launching="g6.2xlarge"), None)
    assert state.can_grow is True and state.infeasible == ()
    clock = FakeClock()
    watch = ResourceWatch(engine_on("L4"), wait_s=180.0, clock=clock)
    notice, give_up = watch.look(state)
    assert notice == ("waiting for 1 GPU (L4) and 1 CPU for engine: no node has it now; it "
                      "starts when one that has it joins the cluster.")
    for _ in range(60):  # an hour of looks, every minute
        clock.now += 60
        notice, give_up = watch.look(state)
        assert (notice, give_up) == (None, None)
    # The node came up and the workers were placed.
    notice, give_up = watch.look(parse_cluster_state(status_reply(), None))
    assert notice == "the workers it waited for are placed; the run goes on."
    assert give_up is None


def test_what_the_autoscaler_calls_infeasible_stops_the_run_after_the_wait() -> None:
    state = parse_cluster_state(status_reply(pending=[L4_WORKER], infeasible=[L4_WORKER]), None)
    clock = FakeClock()
    watch = ResourceWatch(engine_on("L4"), wait_s=180.0, clock=clock)
    notice, give_up = watch.look(state)
    assert notice == ("waiting for 1 GPU (L4) and 1 CPU for engine: no node type in this "
                      "cluster has it (1 node: 8 CPUs, no GPU). Stopping after 3m 00s unless "
                      "it appears.")
    clock.now = 179
    assert watch.look(state) == (None, None)
    clock.now = 180
    notice, give_up = watch.look(state)
    assert notice is None and isinstance(give_up, ResourcesUnavailableError)
    assert give_up.exit_code == 3
    assert str(give_up).startswith("engine waited 3m 00s for 1 GPU (L4) and 1 CPU per worker, "
                                   "which no node type in this cluster has")
    assert "compute.resource_wait_s sets how long a run waits" in give_up.hint


def test_another_jobs_impossible_request_is_not_ours_to_stop_for() -> None:
    h100 = {"CPU": 1.0, "GPU": 8.0, "accelerator_type:H100": 0.001}
    state = parse_cluster_state(status_reply(pending=[h100], infeasible=[h100]), None)
    watch = ResourceWatch(engine_on("L4"), wait_s=1.0, clock=FakeClock())
    watch.clock.now = 1e6  # type: ignore[attr-defined]
    assert watch.look(state) == (None, None)


def test_a_null_wait_tells_but_never_stops() -> None:
    state = parse_cluster_state(status_reply(pending=[L4_WORKER], infeasible=[L4_WORKER]), None)
    clock = FakeClock()
    watch = ResourceWatch(engine_on("L4"), wait_s=None, clock=clock)
    notice, _ = watch.look(state)
    assert notice is not None and "Stopping" not in notice
    clock.now = 1e6
    assert watch.look(state)[1] is None


def test_growth_is_read_from_what_reports_to_the_gcs() -> None:
    # An autoscaler v2 reports its state: the cluster can grow, refusals wait for it.
    assert parse_cluster_state(status_reply(), None).can_grow is True
    no_autoscaler = status_reply(autoscaler=False)
    # `ray start` by hand: the monitor's read-only provider names each node's type after it.
    readonly = (b'{"autoscaler_report": {"node_type_mapping": {"ab12": "node_ab12", '
                b'"cd34": "node_cd34"}}}')
    assert parse_cluster_state(no_autoscaler, readonly).can_grow is False
    # A monitor with real node types (an autoscaler v1) or none yet: can't tell.
    typed = b'{"autoscaler_report": {"node_type_mapping": {"ab12": "gpu-workers"}}}'
    assert parse_cluster_state(no_autoscaler, typed).can_grow is None
    assert parse_cluster_state(no_autoscaler, None).can_grow is None
    # A head started seconds ago: its monitor reports load first, the autoscaler next.
    starting = b'{"load_metrics_report": {"usage": {}}}'
    assert parse_cluster_state(no_autoscaler, starting).settling is True
    assert parse_cluster_state(no_autoscaler, readonly).settling is False


def test_a_cluster_that_may_grow_is_never_refused_up_front() -> None:
    job = load_job("text-industry")
    spec = load_job_spec(job, overrides={"engine.kind": "transformers",
                                         "engine.accelerator_type": "L4"})
    cpu_only = ({"CPU": 4.0},)
    check_cluster_fits(spec, ClusterState(cpu_only, can_grow=True))
    check_cluster_fits(spec, ClusterState(cpu_only, can_grow=None))
    with pytest.raises(ResourcesUnavailableError, match="engine needs 1 GPU"):
        check_cluster_fits(spec, ClusterState(cpu_only, can_grow=False))


# -- placing a run's stages on nodes --------------------------------------------------


def test_every_stage_pool_and_the_reading_cpu_are_placed_together() -> None:
    job = load_job("review-triage")
    spec = load_job_spec(job, overrides={
        "engine.kind": "transformers", "engine.accelerator_type": "none",
        "engine.concurrency": 2, "stages.sentiment.accelerator_type": "none",
        "stages.sentiment.concurrency": 2})
    requests = run_requests(spec)
    assert [(r.stage, r.workers) for r in requests] == [
        ("stages.sentiment", 2), ("engine", 2), ("reading and writing", 1)]
    assert shortfalls(requests, [{"CPU": 5.0}]) == []
    short = shortfalls(requests, [{"CPU": 4.0}])
    assert [(s.request.stage, s.placed, s.fits_no_node) for s in short] == [
        ("engine", 1, False)]
    # Two nodes hold what one can't.
    assert shortfalls(requests, [{"CPU": 2.0}, {"CPU": 3.0}]) == []


def test_the_reading_cpu_goes_where_it_leaves_the_engine_room_whatever_the_node_order() -> None:
    job = load_job("text-industry")
    spec = load_job_spec(job, overrides={"engine.kind": "transformers",
                                         "engine.accelerator_type": "none",
                                         "engine.num_cpus": 2, "engine.concurrency": 1})
    requests = run_requests(spec)
    # A 2-CPU worker listed before a 1-CPU head: the head reads and writes.
    assert shortfalls(requests, [{"CPU": 2.0}, {"CPU": 1.0}]) == []
    assert shortfalls(requests, [{"CPU": 1.0}, {"CPU": 2.0}]) == []
    (short,) = shortfalls(requests, [{"CPU": 2.0}])
    assert (short.request.stage, short.placed, short.fits_no_node) == ("engine", 0, False)


def test_a_worker_larger_than_every_node_is_named_with_the_largest_node() -> None:
    job = load_job("text-industry")
    spec = load_job_spec(job, overrides={"engine.kind": "transformers",
                                         "engine.accelerator_type": "none",
                                         "engine.num_cpus": 16, "engine.concurrency": 1})
    with pytest.raises(ResourcesUnavailableError) as raised:
        check_cluster_fits(spec, ClusterState(({"CPU": 8.0}, {"CPU": 8.0}), can_grow=False))
    assert "no node of this cluster has 16 CPUs (the largest node has 8)" in str(raised.value)
    assert raised.value.hint.startswith("Ask for at most 8 CPUs per worker "
                                        "(--set engine.num_cpus=8)")


def test_status_shows_what_a_running_job_waits_for() -> None:
    line = format_resources_line("waiting for 1 GPU (L4) and 1 CPU for engine: no node "
                                 "type in this cluster has it (1 node: 8 CPUs, no GPU).")
    running = JobInfo(backend="ray", job_id="raysubmit_1", status=JobStatus.RUNNING)
    log = f"Ray Dashboard: http://x\n{line}\nprogress: rows_done=0 rows_total=20 rows_per_second=0.0\n"
    assert waiting_for(running, lambda: log) == line.removeprefix("resources: ")
    found = log + format_resources_line("the workers it waited for are placed; the run goes on.") + "\n"
    assert waiting_for(running, lambda: found) is None
    ended = JobInfo(backend="ray", job_id="raysubmit_1", status=JobStatus.FAILED)
    assert waiting_for(ended, lambda: log) is None
