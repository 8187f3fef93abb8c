"""The scheduler's decision table for ended runs (pure), and its lease on real Redis."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time

import pytest
import redis

from orchestrator.launcher import Outcome, OutcomeKind
from orchestrator.lease import Lease, LeaseLost, SchedulerBusy
from orchestrator.scheduler import MAX_ATTEMPTS, next_state
from orchestrator.store import JobStore
from orchestrator.store.states import JobState

RUNNING, CANCELLING, PLACED = JobState.RUNNING, JobState.CANCELLING, JobState.PLACED


@pytest.mark.parametrize(
    ("state", "kind", "attempts", "requeue", "target"),
    [
        (RUNNING, OutcomeKind.FINISHED, 1, False, JobState.FINISHED),
        (CANCELLING, OutcomeKind.FINISHED, 1, False, JobState.FINISHED),  # the work was done
        (CANCELLING, OutcomeKind.STOPPED, 1, False, JobState.CANCELLED),
        (CANCELLING, OutcomeKind.LOST, 1, False, JobState.CANCELLED),
        (RUNNING, OutcomeKind.FAILED, 1, False, JobState.FAILED),  # a workload error: no retry
        (RUNNING, OutcomeKind.STOPPED, 1, False, JobState.CANCELLED),
        (RUNNING, OutcomeKind.STOPPED, 1, True, JobState.QUEUED),  # scheduler shutting down
        (RUNNING, OutcomeKind.LOST, 1, False, JobState.QUEUED),
        (RUNNING, OutcomeKind.LOST, MAX_ATTEMPTS - 1, False, JobState.QUEUED),
        (RUNNING, OutcomeKind.LOST, MAX_ATTEMPTS, False, JobState.FAILED),
        (PLACED, OutcomeKind.LOST, 0, False, JobState.QUEUED),  # never started: no attempt used
    ],
)
def test_next_state(
    state: JobState, kind: OutcomeKind, attempts: int, requeue: bool, target: JobState
) -> None:
    got, message = next_state(state, Outcome(kind, "why"), attempts, requeue_stopped=requeue)
    assert got is target
    if target is JobState.FAILED and kind is OutcomeKind.LOST:
        assert message == f"gave up after {attempts} attempts: why"


def _lease(store: JobStore, owner: str, ttl_ms: int = 15_000) -> Lease:
    return Lease(store.client, store.keys.key("scheduler", "lease"), owner, ttl_ms)


def test_a_second_scheduler_is_refused_until_the_first_releases(store: JobStore) -> None:
    host = socket.gethostname()
    first = _lease(store, f"{host}:{os.getpid()}:a")
    first.acquire("ns")
    second = _lease(store, f"{host}:{os.getpid()}:b")
    with pytest.raises(SchedulerBusy, match="another scheduler"):
        second.acquire("ns")
    first.release()
    second.acquire("ns")
    assert second.held
    first.release()  # compare-and-delete: the successor's lease survives
    assert store.client.get(second.key) == second.owner
    second.release()
    assert not store.client.exists(second.key)


def test_the_lease_of_a_dead_process_on_this_host_is_taken_over(store: JobStore) -> None:
    dead = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"],
        capture_output=True,
        text=True,
        check=True,
    )
    holder = f"{socket.gethostname()}:{dead.stdout.strip()}:gone"
    store.client.set(store.keys.key("scheduler", "lease"), holder, px=15_000)
    lease = _lease(store, f"{socket.gethostname()}:{os.getpid()}:new")
    lease.acquire("ns")
    assert store.client.get(lease.key) == lease.owner
    lease.release()


def test_a_lease_taken_by_another_is_lost_and_checks_raise(store: JobStore) -> None:
    lease = _lease(store, f"{socket.gethostname()}:{os.getpid()}:x", ttl_ms=600)
    lease.acquire("ns")
    store.client.set(lease.key, "elsewhere:1:y", px=60_000)  # taken over behind our back
    deadline = time.monotonic() + 5
    while lease.held and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not lease.held
    with pytest.raises(LeaseLost):
        lease.check()
    lease.release()
    assert store.client.get(lease.key) == "elsewhere:1:y"


def test_a_lease_not_renewed_for_its_ttl_counts_as_lost(redis_url: str, store: JobStore) -> None:
    lease = _lease(store, f"{socket.gethostname()}:{os.getpid()}:z", ttl_ms=300)
    lease.acquire("ns")
    # Point the renewals at a Redis that does not answer: they fail, the TTL passes.
    lease._renew = redis.Redis.from_url("redis://127.0.0.1:1/0").register_script("return 1")
    deadline = time.monotonic() + 5
    while lease.held and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not lease.held
    lease.release()


def test_only_runs_lost_after_starting_count_towards_giving_up(
    store: JobStore, redis_url: str
) -> None:
    from orchestrator.config import Settings
    from orchestrator.scheduler import Scheduler
    from orchestrator.services import make_policy
    from orchestrator.spec import parse_spec

    spec = parse_spec(
        {
            "name": "lossy",
            "team": "t",
            "class": "bulk",
            "workload": "mlp",
            "sla": {"throughput": {"min_samples_per_s": 1}},
            "run": {"steps": 5},
        }
    )
    settings = Settings(redis_url=redis_url, namespace=store.namespace)
    sched = Scheduler(settings, store, None, make_policy("gang"), redis_url)  # type: ignore[arg-type]
    job = store.submit(spec).id
    lost = Outcome(OutcomeKind.LOST, "worker lost")
    store.transition(job, PLACED)  # Ray could not place it: not a lost run
    sched._record(job, lost, requeue_stopped=False)
    rec = store.get(job)
    assert rec.state is JobState.QUEUED and "losses" not in rec.fields
    for n in range(1, MAX_ATTEMPTS + 1):
        store.transition(job, PLACED)
        store.transition(job, RUNNING)
        sched._record(job, lost, requeue_stopped=False)
        rec = store.get(job)
        if n < MAX_ATTEMPTS:
            assert (rec.state, rec.fields["losses"]) == (JobState.QUEUED, str(n))
    assert rec.state is JobState.FAILED
    assert rec.message == f"gave up after {MAX_ATTEMPTS} attempts: worker lost"
