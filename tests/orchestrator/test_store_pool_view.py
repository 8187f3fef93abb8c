"""The pool view the scheduler publishes (``store.pool_view``) on a real Redis."""

from __future__ import annotations

import time

from orchestrator.store import JobStore


def test_the_view_reads_back_until_it_expires(store: JobStore) -> None:
    assert store.pool_view.read() is None  # no scheduler has published one
    view = {"at": 1.5, "scheduler": "h:1:a", "nodes": [{"node_id": "n1", "gpus": 2}], "jobs": {}}
    store.pool_view.publish(view, ttl_ms=60_000)
    assert store.pool_view.read() == view
    assert 0 < store.client.pttl(f"{store.namespace}:pool") <= 60_000
    store.pool_view.publish({**view, "at": 2.5}, ttl_ms=200)  # republished: replaced
    assert store.pool_view.read() == {**view, "at": 2.5}
    deadline = time.monotonic() + 5
    while store.pool_view.read() is not None and time.monotonic() < deadline:
        time.sleep(0.05)
    assert store.pool_view.read() is None  # its scheduler stopped publishing


def test_the_view_lives_under_the_namespace(store: JobStore) -> None:
    store.pool_view.publish({"nodes": []}, ttl_ms=60_000)
    assert store.client.exists(store.keys.pool_view)
    assert store.keys.pool_view == f"{store.namespace}:pool"
    assert store.delete_namespace() == 1
    assert store.pool_view.read() is None


def test_the_pool_history_reads_the_newest_samples_oldest_first(store: JobStore) -> None:
    for i in range(5):
        store.pool_history.append(100.0 + i, 8, i, {"vision": i} if i else {})
    samples = store.pool_history.read(3)
    assert [s["at"] for s in samples] == [102.0, 103.0, 104.0]  # the newest, oldest first
    assert samples[-1] == {"at": 104.0, "gpus": 8, "used": 4, "teams": {"vision": 4}}
    assert store.client.xinfo_stream(store.keys.pool_history)["length"] == 5
