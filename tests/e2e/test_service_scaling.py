"""A live service scaled by the SLA guard (issue 24): real Redis, Ray and control loop. Its
offered load (an arrival trace) doubles: the guard scales it to more replicas, the loop
relaunches it there going on where its stream is; the load falls: it scales down again."""

from __future__ import annotations

import random
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from orchestrator.spec import parse_spec
from orchestrator.store.states import JobState
from tests.e2e.conftest import Orch, start_orch

REQUEST_MS = 25.0  # each request's cost (tests/e2e/paced_service.py): 16 req/s keep one
RATE = 16.0  # replica 40% busy, under the 60% it is sized for; 32 req/s 80%: it scales up
# (until, req/s) in stream time; the last phase is long (the test cancels the service once it
# has scaled down) since the guard scales down only with two relaunches' time left of the
# stream, and a relaunch takes 10-20 s on a loaded 2-core test machine
PHASES = ((4.0, RATE), (18.0, 2 * RATE), (120.0, RATE / 4))


def _trace() -> list[float]:
    """Seeded Poisson arrivals at each phase's rate: the load doubles at 4 s, falls at 18 s."""
    rng, out, start = random.Random(0), [], 0.0
    for until, rate in PHASES:
        t = start + rng.expovariate(rate)
        while t < until:
            out.append(round(t, 4))
            t += rng.expovariate(rate)
        start = until
    return out


@pytest.fixture
def scaled(ray_cluster: Any, redis_url: str, namespace: str, tmp_path: Path) -> Iterator[Orch]:
    """A ``shared`` scheduler whose guard holds 1 s before scaling up (2 s down)."""
    o = start_orch(
        ray_cluster.address, redis_url, namespace, tmp_path, policy="shared", guard_hold_s=1.0
    )
    yield o
    o.running.shutdown()
    o.store.delete_namespace()


def _scaled(orch: Orch, job_id: str, prefix: str, timeout_s: float = 120) -> str:
    """The job's first ``guard`` event that starts with ``prefix`` (waits for it)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        for e in orch.store.events(job_id):
            if e["event"] == "guard" and e["message"].startswith(prefix):
                return str(e["message"])
        rec = orch.store.get(job_id)
        assert rec.state not in (JobState.FINISHED, JobState.FAILED), rec.message
        time.sleep(0.2)
    pytest.fail(f"no {prefix!r} event; events: {[e['message'] for e in orch.store.events(job_id)]}")


def _running_on(orch: Orch, job_id: str, gpus: int, timeout_s: float = 120) -> None:
    """Wait until the job runs on ``gpus`` GPUs (its relaunch after a resize is up)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        rec = orch.store.get(job_id)
        nodes = (rec.placement or {}).get("nodes", [])
        if rec.state is JobState.RUNNING and len(nodes) == gpus:
            return
        assert rec.state not in (JobState.FINISHED, JobState.FAILED), rec.message
        time.sleep(0.2)
    pytest.fail(f"{job_id} never ran on {gpus} GPUs")


def test_a_service_scales_up_when_its_load_doubles_and_down_when_it_falls(scaled: Orch) -> None:
    spec = parse_spec(
        {
            "name": "paced-svc",
            "team": "e2e",
            "class": "interactive",
            "workload": {
                "entry": "tests.e2e.paced_service:build",
                "args": {"request_ms": REQUEST_MS, "hidden": 16, "n_layer": 1},
            },
            # a loose ceiling: the load is what this test moves (the tail's own trigger is
            # covered by tests/policies/test_replicas.py); on a loaded test machine a queue's
            # tail can reach seconds, and a tail over half the ceiling holds a scale-down back
            "sla": {"latency": {"percentile": 99, "max_ms": 60000}},
            "resources": {"gpus": {"min": 1, "max": 3}},
            "run": {"micro_batch": 1, "duration_s": PHASES[-1][0]},
            "serve": {"trace": _trace(), "max_delay_ms": 0, "endpoint": False},
        }
    )
    job_id = scaled.store.submit(spec).id
    _running_on(scaled, job_id, 1)
    began = _this_runs(scaled, job_id, "stream_started_at")

    up = _scaled(scaled, job_id, "guard: scaling 1 -> ")
    n = int(up.split(" -> ")[1].split()[0])
    assert n >= 2 and "offered" in up, up
    offered = float(up.split("offered ")[1].split()[0].replace(",", ""))
    assert offered >= 1.5 * RATE, up  # it scaled on the doubled load, not on the first phase
    _running_on(scaled, job_id, n)
    # the relaunch went on with the stream that began with the first run (not a new one)
    assert _this_runs(scaled, job_id, "stream_started_at") == began

    down = _scaled(scaled, job_id, f"guard: scaling {n} -> {n - 1} replicas")
    offered = float(down.split("offered ")[1].split()[0].replace(",", ""))
    assert offered < RATE, down  # on the fallen load
    _running_on(scaled, job_id, n - 1)
    scaled.store.cancel(job_id)
    scaled.wait(job_id, {JobState.CANCELLED, JobState.FINISHED}, timeout_s=60)
    said = [e["message"] for e in scaled.store.events(job_id)]
    assert any(m.startswith(f"resized from 1 to {n} GPUs") for m in said), said
    assert any(m.startswith(f"resized from {n} to {n - 1} GPUs") for m in said), said


def _this_runs(orch: Orch, job_id: str, key: str, timeout_s: float = 60) -> Any:
    """``key`` as the job's current run reports it (waits for that run's first report)."""
    started = float(orch.store.get(job_id).fields.get("started_at") or 0)
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        got = orch.store.latest_metrics([job_id], ("first_step_at", key)).get(job_id, {})
        if got.get(key) is not None and float(got.get("first_step_at") or 0) >= started - 1:
            return got[key]
        time.sleep(0.2)
    pytest.fail(f"{job_id}'s run never reported {key}")
