"""Admission with a plan (issue 26): verdicts and earliest times on hand-computed timelines."""

from __future__ import annotations

import math
from typing import Any

import pytest

from policies import DecisionKind, NodeView, QueuedJob, RunningJob, Snapshot
from policies.scheduling.plan import (
    Timeline,
    plan_admission,
    plan_round,
    plan_round_binding,
    timeline,
)
from policies.scheduling.shared import SharedSchedulingPolicy

NOW = 1000.0
LINEAR = tuple(float(n) for n in range(1, 9))


def _run(job_id: str, gpus: int, left: float | None, due: float | None = 1e9) -> RunningJob:
    """A running deadline job (``due`` None: best effort)."""
    return RunningJob(job_id, "bulk", "a", ("n0",) * gpus, remaining_work=left, deadline=due)


def _job(
    job_id: str, gpus: int, work: float, deadline: float, seq: int = 9, **kw: int
) -> QueuedJob:
    return QueuedJob(
        job_id, "bulk", "a", gpus, seq, NOW, deadline=deadline, remaining_work=work, **kw
    )


def _snap(
    free: int, running: tuple[RunningJob, ...] = (), queue: tuple[QueuedJob, ...] = ()
) -> Snapshot:
    total = free + sum(r.gpus for r in running)
    return Snapshot((NodeView("n0", total, free),), queue, running, now=NOW, restart_cost_s=30.0)


def test_best_effort_jobs_gpus_are_free_in_the_plan() -> None:
    # 2 free; a best-effort job (no deadline) on 4 and a declined deadline job on 2 are the
    # deadline class's victims: 8 free now; an interactive job holds its 2 for good
    inter = RunningJob("i", "interactive", "a", ("n0",) * 2)
    running = (_run("be", 4, 500.0, due=None), _run("no", 2, 100.0), inter)
    snap = _snap(2, running)
    declined = Snapshot(snap.nodes, (), running, now=NOW, declined=frozenset({"no"}))
    assert timeline(snap).steps() == [(NOW, 6), (NOW + 100.0, 8)]
    assert timeline(declined).steps() == [(NOW, 8)]


def test_the_timeline_frees_running_jobs_gpus_when_their_work_is_done() -> None:
    # 2 free now; a 4-GPU job frees at +500, a 2-GPU job at +1,000, one of unknown work never
    plan = timeline(_snap(2, (_run("a", 4, 500.0), _run("b", 2, 1000.0), _run("c", 2, None))))
    assert plan.times == [NOW, NOW + 500.0, NOW + 1000.0]
    assert plan.free == [2, 6, 8]
    assert plan.earliest(4, 100.0) == NOW + 500.0
    assert plan.earliest(2, 1e9) == NOW
    assert plan.earliest(9, 1.0) == math.inf


def test_reserve_takes_gpus_over_an_interval() -> None:
    plan = Timeline(0.0, 4, [(100.0, 4)])
    plan.reserve(50.0, 150.0, 3)
    assert plan.times == [0.0, 50.0, 100.0, 150.0]
    assert plan.free == [4, 1, 5, 8]
    assert plan.earliest(2, 60.0) == 100.0  # 0..60 crosses the 1 free at 50


def test_admitted_when_the_plan_fits_the_deadline() -> None:
    # 4 GPUs: 2 free, 2 held until +500. A rigid 2-GPU job of 1,000 s starts now: 30 s restart
    # + 1.1 x 1,000 s = 1,130 s, done at +1,130
    snap = _snap(2, (_run("a", 2, 500.0),))
    v = plan_admission(snap, _job("new", 2, 1000.0, NOW + 1200.0))
    assert v.admitted and v.start == NOW and v.gpus == 2 and v.earliest == NOW + 1130.0


def test_declined_with_the_earliest_time_it_could_be_done() -> None:
    # the same job needing 4 GPUs waits for the release at +500: done at +500 + 1,130
    snap = _snap(2, (_run("a", 2, 500.0),))
    v = plan_admission(snap, _job("new", 4, 1000.0, NOW + 1200.0))
    assert not v.admitted
    assert v.earliest == NOW + 1630.0 and v.start == NOW + 500.0
    assert "best effort" in v.reason and "430 s after its deadline" in v.reason


def test_an_elastic_job_takes_the_fewest_gpus_that_meet_it() -> None:
    # 1,000 s of work on 4 GPUs, linear, 1..8 GPUs, 8 free: on 3, 30 + 1.1 x 1,333 = 1,497 s
    snap = _snap(8)
    job = _job("new", 4, 1000.0, NOW + 1500.0, min_gpus=1, max_gpus=8)
    job = QueuedJob(**{**job.__dict__, "speedup": LINEAR})
    v = plan_admission(snap, job)
    assert v.admitted and v.gpus == 3


def test_admitted_jobs_are_planned_first_edf() -> None:
    # 4 GPUs free; a queued deadline job (earlier deadline) is planned on all 4 for 1,130 s;
    # the new one can start only after it: declined, earliest +1,130 + 1,130
    first = _job("first", 4, 1000.0, NOW + 1200.0, seq=0)
    snap = _snap(4, queue=(first,))
    v = plan_admission(snap, _job("new", 4, 1000.0, NOW + 1500.0))
    assert not v.admitted and v.earliest == NOW + 2260.0
    # without the other job it would be admitted
    assert plan_admission(_snap(4), _job("new", 4, 1000.0, NOW + 1500.0)).admitted


def test_a_job_without_a_deadline_is_best_effort() -> None:
    job = QueuedJob("be", "bulk", "a", 2, 0, NOW)
    v = plan_admission(_snap(4), job)
    assert not v.admitted and v.reason == "best effort: no deadline"


def test_a_declined_job_runs_best_effort_when_the_verdict_binds() -> None:
    # 4 free GPUs; 'best' (no deadline) came first, 'due' (deadline job, 100 s of work due in
    # 1,000 s) second, both on all 4. The deadline class starts 'due' first; once the plan has
    # declined it and the verdict binds, it is best effort: 'best' goes first (submission order)
    best = QueuedJob("best", "bulk", "a", 4, 1, NOW)
    due = _job("due", 4, 100.0, NOW + 1000.0, seq=2)
    snap = _snap(4, queue=(best, due))
    declined = Snapshot(
        snap.nodes, snap.queue, now=NOW, restart_cost_s=30.0, declined=frozenset({"due"})
    )

    def started(policy: SharedSchedulingPolicy, s: Snapshot) -> list[str]:
        return [d.job_id for d in policy.decide(s) if d.kind is DecisionKind.START]

    assert started(SharedSchedulingPolicy(), snap) == ["due"]
    assert started(SharedSchedulingPolicy(), declined) == ["due"]  # a forecast only
    assert started(SharedSchedulingPolicy(plan=True), snap) == ["due"]
    assert started(SharedSchedulingPolicy(plan=True), declined) == ["best"]


def test_the_binding_test_lets_a_job_past_an_admitted_one_whose_slack_absorbs_it() -> None:
    # 4 GPUs held by 'r', a deadline job with 1,000 s left (checkpointed now). 'n' (4 GPUs,
    # 500 s, due in 800 s) fits only if 'r' gives way: 30 + 1.1 x 500 = 580 s. Planned EDF,
    # 'r' then restarts at 580: 30 + 1.1 x 1,000 -> done at 1,710 s, in time if it is due at
    # 10,000 s (admitted) but not at 1,200 s (declined). The forecast pins 'r': 'n' declined.
    def verdict(r_due: float, judge: Any) -> tuple[bool, float]:
        r = RunningJob(
            "r",
            "bulk",
            "a",
            ("n0",) * 4,
            started_at=NOW,
            checkpoint_at=NOW,
            remaining_work=1000.0,
            deadline=NOW + r_due,
        )
        snap = _snap(0, (r,), (_job("n", 4, 500.0, NOW + 800.0),))
        (v,) = judge(snap, {"n"})
        return v.admitted, v.earliest - NOW

    assert verdict(10_000.0, plan_round_binding) == (True, pytest.approx(580.0))
    admitted, _ = verdict(1_200.0, plan_round_binding)
    assert not admitted
    admitted, _ = verdict(10_000.0, plan_round)
    assert not admitted
