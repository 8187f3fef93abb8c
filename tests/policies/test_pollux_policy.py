"""The reproduced Pollux policy: the ramp, the fair mean, interference avoidance, determinism."""

from __future__ import annotations

from collections import Counter
from dataclasses import replace

import pytest
from hypothesis import HealthCheck, given, settings

from policies import DecisionKind, NodeView, QueuedJob, RunningJob, Snapshot
from policies.scheduling import PolluxSchedulingPolicy
from policies.scheduling.pollux_search import EPSILON
from tests.policies.test_scheduling_contract import apply, snapshots

NODES = tuple(NodeView(f"n{i}", 4, 4) for i in range(4))


def _sizes(snap: Snapshot, **kwargs: object) -> dict[str, int]:
    held = apply(snap, PolluxSchedulingPolicy(**kwargs).decide(snap))  # type: ignore[arg-type]
    return {job: len(nodes) for job, nodes in held.items()}


def test_a_job_ramps_up_by_doubling() -> None:
    # a new job gets one GPU, however many are free; a job on 2 GPUs at most 4
    queue = (QueuedJob("new", "bulk", "t", 1, 0, 0.0, min_gpus=1, max_gpus=16),)
    assert _sizes(Snapshot(NODES, queue, now=600.0)) == {"new": 1}
    nodes = (NodeView("n0", 4, 2), *NODES[1:])
    running = (
        RunningJob("r", "bulk", "t", ("n0", "n0"), submitted_at=0.0, min_gpus=1, max_gpus=16),
    )
    assert _sizes(Snapshot(nodes, running=running, now=600.0)) == {"r": 4}
    assert _sizes(Snapshot(nodes, running=running, now=600.0), ramp=False) == {"r": 16}
    # a job that has run on 8 GPUs before is trusted up to 16 at once (the artifact's ramp
    # is twice the largest allocation measured, not twice the current one)
    shrunk = (replace(running[0], most_gpus=8),)
    assert _sizes(Snapshot(nodes, running=shrunk, now=600.0)) == {"r": 16}


def test_the_restart_penalty_subtracts_the_restarts_so_far_from_the_age() -> None:
    # Pollux's factor max(age - restarts x restart, 0) / (age + restart): after 20 restarts of
    # 30 s in its 600 s, any change is worth nothing to the job
    nodes = (NodeView("n0", 4, 2), *NODES[1:])
    running = (
        RunningJob("r", "bulk", "t", ("n0", "n0"), submitted_at=0.0, min_gpus=1, max_gpus=16),
    )
    policy = PolluxSchedulingPolicy()
    snap = Snapshot(nodes, running=running, now=600.0)
    fresh = policy.problem(snap, running)
    tired = policy.problem(snap, (replace(running[0], restarts=20),))
    kept = 2  # the count it holds costs the same either way
    assert tired.cost[0][kept] == fresh.cost[0][kept]
    assert all(tired.cost[0][n] > fresh.cost[0][n] for n in (1, 3, 4))
    assert _sizes(Snapshot(nodes, running=(replace(running[0], restarts=20),), now=600.0)) == {
        "r": 2
    }


def test_the_fair_share_baseline_may_come_from_the_caller() -> None:
    # speedups are relative to the goodput at the fair share; the artifact's is on one node,
    # which the caller's fair_rate says: twice the baseline, half each speedup
    nodes = (NodeView("n0", 4, 2), *NODES[1:])
    running = (
        RunningJob("r", "bulk", "t", ("n0", "n0"), submitted_at=0.0, min_gpus=1, max_gpus=16),
    )
    snap = Snapshot(nodes, running=running, now=600.0)
    packed = PolluxSchedulingPolicy().problem(snap, running)
    calls: list[tuple[str, int]] = []

    def fair_rate(job: str, gpus: int) -> float:
        calls.append((job, gpus))
        return 2.0 * gpus  # linear speedups, twice the packed baseline

    one_node = PolluxSchedulingPolicy(fair_rate=fair_rate).problem(snap, running)
    assert calls == [("r", 16)]  # one job, 16 GPUs: the fair share is all of them
    for n in (1, 2, 4):  # cost (s + EPSILON) ** -1 (the harmonic mean)
        half = 1 / one_node.cost[0][n] - EPSILON
        assert 2 * half == pytest.approx(1 / packed.cost[0][n] - EPSILON)


def test_every_job_gets_a_gpu_before_one_gets_more() -> None:
    # the harmonic mean: a running job holding the whole node gives one GPU to a new one
    nodes = (NodeView("n0", 4, 0),)
    running = (
        RunningJob(
            "big",
            "bulk",
            "t",
            ("n0",) * 4,
            submitted_at=0.0,
            min_gpus=1,
            max_gpus=4,
            attained_service=36000.0,
        ),
    )
    queue = (QueuedJob("new", "bulk", "t", 1, 1, 500.0, min_gpus=1, max_gpus=4),)
    sizes = _sizes(Snapshot(nodes, queue, running, now=600.0))
    assert sizes["new"] == 1 and sizes["big"] == 3


def test_least_attained_service_is_served_first() -> None:
    # one GPU, two queued rigid jobs alike but for their service: the one with less starts
    nodes = (NodeView("n0", 1, 1),)
    queue = (
        QueuedJob("old", "bulk", "t", 1, 0, 0.0, attained_service=5000.0),
        QueuedJob("young", "bulk", "t", 1, 1, 0.0, attained_service=60.0),
    )
    decisions = PolluxSchedulingPolicy().decide(Snapshot(nodes, queue, now=600.0))
    kinds = {(d.kind, d.job_id) for d in decisions}
    assert kinds == {(DecisionKind.WAIT, "old"), (DecisionKind.START, "young")}


@settings(suppress_health_check=[HealthCheck.differing_executors], max_examples=60, deadline=None)
@given(snap=snapshots())
def test_placed_jobs_that_span_nodes_share_no_node(snap: Snapshot) -> None:
    decisions = PolluxSchedulingPolicy().decide(snap)
    assert decisions == PolluxSchedulingPolicy().decide(snap)  # deterministic for a snapshot
    held = apply(snap, decisions)
    moved = {d.job_id for d in decisions if d.kind in (DecisionKind.START, DecisionKind.RESIZE)}
    spread = {job: set(nodes) for job, nodes in held.items() if len(set(nodes)) > 1}
    use = Counter(n for nodes in spread.values() for n in nodes)
    for job in moved & spread.keys():
        assert all(use[n] == 1 for n in spread[job]), (job, held)
