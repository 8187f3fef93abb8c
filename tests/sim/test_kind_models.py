"""Jobs whose throughput is measured per GPU kind (Sia's layout), in the simulator.

A small inline profile in the artifact's layout (``traces/<app>/placements-<kind>.csv``): the
model runs each kind's measurements, costs a restart where the artifact does, fits per kind,
and the engine moves jobs between kinds, one after another or (for reproductions) at once.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from orchestrator.sim import SimConfig, Simulator, TraceJob
from orchestrator.sim.errors import PolicyViolation
from orchestrator.sim.kind_models import AdaptiveKindModel, FixedBatchKindModel, load_kind_apps
from policies import Decision, DecisionKind, SchedulingPolicy, Snapshot

# slow: 4 GPUs a node, batch 64 at most on one GPU; fast: 8 a node, 128 on one GPU
PLACEMENTS = {
    "slow": "1,32,0.10,0.0\n1,64,0.20,0.0\n2,64,0.22,0.02\n4,64,0.25,0.05\n",
    "fast": "1,32,0.05,0.0\n1,128,0.10,0.0\n2,128,0.11,0.01\n8,128,0.12,0.02\n",
}
SHAPES = (("slow", 4), ("fast", 8))
SLOWDOWN = 2.0
RESCALE_S = 50.0


@pytest.fixture
def traces(tmp_path: Path) -> str:
    app = tmp_path / "cifar10"
    app.mkdir()
    for kind, rows in PLACEMENTS.items():
        (app / f"placements-{kind}.csv").write_text(
            "placement,local_bsz,step_time,sync_time\n" + rows
        )
        (app / f"scalability-{kind}.csv").write_text(
            "num_nodes,num_replicas,local_bsz,step_time,sync_time\n"
        )
    for bsz, per_epoch in ((128, 10.0), (256, 20.0)):  # 100 epochs of 10 units (the least)
        rows = "".join(f"{per_epoch * (e + 1)},{e},0.5,1.0,1.0\n" for e in range(100))
        (app / f"validation-{bsz}.csv").write_text(
            "progress,iteration,metric,grad_sqr,grad_var\n" + rows
        )
    return str(tmp_path)


def _fixed(traces: str, batch: int = 128) -> FixedBatchKindModel:
    return FixedBatchKindModel(
        load_kind_apps(traces, "cifar10", SHAPES), batch, SLOWDOWN, RESCALE_S
    )


def test_the_batch_splits_by_each_kinds_memory_and_steps_at_its_speed(traces: str) -> None:
    m = _fixed(traces)
    # one slow GPU holds 64: batch 128 is two micro-batches of 64; a fast GPU holds it whole
    assert m.config("slow", (1,)) == (64, 1)
    assert m.config("fast", (1,)) == (128, 0)
    # progress per second: efficiency 1 at the smallest batch, over the step time (an
    # accumulation step costs its compute) and the calibration slowdown
    assert m.goodput("slow", (1,)) == pytest.approx(1 / (0.2 + 0.2) / SLOWDOWN)
    assert m.goodput("fast", (1,)) == pytest.approx(1 / 0.10 / SLOWDOWN)
    # what Gavel predicts on one GPU: at least one accumulation step, micro-batch 64
    fast_64 = 0.05 + (64 - 32) / (128 - 32) * 0.05
    assert m.iteration_rate("fast", 1) == pytest.approx(1 / (2 * fast_64) / SLOWDOWN)


def test_a_move_to_the_same_kind_and_shape_costs_no_restart(traces: str) -> None:
    m = _fixed(traces)
    m.placed(("slow",), (1,), resize=False)
    assert m.start_s(30.0) == RESCALE_S
    m.placed(("slow",), (1,), resize=True)  # other GPUs, same kind and shape: as the artifact
    assert m.start_s(30.0) == 0.0
    m.placed(("fast",), (1,), resize=True)
    assert m.start_s(30.0) == RESCALE_S and m.kind == "fast"
    m.placed(("fast",), (1,), resize=False)  # a start after a preemption restarts
    assert m.start_s(30.0) == RESCALE_S


def test_an_adaptive_job_fits_the_kind_it_ran_on_and_counts_its_restarts(traces: str) -> None:
    m = AdaptiveKindModel(load_kind_apps(traces, "cifar10", SHAPES), 256, SLOWDOWN, RESCALE_S)
    assert m.speedup(3) == (1.0, 1.0, 1.0)  # nothing measured: nothing beyond one GPU
    m.placed(("slow",), (1,), resize=False)
    assert (m.micro, m.accum) == (64, 1) and m.restarts == 0  # the smallest batch, before a fit
    assert m.advance((1,), 30.0) is None
    assert m.perf["slow"] is not None and m.perf["fast"] is None and m.grad is not None
    assert m.max_profiled("slow") == 1 and m.max_profiled("fast") == 0
    m.placed(("fast",), (2,), resize=True)
    assert m.restarts == 1
    # what a policy is shown: its fit on the first fitted kind, trusted to twice the most
    # GPUs it has run on (here 2), flat beyond
    view = m.speedup(4)
    assert view[0] == 1.0 and view[2] == view[3] == view[1] and view[1] > 1.0
    assert (m.micro, m.accum) == (64, 0)  # no fit on this kind yet: the smallest batch again
    m.placed(("fast",), (2,), resize=True)  # same kind and shape: no restart counted
    assert m.restarts == 1


class _Swap(SchedulingPolicy):
    """Starts a on the slow node and b on the fast one, then swaps them every round."""

    def decide(self, snapshot: Snapshot) -> list[Decision]:
        held = {r.job_id: r.nodes for r in snapshot.running}
        if not held:
            return [
                Decision(DecisionKind.START, j.job_id, (n,))
                for j, n in zip(
                    sorted(snapshot.queue, key=lambda j: j.seq), ("s0", "f0"), strict=True
                )
            ]
        if len(held) < 2:
            return []
        return [
            Decision(DecisionKind.RESIZE, "a", held["b"]),
            Decision(DecisionKind.RESIZE, "b", held["a"]),
        ]


def _swap_run(traces: str, *, atomic: bool) -> dict[str, float]:
    jobs = [TraceJob(name=n, submit_time=0.0, app="cifar10") for n in ("a", "b")]
    models = {n: _fixed(traces) for n in ("a", "b")}
    sim = Simulator(
        jobs,
        _Swap(),
        [("s0", 1), ("f0", 1)],
        config=SimConfig(atomic_moves=atomic),
        kinds={"s0": ("slow", 1.0), "f0": ("fast", 1.0)},
        models=dict(models),
    )
    return {r.name: r.completed_at or 0.0 for r in sim.run().records}


def test_jobs_swap_kinds_only_when_moves_are_atomic(traces: str) -> None:
    with pytest.raises(PolicyViolation, match="0 free"):
        _swap_run(traces, atomic=False)
    done = _swap_run(traces, atomic=True)
    # each round: a 50 s restart, then 10 s of work on the kind it moved to (12.5 units on
    # slow, 50 on fast): 62.5 units every two rounds of the 1,000 a job needs, about 32
    # rounds; b, which starts on the fast kind, is ahead by a round's difference
    assert 1800 < done["b"] < done["a"] < done["b"] + 60 < 2100


class _MoveOnce(SchedulingPolicy):
    """Starts the job on n0, moves it to n1 (same kind and shape) in the next round."""

    def decide(self, snapshot: Snapshot) -> list[Decision]:
        if snapshot.queue:
            return [Decision(DecisionKind.START, "a", ("n0",))]
        r = snapshot.running[0]
        if r.nodes == ("n0",):
            return [Decision(DecisionKind.RESIZE, "a", ("n1",))]
        return []


class _Stay(SchedulingPolicy):
    def decide(self, snapshot: Snapshot) -> list[Decision]:
        return [Decision(DecisionKind.START, "a", ("n0",))] if snapshot.queue else []


def test_a_free_move_during_a_restart_keeps_what_is_left_of_it(traces: str) -> None:
    def run(policy: SchedulingPolicy) -> float:
        m = _fixed(traces)
        m.rescale_s = 80.0  # longer than a round: the move comes while it restarts
        sim = Simulator(
            [TraceJob(name="a", submit_time=0.0, app="cifar10")],
            policy,
            [("n0", 1), ("n1", 1)],
            config=SimConfig(atomic_moves=True),
            kinds={"n0": ("slow", 1.0), "n1": ("slow", 1.0)},
            models={"a": m},
        )
        return sim.run().records[0].completed_at or 0.0

    assert run(_MoveOnce()) == run(_Stay())
