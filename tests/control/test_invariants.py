"""A decision that breaks the policy contract: the same finding live and simulated; the live
loop drops it (and keeps going), the simulator stops with it."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from orchestrator.config import Settings
from orchestrator.control.invariants import check_decisions, guarded
from orchestrator.control.loop import ControlLoop
from orchestrator.runtime.local import LocalRuntime
from orchestrator.sim.engine import Simulator
from orchestrator.sim.errors import PolicyViolation
from orchestrator.sim.trace import TraceJob
from orchestrator.spec import parse_spec
from orchestrator.store import JobStore
from policies import Decision, DecisionKind, NodeView, QueuedJob, RunningJob, Snapshot
from policies.scheduling import SchedulingPolicy, TeamCaps

NODES = (NodeView("n0", 2, 1),)
QUEUE = (QueuedJob("q", "bulk", "t", 1, 2, 0.0),)
RUNNING = (RunningJob("r", "bulk", "t", ("n0",), seq=1),)
SNAP = Snapshot(NODES, QUEUE, RUNNING)


@pytest.mark.parametrize(
    ("decisions", "problem"),
    [
        ([Decision(DecisionKind.START, "r", nodes=("n0",))], "START for r, which is not queued"),
        ([Decision(DecisionKind.PREEMPT, "q")], "PREEMPT for q, which is not running"),
        ([Decision(DecisionKind.START, "q", nodes=("n0", "n0"))], "on 2 GPUs; it runs on 1..1"),
        (
            [Decision(DecisionKind.START, "q", nodes=("n0",))] * 2,
            "START for q, which is not queued",
        ),
        ([Decision(DecisionKind.WAIT, "nobody")], "not in the snapshot"),
    ],
)
def test_broken_decisions_are_named(decisions: list[Decision], problem: str) -> None:
    _, broken = check_decisions(SNAP, decisions)
    assert problem in broken[-1][1]


def test_gpus_freed_earlier_in_the_round_may_be_taken() -> None:
    full = Snapshot((NodeView("n0", 1, 0),), QUEUE, RUNNING)
    ok = [Decision(DecisionKind.PREEMPT, "r"), Decision(DecisionKind.START, "q", nodes=("n0",))]
    assert check_decisions(full, ok) == (ok, [])
    kept, broken = check_decisions(full, ok[1:])
    assert not kept and "1 GPUs on n0, 0 free" in broken[0][1]


def test_a_cycle_of_moves_keeps_the_contract_only_when_moves_are_atomic() -> None:
    # two jobs swap nodes: one after the other, the first finds the other's GPUs taken; the
    # simulator's atomic_moves (reproductions of published simulators) frees both first
    nodes = (NodeView("a", 2, 0), NodeView("b", 2, 0))
    running = (
        RunningJob("x", "bulk", "t", ("a", "a"), seq=0),
        RunningJob("y", "bulk", "t", ("b", "b"), seq=1),
    )
    swap = [
        Decision(DecisionKind.RESIZE, "x", nodes=("b", "b")),
        Decision(DecisionKind.RESIZE, "y", nodes=("a", "a")),
    ]
    snap = Snapshot(nodes, (), running)
    kept, broken = check_decisions(snap, swap)
    assert kept == [] and "2 GPUs on b, 0 free" in broken[0][1]
    assert check_decisions(snap, swap, atomic_moves=True) == (swap, [])
    # atomic or not, a move may not take GPUs nobody lets go of
    grab = [Decision(DecisionKind.RESIZE, "x", nodes=("b", "b", "a", "a"))]
    wide = Snapshot(nodes, (), (replace(running[0], max_gpus=4), running[1]))
    assert check_decisions(wide, grab, atomic_moves=True)[1]


def test_both_worlds_run_the_policy_inside_the_team_caps() -> None:
    policy = guarded(_Overbooks())
    assert isinstance(policy, TeamCaps) and guarded(policy) is policy


class _Overbooks(SchedulingPolicy):
    """Starts every queued job on the first node, whatever is free."""

    def decide(self, snapshot: Snapshot) -> list[Decision]:
        first = snapshot.nodes[0].node_id
        return [
            Decision(DecisionKind.START, q.job_id, nodes=(first,) * q.gpus) for q in snapshot.queue
        ]


def test_the_simulator_stops_where_the_live_loop_drops_the_decision(
    store: JobStore, tmp_path: Path
) -> None:
    jobs = [TraceJob("a", 0.0, duration=60), TraceJob("b", 0.0, duration=60)]
    with pytest.raises(PolicyViolation, match=r"start b: 1 GPUs on n0, 0 free"):
        Simulator(jobs, _Overbooks(), [("n0", 1), ("n1", 1)]).run()

    settings = Settings(redis_url="unused", namespace=store.namespace, data_dir=tmp_path)
    rt = LocalRuntime([("n0", 1), ("n1", 1)])
    loop = ControlLoop(settings, store, rt, _Overbooks())
    loop.lease.acquire(store.namespace)
    try:
        spec = {"team": "t", "class": "bulk", "workload": "mlp", "run": {"steps": 5}}
        spec["sla"] = {"throughput": {"min_samples_per_s": 1}}
        a = store.submit(parse_spec({"name": "a", **spec})).id
        b = store.submit(parse_spec({"name": "b", **spec})).id
        kept = loop.round()
        assert [d.job_id for d in kept] == [a] and loop.violations == 1
        assert [launch.job_id for launch in rt.launches] == [a]
        assert store.get(b).state.value == "queued"  # dropped, not reshaped onto n1
    finally:
        loop.release(grace_s=2)
