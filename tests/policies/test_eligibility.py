"""Every scheduling policy that places jobs honours their ``gpu_memory_gb``."""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from policies import SCHEDULING_POLICIES, DecisionKind, NodeView, QueuedJob, RunningJob, Snapshot
from policies.eligibility import capacity, usable, why_barred
from policies.scheduling import SchedulingPolicy
from tests.policies.test_scheduling_contract import apply, snapshots

# the small node first and emptier: without the rule, every placement would pick it
SMALL = NodeView("n24", 4, 4, gpu_memory_gb=24.0)
BIG = NodeView("n80", 4, 3, gpu_memory_gb=80.0)
NODES = (SMALL, BIG)

PLACING = {
    "gang": {},
    "tiresias": {},
    "static-partition": {"interactive_fraction": 0.0},
    "strict-priority": {},
    "pollux": {},
    "shared": {},
}


def _policy(name: str) -> SchedulingPolicy:
    return SCHEDULING_POLICIES.create(name, **PLACING[name])


@pytest.mark.parametrize("name", sorted(PLACING))
def test_a_40_gb_job_lands_only_on_the_80_gb_node(name: str) -> None:
    queue = (QueuedJob("big", "bulk", "t", 2, 0, 0.0, gpu_memory_gb=40.0),)
    decisions = _policy(name).decide(Snapshot(NODES, queue, now=100.0))
    (start,) = [d for d in decisions if d.job_id == "big"]
    assert start.kind is DecisionKind.START
    assert set(start.nodes) == {"n80"}


@pytest.mark.parametrize("name", ["gang", "tiresias", "strict-priority", "shared"])
def test_an_interactive_40_gb_job_lands_only_on_the_80_gb_node(name: str) -> None:
    queue = (QueuedJob("nb", "interactive", "t", 1, 0, 0.0, gpu_memory_gb=40.0),)
    (start,) = _policy(name).decide(Snapshot(NODES, queue, now=100.0))
    assert start.kind is DecisionKind.START and start.nodes == ("n80",)


@pytest.mark.parametrize("name", sorted(PLACING))
def test_a_job_no_node_can_hold_waits_naming_the_field(name: str) -> None:
    queue = (
        QueuedJob("huge", "bulk", "t", 1, 0, 0.0, gpu_memory_gb=100.0),
        QueuedJob("small", "bulk", "t", 1, 1, 1.0),
    )
    decisions = {d.job_id: d for d in _policy(name).decide(Snapshot(NODES, queue, now=100.0))}
    assert decisions["huge"].kind is DecisionKind.WAIT
    if name != "pollux":  # the published Pollux gives no reasons beyond "waiting for GPUs"
        assert "gpu_memory_gb" in decisions["huge"].reason
    assert decisions["small"].kind is DecisionKind.START  # it holds back nobody


def test_a_grow_takes_no_gpu_on_a_too_small_node() -> None:
    # an elastic job on the big node wants 8 GPUs: it may grow to the big node's 4 only
    running = (
        RunningJob(
            "e", "bulk", "t", ("n80",), min_gpus=1, max_gpus=8, started_at=0.0,
            gpu_memory_gb=40.0,
        ),
    )  # fmt: skip
    nodes = (NodeView("n24", 4, 4, 24.0), NodeView("n80", 4, 3, 80.0))
    for name in ("shared", "pollux"):
        snap = Snapshot(nodes, (), running, now=10_000.0, restart_cost_s=0.0)
        for d in SCHEDULING_POLICIES.create(name).decide(snap):
            assert set(d.nodes) <= {"n80"}, (name, d)


def test_strict_priority_preempts_nothing_that_frees_only_too_small_gpus() -> None:
    nodes = (NodeView("n24", 2, 0, 24.0), NodeView("n80", 2, 0, 80.0))
    running = (
        RunningJob("b24", "bulk", "t", ("n24", "n24"), seq=0, started_at=50.0),
        RunningJob("i80", "interactive", "t", ("n80", "n80"), seq=1, started_at=0.0),
    )
    queue = (QueuedJob("nb", "interactive", "t", 1, 2, 90.0, gpu_memory_gb=40.0),)
    decisions = SCHEDULING_POLICIES.create("strict-priority").decide(
        Snapshot(nodes, queue, running, now=100.0)
    )
    assert [d.kind for d in decisions] == [DecisionKind.WAIT]
    assert "gpu_memory_gb" in decisions[0].reason


def test_shared_preempts_nothing_that_frees_only_too_small_gpus() -> None:
    nodes = (NodeView("n24", 2, 0, 24.0), NodeView("n80", 2, 0, 80.0))
    running = (
        RunningJob("b24", "bulk", "t", ("n24", "n24"), seq=0, started_at=0.0),
        RunningJob("b80", "bulk", "t", ("n80", "n80"), seq=1, started_at=0.0),
    )
    queue = (QueuedJob("nb", "interactive", "t", 1, 2, 90.0, gpu_memory_gb=40.0),)
    decisions = SCHEDULING_POLICIES.create("shared").decide(
        Snapshot(nodes, queue, running, now=1000.0)
    )
    assert not [d for d in decisions if d.kind is DecisionKind.PREEMPT]
    (wait,) = [d for d in decisions if d.job_id == "nb"]
    assert wait.kind is DecisionKind.WAIT and "gpu_memory_gb" in wait.reason


def test_the_helpers_see_the_pool_through_the_rule() -> None:
    snap = Snapshot((*NODES, NodeView("n?", 2, 2)))  # unknown memory: holds any job
    job = QueuedJob("j", "bulk", "t", 1, 0, 0.0, gpu_memory_gb=40.0)
    free = snap.free()
    assert snap.too_small(40.0) == {"n24"} and snap.too_small(None) == frozenset()
    assert dict(usable(free, snap, job)) == {"n80": 3, "n?": 2}
    assert usable(free, snap, dataclasses.replace(job, gpu_memory_gb=None)) is free
    assert capacity(snap, job) == 6
    assert "resources.gpu_memory_gb" in why_barred(snap, job)


@st.composite
def with_memory(draw: st.DrawFn) -> Snapshot:
    """A random snapshot whose nodes have mixed GPU memory and whose jobs need some."""
    snap = draw(snapshots(progress=True))
    sizes = st.sampled_from([None, 16.0, 24.0, 80.0])
    needs = st.sampled_from([None, None, 20.0, 40.0])
    return dataclasses.replace(
        snap,
        nodes=tuple(dataclasses.replace(n, gpu_memory_gb=draw(sizes)) for n in snap.nodes),
        queue=tuple(dataclasses.replace(q, gpu_memory_gb=draw(needs)) for q in snap.queue),
        running=tuple(dataclasses.replace(r, gpu_memory_gb=draw(needs)) for r in snap.running),
    )


@pytest.mark.parametrize("name", sorted(PLACING))
@settings(suppress_health_check=[HealthCheck.differing_executors], max_examples=60, deadline=None)
@given(snap=with_memory())
def test_no_gpu_is_ever_newly_taken_on_a_too_small_node(name: str, snap: Snapshot) -> None:
    decisions = _policy(name).decide(snap)
    apply(snap, decisions)  # and the usual contract still holds
    jobs: dict[str, QueuedJob | RunningJob] = {q.job_id: q for q in snap.queue}
    jobs.update({r.job_id: r for r in snap.running})
    held = {r.job_id: set(r.nodes) for r in snap.running}
    for d in decisions:
        if d.kind in (DecisionKind.START, DecisionKind.RESIZE):
            new = set(d.nodes) - held.get(d.job_id, set())
            assert not new & snap.too_small(jobs[d.job_id].gpu_memory_gb), d
