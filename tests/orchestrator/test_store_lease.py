"""The scheduler lease on a real Redis: one holder at a time, takeover of a dead holder,
loss on a takeover or on failed renewals."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time

import pytest
import redis

from orchestrator.store import JobStore, Lease, LeaseLost, SchedulerBusy


def _lease(store: JobStore, owner: str, ttl_ms: int = 15_000) -> Lease:
    return store.lease(owner, ttl_ms)


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
    store.client.set(store.keys.scheduler_lease, holder, px=15_000)
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


def _outage(lease: Lease) -> object:
    """Point the lease's renewals at a Redis that does not answer; returns the real script."""
    real = lease._renew
    lease._renew = redis.Redis.from_url("redis://127.0.0.1:1/0").register_script("return 1")
    return real


def _wait(cond: object, timeout_s: float = 5.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not cond() and time.monotonic() < deadline:  # type: ignore[operator]
        time.sleep(0.05)


def test_a_redis_outage_pauses_the_lease_and_it_is_taken_back_after(store: JobStore) -> None:
    lease = _lease(store, f"{socket.gethostname()}:{os.getpid()}:z", ttl_ms=300)
    lease.acquire("ns")
    real = _outage(lease)
    _wait(lambda: not lease.held)
    assert not lease.held and not lease.lost
    with pytest.raises(redis.ConnectionError, match="not been renewed"):
        lease.check()  # an outage, not a loss: the loop waits
    _wait(lambda: store.lease_holder() is None)  # it expired meanwhile; nobody took it
    lease._renew = real  # Redis answers again
    _wait(lambda: lease.held)
    lease.check()
    assert store.lease_holder() == lease.owner
    lease.release()


def test_a_lease_taken_by_another_during_an_outage_is_lost(store: JobStore) -> None:
    host = socket.gethostname()
    lease = _lease(store, f"{host}:{os.getpid()}:z", ttl_ms=300)
    lease.acquire("ns")
    real = _outage(lease)
    _wait(lambda: store.lease_holder() is None)
    other = _lease(store, f"{host}:{os.getpid()}:other", ttl_ms=300)
    other.acquire("ns")  # a standby took it, and gave it back, while we could not renew
    other.release()
    lease._renew = real
    _wait(lambda: lease.lost)
    assert lease.lost and store.lease_holder() is None
    with pytest.raises(LeaseLost):
        lease.check()
    lease.release()


def test_the_lease_lives_under_the_namespace_and_its_holder_is_readable(store: JobStore) -> None:
    assert store.lease_holder() is None
    lease = _lease(store, f"{socket.gethostname()}:{os.getpid()}:h")
    assert lease.key == store.keys.scheduler_lease == f"{store.namespace}:scheduler:lease"
    lease.acquire("ns")
    assert store.lease_holder() == lease.owner
    store.delete_namespace()
    assert store.lease_holder() is None
    lease.release()
