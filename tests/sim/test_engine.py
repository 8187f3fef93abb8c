"""Simulator tests on small traces whose outcome is computed by hand."""

from __future__ import annotations

from pathlib import Path

import pytest

from orchestrator.sim import (
    PolicyViolation,
    SimConfig,
    Simulator,
    TraceError,
    TraceJob,
    read_trace,
    uniform_pool,
    write_trace,
)
from policies import SCHEDULING_POLICIES, Decision, DecisionKind, Snapshot
from policies.scheduling import SchedulingPolicy

NO_RESTART = SimConfig(restart_s=0.0, sigma=0.0)


def bulk(name: str, t: float, gpus: int, duration: float, **kw: object) -> TraceJob:
    return TraceJob(name=name, submit_time=t, gpus=gpus, duration=duration, **kw)  # type: ignore[arg-type]


def jcts(jobs: list[TraceJob], policy: str, nodes: int = 1, per: int = 4, **cfg: object) -> dict:
    config = SimConfig(**{"restart_s": 0.0, "sigma": 0.0, **cfg})  # type: ignore[arg-type]
    sim = Simulator(
        jobs, SCHEDULING_POLICIES.create(policy), uniform_pool(nodes, per), config=config
    )
    return {r.name: r.jct for r in sim.run().records}


def test_fifo_by_hand() -> None:
    # 4 GPUs. a: 4 GPUs for 120 s from t=0; b: 2 GPUs for 60 s, submitted at 30.
    # Round at 0: a starts, runs to 120. b joins at the round at 60, waits; at 120 a completes
    # and releases; b starts at 120, ends at 180: JCT 150.
    out = jcts([bulk("a", 0, 4, 120), bulk("b", 30, 2, 60)], "gang")
    assert out == {"a": 120.0, "b": 150.0}


def test_restart_delay_is_added_once_per_start() -> None:
    out = jcts([bulk("a", 0, 1, 100)], "gang", restart_s=30.0)
    assert out == {"a": 130.0}


def test_a_job_submitted_between_rounds_starts_at_the_next_round() -> None:
    out = jcts([bulk("a", 53, 1, 100)], "gang")
    assert out == {"a": 107.0}  # placed at t=60, done at 160


def test_tiresias_preempts_and_keeps_progress() -> None:
    # 1 GPU, threshold 1 GPU-minute. a (300 s) starts at 0; b arrives at 10, joins at 60.
    # At 60 a has 60 GPU-s: demoted, b (queue 0) preempts it and runs 60..120 (done 120);
    # a resumes at 120 with 240 s left: done at 360. No work lost (checkpoint 0).
    jobs = [bulk("a", 0, 1, 300), bulk("b", 10, 1, 60)]
    pol = SCHEDULING_POLICIES.create("tiresias", threshold_gpu_s=60.0)
    sim = Simulator(jobs, pol, uniform_pool(1, 1), config=NO_RESTART)
    res = {r.name: r for r in sim.run().records}
    assert res["b"].jct == 110.0
    assert res["a"].jct == 360.0 and res["a"].preemptions == 1


def test_preemption_loses_work_since_checkpoint() -> None:
    # as above, but a checkpoints every 50 s: preempted at 60 it goes back to 50 s of work
    # done (10 s lost), so it needs 250 s more from 120: done at 370.
    jobs = [bulk("a", 0, 1, 300, checkpoint=50.0), bulk("b", 10, 1, 60)]
    pol = SCHEDULING_POLICIES.create("tiresias", threshold_gpu_s=60.0)
    sim = Simulator(jobs, pol, uniform_pool(1, 1), config=NO_RESTART)
    res = {r.name: r for r in sim.run().records}
    assert res["a"].jct == 370.0 and res["a"].lost_gpu_s == 10.0


def test_elastic_job_grows_with_linear_speedup() -> None:
    # an elastic job (1..4 GPUs, 400 s on 1 GPU, linear) alone on 4 GPUs runs on all 4: 100 s.
    jobs = [bulk("a", 0, 1, 400, max_gpus=4)]
    assert jcts(jobs, "shared") == {"a": 100.0}


def test_interactive_starts_at_once_and_records_attainment() -> None:
    jobs = [
        bulk("a", 0, 4, 600),
        TraceJob(name="i", submit_time=30, job_class="interactive", gpus=1, duration=60),
    ]
    pol = SCHEDULING_POLICIES.create("shared")
    res = Simulator(jobs, pol, uniform_pool(1, 4), config=NO_RESTART).run()
    rec = {r.name: r for r in res.records}
    assert rec["i"].wait == 30.0  # started at the round at 60
    assert res.summary()["interactive_attainment"] == 1.0
    assert rec["a"].preemptions == 1


class _Greedy(SchedulingPolicy):
    def decide(self, snapshot: Snapshot) -> list[Decision]:
        return [Decision(DecisionKind.START, q.job_id, nodes=("n0",) * 8) for q in snapshot.queue]


def test_a_policy_that_over_allocates_is_caught() -> None:
    with pytest.raises(PolicyViolation, match="GPUs on n0"):
        Simulator([bulk("a", 0, 8, 10)], _Greedy(), uniform_pool(1, 4)).run()


def test_trace_round_trip_and_errors(tmp_path: Path) -> None:
    jobs = [bulk("a", 0, 2, 10, deadline=100.0), bulk("b", 5, 1, 20, min_gpus=1, max_gpus=2)]
    write_trace(jobs, tmp_path / "t.csv")
    assert read_trace(tmp_path / "t.csv") == jobs
    (tmp_path / "bad.csv").write_text("name,submit_time,gpus,duration\nx,0,0,5\n")
    with pytest.raises(TraceError, match="gpus must be >= 1"):
        read_trace(tmp_path / "bad.csv")
    with pytest.raises(TraceError, match="not found"):
        read_trace(tmp_path / "missing.csv")
