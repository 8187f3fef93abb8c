"""The first scheduling policy: class-FIFO queue, gang placement, no backfill."""

from __future__ import annotations

from collections import Counter

import pytest
from hypothesis import given
from hypothesis import strategies as st

from policies import (
    SCHEDULING_POLICIES,
    DecisionKind,
    GangSchedulingPolicy,
    NodeView,
    QueuedJob,
    Snapshot,
)


def job(i: int, cls: str = "bulk", gpus: int = 1) -> QueuedJob:
    return QueuedJob(f"j{i}", cls, "team", gpus, seq=i, submitted_at=float(i))


def nodes(*free: int) -> tuple[NodeView, ...]:
    return tuple(NodeView(f"n{i}", max(f, 4), f) for i, f in enumerate(free))


def started(snapshot: Snapshot) -> list[str]:
    decisions = GangSchedulingPolicy().decide(snapshot)
    return [d.job_id for d in decisions if d.kind is DecisionKind.START]


def test_interactive_before_bulk_and_fifo_within_class() -> None:
    queue = (job(1), job(2, "interactive"), job(3), job(4, "interactive"))
    snap = Snapshot(nodes(2), queue)
    assert started(snap) == ["j2", "j4"]
    snap = Snapshot(nodes(3), queue)
    assert started(snap) == ["j2", "j4", "j1"]


def test_a_job_that_cannot_fit_waits_and_blocks_later_ones() -> None:
    snap = Snapshot(nodes(2, 1), (job(1, gpus=4), job(2, gpus=1)))
    decisions = GangSchedulingPolicy().decide(snap)
    assert [d.kind for d in decisions] == [DecisionKind.WAIT, DecisionKind.WAIT]
    assert "needs 4 GPUs; 3 free" in decisions[0].reason
    assert "queued behind j1" in decisions[1].reason


def test_a_job_larger_than_the_pool_does_not_block() -> None:
    snap = Snapshot(nodes(4, 4), (job(1, gpus=16), job(2, gpus=2)))
    decisions = GangSchedulingPolicy().decide(snap)
    assert decisions[0].kind is DecisionKind.WAIT and "the pool has 8" in decisions[0].reason
    assert decisions[1].kind is DecisionKind.START


def test_pack_keeps_a_4_gpu_gang_on_one_node() -> None:
    snap = Snapshot(nodes(2, 4, 3), (job(1, gpus=4),))
    (decision,) = GangSchedulingPolicy().decide(snap)
    assert decision.nodes == ("n1",) * 4 and decision.strategy == "PACK"


def test_selected_by_name() -> None:
    policy = SCHEDULING_POLICIES.create("gang", queue="fifo", placement="spread")
    assert isinstance(policy, GangSchedulingPolicy)
    assert started(Snapshot(nodes(1), (job(1), job(2, "interactive")))) == ["j2"]
    fifo = policy.decide(Snapshot(nodes(1), (job(1), job(2, "interactive"))))
    assert [d.job_id for d in fifo if d.kind is DecisionKind.START] == ["j1"]


jobs_st = st.lists(
    st.tuples(st.sampled_from(["bulk", "interactive"]), st.integers(min_value=1, max_value=6)),
    max_size=12,
).map(lambda xs: tuple(job(i, c, g) for i, (c, g) in enumerate(xs)))
free_st = st.lists(st.integers(min_value=0, max_value=8), min_size=1, max_size=5)


@given(queue=jobs_st, free=free_st)
def test_never_more_gpus_than_free_and_deterministic(
    queue: tuple[QueuedJob, ...], free: list[int]
) -> None:
    snap = Snapshot(nodes(*free), queue)
    policy = GangSchedulingPolicy()
    decisions = policy.decide(snap)
    assert decisions == policy.decide(snap)
    assert sorted(d.job_id for d in decisions) == sorted(j.job_id for j in queue)
    used = Counter(n for d in decisions if d.kind is DecisionKind.START for n in d.nodes)
    for node in snap.nodes:
        assert used[node.node_id] <= node.free_gpus
    by_id = {j.job_id: j for j in queue}
    for d in decisions:
        if d.kind is DecisionKind.START:
            assert len(d.nodes) == by_id[d.job_id].gpus


@given(queue=jobs_st, free=free_st)
def test_no_bulk_starts_while_an_interactive_job_waits(
    queue: tuple[QueuedJob, ...], free: list[int]
) -> None:
    snap = Snapshot(nodes(*free), queue)
    decisions = GangSchedulingPolicy().decide(snap)
    kinds = {d.job_id: d.kind for d in decisions}
    fits_pool = [j for j in queue if j.gpus <= snap.total_gpus]
    waiting_interactive = [
        j
        for j in fits_pool
        if j.job_class == "interactive" and kinds[j.job_id] is DecisionKind.WAIT
    ]
    if waiting_interactive:
        assert all(kinds[j.job_id] is DecisionKind.WAIT for j in fits_pool if j.job_class == "bulk")


def test_unknown_queue_name() -> None:
    with pytest.raises(ValueError, match="valid: class-fifo, fifo, las, priority-ageing, sla"):
        GangSchedulingPolicy(queue="lifo")


@pytest.mark.parametrize("name", ["gang", "static-partition", "strict-priority"])
def test_the_first_blocked_job_says_why_and_the_rest_wait_behind_it(name: str) -> None:
    snap = Snapshot(nodes(2, 1), (job(1, gpus=4), job(2, gpus=1)))  # 3 free of 8
    decisions = {d.job_id: d for d in SCHEDULING_POLICIES.create(name).decide(snap)}
    assert decisions["j1"].kind is DecisionKind.WAIT
    assert "queued behind" not in decisions["j1"].reason  # never "queued behind" itself
    assert decisions["j2"].reason == "queued behind j1"
