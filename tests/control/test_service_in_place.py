"""A service with an endpoint is scaled in place (issue 36 item 3), on a real store without
Ray: the loop asks the runtime to add or drain replicas, the job stays running and is never
relaunched, and the ledger follows the runtime exactly: a GPU the service gives back goes to
another job only once the runtime says its replica has drained; the job's placement, its
``scaled`` event, its GPU-seconds and its guard's size follow. A tuned service starts on its
tuned replicas."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest

from orchestrator.config import Settings
from orchestrator.control.ledger import Run, physically_free
from orchestrator.control.loop import ControlLoop
from orchestrator.runtime.base import Launch, OutcomeKind
from orchestrator.runtime.local import LocalRuntime
from orchestrator.services import make_policy
from orchestrator.spec import parse_spec
from orchestrator.storage import StorageLocation
from orchestrator.store import JobStore
from orchestrator.store.ingress import service_keys
from orchestrator.store.states import JobState
from tests.control.test_service_scaling import BULK, SERVICE, _checks, _window

ENDPOINT = {**SERVICE, "serve": {**SERVICE["serve"], "endpoint": True}}  # type: ignore[dict-item]


def _loop(store: JobStore, tmp_path: Path, rt: LocalRuntime) -> ControlLoop:
    settings = Settings(
        redis_url="unused", namespace=store.namespace, data_dir=tmp_path, guard_hold_s=0.5
    )
    loop = ControlLoop(settings, store, rt, make_policy("shared"), restart_cost_s=0.0)
    loop.lease.acquire(store.namespace)
    return loop


def _busy(store: JobStore, svc: str) -> None:
    """One replica busy all the time, serving 150 of the 200 req/s offered: 3 replicas."""
    _window(
        store,
        svc,
        window_p99_ms=9.0,
        window_offered_rps=200.0,
        window_served_rps=150.0,
        window_busy=1.0,
    )


def _calm(store: JobStore, svc: str) -> None:
    """3 replicas each 10% busy, the tail far under the ceiling: one fewer."""
    _window(
        store,
        svc,
        window_p99_ms=4.0,
        window_offered_rps=90.0,
        window_served_rps=90.0,
        window_busy=0.1,
    )


def test_an_endpoint_service_scales_in_place_and_the_ledger_follows_its_runtime(
    store: JobStore, tmp_path: Path
) -> None:
    rt = LocalRuntime([("n0", 3)], resize_ends=False)
    loop = _loop(store, tmp_path, rt)
    try:
        svc = store.submit(parse_spec(ENDPOINT)).id
        loop.round()
        loop.round()
        assert store.get(svc).state is JobState.RUNNING
        assert len(rt.launches[-1].nodes) == 1

        # scale-up: the runtime adds replicas; the job is neither stopped nor relaunched
        _busy(store, svc)
        _checks(loop)
        assert loop.sla_guard.want == {svc: 3}
        loop.round()
        assert rt.resizes == [(svc, ("n0", "n0", "n0"))]
        assert rt.stops == [] and [launch.job_id for launch in rt.launches] == [svc]
        run = loop.runs[svc]
        assert run.resize_to == ("n0", "n0", "n0") and len(run.nodes) == 1
        assert physically_free(loop.state.nodes, loop.runs.values()) == {"n0": 0}
        loop.round()  # not done yet: asked once, never twice
        assert len(rt.resizes) == 1
        assert store.get(svc).state is JobState.RUNNING

        rt.resized(svc)
        loop.round()
        _ready(store, svc, 3)  # its replicas joined the endpoint
        run = loop.runs[svc]
        assert run.nodes == ("n0", "n0", "n0") and run.resize_to is None
        assert run.launch.spec.run.data_parallel == 3
        rec = store.get(svc)
        assert rec.state is JobState.RUNNING and rec.placement is not None
        assert rec.placement["nodes"] == ["n0", "n0", "n0"]
        scaled = [e["message"] for e in store.events(svc) if e["event"] == "scaled"]
        assert scaled == ["scaled from 1 to 3 replicas, serving throughout"]
        assert loop.sla_guard.want == {}  # fulfilled

        # scale-down: the GPU given back is another job's only once its replica has drained
        bulk = store.submit(parse_spec(BULK)).id
        loop.round()
        assert store.get(bulk).state is JobState.QUEUED
        _calm(store, svc)
        _checks(loop, times=8)  # ready: 5 s of a window of the three, then the down hold
        assert loop.sla_guard.want == {svc: 2}
        loop.round()
        assert rt.resizes[-1] == (svc, ("n0", "n0"))
        for _ in range(3):  # the replica is draining: its GPU is still held
            loop.round()
            assert store.get(bulk).state is JobState.QUEUED
        assert physically_free(loop.state.nodes, loop.runs.values()) == {"n0": 0}
        rt.resized(svc)
        loop.round()
        assert loop.runs[svc].nodes == ("n0", "n0")
        loop.round()
        assert store.get(bulk).state in (JobState.PLACED, JobState.RUNNING)
        assert [launch.job_id for launch in rt.launches] == [svc, bulk]
        assert rt.stops == []
        said = [e["message"] for e in store.events(svc) if e["event"] == "scaled"]
        assert said[-1] == "scaled from 3 to 2 replicas, serving throughout"
        assert store.get(svc).state is JobState.RUNNING
        states = [e["event"] for e in store.events(svc) if e["event"] in set(JobState)]
        assert states == ["submitted", "queued", "placed", "running"]  # never relaunched
    finally:
        loop.release(grace_s=5)


def test_a_service_cancelled_while_it_scales_ends_with_the_gpus_it_held(
    store: JobStore, tmp_path: Path
) -> None:
    rt = LocalRuntime([("n0", 3)], resize_ends=False, stop_ends=False)
    loop = _loop(store, tmp_path, rt)
    try:
        svc = store.submit(parse_spec(ENDPOINT)).id
        loop.round()
        loop.round()
        _busy(store, svc)
        _checks(loop)
        loop.round()
        assert loop.runs[svc].resize_to is not None
        store.cancel(svc)
        loop.round()
        assert rt.stops == [svc]
        # stopping: its added replicas hold their GPUs until its end, as its first one does
        assert physically_free(loop.state.nodes, loop.runs.values()) == {"n0": 0}
        rt.end(svc, OutcomeKind.STOPPED, "stopped", {"status": "stopped"})
        loop.round()
        rec = store.get(svc)
        assert rec.state is JobState.CANCELLED
        assert svc not in loop.runs and not rt.alive()
        assert not [e for e in store.events(svc) if e["event"] == "scaled"]
    finally:
        loop.release(grace_s=5)


def test_a_runs_gpu_seconds_count_each_size_for_as_long_as_it_held_it() -> None:
    spec = parse_spec(ENDPOINT)
    launch = Launch("s", "run", spec, ("n0",), "PACK", 1, StorageLocation("/tmp/x"), True)
    run = Run(launch, launched_at=100.0)
    assert run.held_gpu_s(110.0) == pytest.approx(10.0)
    run.resized(
        Launch("s", "run", spec, ("n0",) * 3, "PACK", 1, StorageLocation("/tmp/x"), True), 110.0
    )
    assert run.held_gpu_s(120.0) == pytest.approx(10.0 + 30.0)
    run.resized(
        Launch("s", "run", spec, ("n0",) * 2, "PACK", 1, StorageLocation("/tmp/x"), True), 120.0
    )
    assert run.held_gpu_s(125.0) == pytest.approx(40.0 + 10.0)
    assert run.most_gpus == 3


def test_an_ended_scaled_service_is_charged_its_gpu_seconds(
    store: JobStore, tmp_path: Path
) -> None:
    clock = [1000.0]
    rt = LocalRuntime([("n0", 3)])
    settings = Settings(redis_url="unused", namespace=store.namespace, data_dir=tmp_path)
    loop = ControlLoop(
        settings, store, rt, make_policy("shared"), restart_cost_s=0.0, clock=lambda: clock[0]
    )
    loop.lease.acquire(store.namespace)
    try:
        svc = store.submit(parse_spec(ENDPOINT)).id
        loop.round()
        loop.round()
        run = loop.runs[svc]
        run.launched_at = time.time() - 10.0  # it has held 1 GPU for 10 s
        loop.sla_guard.want[svc] = 3
        loop.round()
        loop.round()  # the resize (done at once here) is reaped
        assert len(loop.runs[svc].nodes) == 3
        run.resized_at = time.time() - 5.0  # ... and 3 GPUs for 5 s
        rt.end(svc, OutcomeKind.FINISHED, result={"status": "finished"})
        loop.round()
        history = store.get(svc).history
        assert history.attained_service == pytest.approx(10.0 + 15.0, abs=1.0)
        assert history.most_gpus == 3
    finally:
        loop.release(grace_s=5)


def test_a_tuned_service_starts_on_its_tuned_replicas(store: JobStore, tmp_path: Path) -> None:
    rt = LocalRuntime([("n0", 3)])
    loop = _loop(store, tmp_path, rt)
    try:
        svc = store.submit(parse_spec({**ENDPOINT, "tuning": {"enabled": True}})).id
        loop.round()
        assert rt.launches[-1].kind == "tune"
        loop.round()
        config: dict[str, Any] = {"micro_batch": 8, "gpus": 2, "max_delay_ms": 2.0}
        answer = {"run": True, "config": config, "cache": "miss", "trials": 3}
        rt.end(svc, OutcomeKind.FINISHED, "tuned", answer)
        loop.round()  # requeued tuned ...
        loop.round()  # ... and started on the 2 replicas it was tuned to, not its gpus.min
        launch = rt.launches[-1]
        assert launch.kind == "run" and len(launch.nodes) == 2
        assert launch.spec.run.data_parallel == 2
    finally:
        loop.release(grace_s=5)


def test_an_endpoint_service_scales_up_near_its_end_a_relaunching_one_would_not(
    store: JobStore, tmp_path: Path
) -> None:
    """The case of tests/control/test_service_scaling.py that holds a relaunching service at
    one replica (its start took 8 s, its stream ends in 5 s): resized in place, a service has
    no relaunch to pay for, so it scales."""
    rt = LocalRuntime([("n0", 3)], resize_ends=False)
    loop = _loop(store, tmp_path, rt)
    try:
        svc = store.submit(parse_spec(ENDPOINT)).id
        loop.round()
        loop.round()
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
        assert loop.sla_guard.want == {svc: 3}
        loop.round()
        assert rt.resizes == [(svc, ("n0", "n0", "n0"))] and rt.stops == []
    finally:
        loop.release(grace_s=5)


def _lone(store: JobStore, svc: str) -> None:
    """The window of one replica carrying 60 req/s alone before its scale-up: busy all the
    time, a backlog (served 50): 1.0 x 60/50 = 1.2 replicas' time, 2 replicas at 60% busy."""
    _window(
        store,
        svc,
        window_p99_ms=9.0,
        window_offered_rps=60.0,
        window_served_rps=50.0,
        window_busy=1.0,
    )


def _ready(store: JobStore, svc: str, n: int) -> None:
    """The service's endpoint has ``n`` ready replicas (as their workers say when they join)."""
    key = service_keys(store.namespace, svc)["ready"]
    store.client.delete(key)
    until = json.dumps({"until": time.time() + 3600})
    store.client.hset(key, mapping={f"r{i}": until for i in range(n)})


def test_a_service_just_scaled_up_is_not_scaled_again_on_its_lone_replicas_window(
    store: JobStore, tmp_path: Path
) -> None:
    # right after a scale-up in place, and until the new replica serves, the window is the lone
    # replica's (busy 100%), and the load rule scales it by the 2 replicas held: 2.4 replicas'
    # time, "3 needed". The guard decides again SETTLE_S after every replica is ready.
    from orchestrator.control.sla_guard import READY_WAIT_S, SETTLE_S
    from workers.serve_run import LOAD_WINDOW_S

    assert SETTLE_S >= LOAD_WINDOW_S  # the busy share's window, over which the count mixes
    rt = LocalRuntime([("n0", 3)], resize_ends=False)
    loop = _loop(store, tmp_path, rt)
    try:
        svc = store.submit(parse_spec(ENDPOINT)).id
        loop.round()
        loop.round()
        _ready(store, svc, 1)
        _lone(store, svc)
        _checks(loop)
        assert loop.sla_guard.want == {svc: 2}
        loop.round()
        rt.resized(svc)  # the new replica's worker is up; its model still loads
        loop.round()
        run = loop.runs[svc]
        assert len(run.nodes) == 2 and run.resized_at is not None
        guard, done = loop.sla_guard, run.resized_at

        def checks(*after: float) -> None:
            for dt in after:
                _lone(store, svc)  # the worker's next report: still the lone replica's window
                guard._checked = 0.0
                guard.check(loop.runs, done + dt)

        checks(0.6, 1.2, 2.4, 6.0, 12.0, 20.0)  # not ready yet: however long, no decision
        assert guard.want == {}, store.events(svc)
        _ready(store, svc, 2)
        checks(21.0, 22.0, 21.0 + SETTLE_S - 0.1)  # ready at 21 s: 5 s of a window of the two
        assert guard.want == {}, store.events(svc)
        checks(21.0 + SETTLE_S, 21.6 + SETTLE_S)  # then its window says more: after the hold
        assert guard.want == {svc: 3}

        # a replica that never gets ready does not freeze its scaling
        guard.want.clear()
        guard.forget(svc)
        guard.watch(store.get(svc), run.launch.spec, 2)
        _ready(store, svc, 1)
        checks(1.0, READY_WAIT_S)  # the guard waits from when it saw the resize (at 1 s)
        assert guard.want == {}
        checks(READY_WAIT_S + 1.1, READY_WAIT_S + 1.7)
        assert guard.want == {svc: 3}
    finally:
        loop.release(grace_s=5)
