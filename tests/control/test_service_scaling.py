"""The live loop scales a service (issue 24) on a real store, without Ray: the guard's ask
(from the service's reported window) reaches the policy through the snapshot, the loop
stops the service (at once: it has nothing to save) and relaunches it on the new replica
count, going on where its arrival stream is; bulk work fills the GPUs it gives back; a resize
whose relaunch would not pay before its stream ends is not made."""

from __future__ import annotations

import time
from pathlib import Path

from orchestrator.config import Settings
from orchestrator.control.loop import ControlLoop
from orchestrator.runtime.local import LocalRuntime
from orchestrator.services import make_policy
from orchestrator.spec import parse_spec
from orchestrator.store import JobStore
from orchestrator.store.states import JobState

SERVICE = {
    "name": "svc",
    "team": "t",
    "class": "interactive",
    "workload": {"name": "infer", "args": {"model": "mlp"}},
    "sla": {"latency": {"percentile": 99, "max_ms": 20}},
    "resources": {"gpus": {"min": 1, "max": 3}},
    "run": {"micro_batch": 8, "duration_s": 600},
    "serve": {"rate_rps": 100, "endpoint": False},
}
BULK = {
    "name": "train",
    "team": "t",
    "class": "bulk",
    "workload": "mlp",
    "sla": {"throughput": {"min_samples_per_s": 1}},
    "resources": {"gpus": 1},
    "run": {"micro_batch": 8, "steps": 100},
}


def _window(store: JobStore, job_id: str, **figures: float) -> None:
    """What the service's worker reports of its last seconds."""
    store.put_metrics(job_id, {"first_step_at": time.time(), "window_steps": 200, **figures})


def _checks(loop: ControlLoop, times: int = 3) -> None:
    """Guard rounds past its hold (it checks every 0.5 s at most: its clock is moved on, past
    the last check's)."""
    now = max(time.time(), loop.sla_guard._checked)
    for k in range(times):
        loop.sla_guard.check(loop.runs, now + 1.0 * (k + 1))


def test_the_loop_scales_a_service_up_on_load_and_down_with_margin(
    store: JobStore, tmp_path: Path
) -> None:
    settings = Settings(
        redis_url="unused", namespace=store.namespace, data_dir=tmp_path, guard_hold_s=0.5
    )
    rt = LocalRuntime([("n0", 3)])
    loop = ControlLoop(settings, store, rt, make_policy("shared"), restart_cost_s=0.0)
    loop.lease.acquire(store.namespace)
    try:
        svc = store.submit(parse_spec(SERVICE)).id
        loop.round()
        loop.round()
        assert store.get(svc).state is JobState.RUNNING
        assert len(rt.launches[-1].nodes) == 1  # its gpus.min
        origin = time.time() - 30.0  # where its stream began (the worker reports it)
        served = time.time() - 1.0  # the time of its last report: when it last served

        # the load doubled: the one replica is busy all the time and serves 150 of 200 req/s
        _window(
            store,
            svc,
            window_p99_ms=9.0,
            window_offered_rps=200.0,
            window_served_rps=150.0,
            window_busy=1.0,
            stream_started_at=origin,
            served_until=served,
        )
        _checks(loop)
        assert loop.sla_guard.want == {svc: 3}  # ceil(1.0 x 200/150 / 0.6) = 3
        loop.round()  # the policy resizes it; the loop stops it ...
        loop.round()  # ... and relaunches it on 3 GPUs, its stream going on
        up = rt.launches[-1]
        assert up.job_id == svc and len(up.nodes) == 3
        # killed, not stopped gracefully: a service saves nothing (no checkpoint), and its
        # graceful end held its GPUs, and so its relaunch, for seconds
        assert rt.killed == [svc]
        assert up.spec.run.data_parallel == 3 and up.spec.serve is not None
        assert up.spec.serve.start_at == origin
        # what was due since it last served is counted as dropped by the new run
        assert up.spec.serve.stopped_at == served
        assert up.spec.serve.harness()["stopped_at"] == served
        assert loop.sla_guard.want == {}  # fulfilled: the new run is the size asked for
        said = [e["message"] for e in store.events(svc) if e["event"] == "guard"]
        assert said == [
            "guard: scaling 1 -> 3 replicas: offered 200 req/s needs 3 replicas at 60% busy"
        ]

        # the load fell: each of 3 replicas busy 10% and the tail at 4 ms: one fewer replica
        bulk = store.submit(parse_spec(BULK)).id
        loop.round()
        assert store.get(bulk).state is JobState.QUEUED  # the service holds the pool
        _window(
            store,
            svc,
            window_p99_ms=4.0,
            window_offered_rps=90.0,
            window_served_rps=90.0,
            window_busy=0.1,
            stream_started_at=origin,
        )
        _checks(loop, times=4)  # the down hold is twice the up hold
        assert loop.sla_guard.want == {svc: 2}
        for _ in range(3):
            loop.round()
        down = [launch for launch in rt.launches if launch.job_id == svc][-1]
        assert len(down.nodes) == 2 and down.spec.serve is not None
        assert down.spec.serve.start_at == origin
        # bulk work fills the GPU the service gave back; the service was stopped only to resize
        assert store.get(bulk).state is JobState.RUNNING
        assert rt.stops.count(svc) == 2
        said = [e["message"] for e in store.events(svc) if e["event"] == "guard"]
        assert said[-1] == (
            "guard: scaling 3 -> 2 replicas: offered 90 req/s keeps 2 replicas each 15% busy; "
            "p99 4.0 ms under 0.5x ceiling 20 ms"
        )
    finally:
        loop.release(grace_s=5)


def test_the_loop_does_not_scale_up_a_service_whose_relaunch_would_serve_after_its_end(
    store: JobStore, tmp_path: Path
) -> None:
    settings = Settings(
        redis_url="unused", namespace=store.namespace, data_dir=tmp_path, guard_hold_s=0.5
    )
    rt = LocalRuntime([("n0", 3)])
    loop = ControlLoop(settings, store, rt, make_policy("shared"), restart_cost_s=0.0)
    loop.lease.acquire(store.namespace)
    try:
        svc = store.submit(parse_spec(SERVICE)).id
        loop.round()
        loop.round()
        assert store.get(svc).state is JobState.RUNNING
        # overloaded, but its run took 8 s from launch to its first answer and its stream
        # ends in 5 s: a relaunch on more GPUs would answer nothing before the end
        _window(
            store,
            svc,
            first_step_at=loop.runs[svc].launched_at + 8.0,
            window_p99_ms=9.0,
            window_offered_rps=200.0,
            window_served_rps=150.0,
            window_busy=1.0,
            time_left_s=5.0,
        )
        _checks(loop)
        assert loop.sla_guard.want == {}
        loop.round()
        assert [launch.job_id for launch in rt.launches] == [svc] and rt.stops == []
        said = [e["message"] for e in store.events(svc) if e["event"] == "guard"]
        assert said == [
            "guard: stays at 1 replica: its stream ends in 5 s, before a relaunch (8 s) would "
            "serve: offered 200 req/s needs 3 replicas at 60% busy"
        ]
    finally:
        loop.release(grace_s=5)
