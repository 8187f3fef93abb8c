"""Throughput per GPU count of elastic jobs (``store.scaling``) on a real Redis."""

from __future__ import annotations

from orchestrator.store import JobStore


def test_throughputs_kept_per_size(store: JobStore) -> None:
    store.scaling.record("j1", 2, 123.5)
    store.scaling.record("j1", 4, 0.0)  # nothing measured: ignored
    store.scaling.record("j1", 1, 70.0)
    store.scaling.record("j1", 1, 64.25)  # the latest run on a size replaces older ones
    assert store.scaling.read("j1") == {1: 64.25, 2: 123.5}
    assert store.scaling.read("j2") == {}


def test_throughputs_live_under_the_namespace(store: JobStore) -> None:
    store.scaling.record("j1", 2, 10.0)
    assert store.client.hgetall(f"{store.namespace}:scaling:j1") == {"2": "10"}
    assert store.delete_namespace() == 1
    assert store.scaling.read("j1") == {}
