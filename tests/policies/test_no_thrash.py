"""No thrash: runs with no step yet are left alone by bulk jobs; a job preempted last round
takes only the GPUs no other job wants (``first_step_at``, ``preempted_at``, ``interval_s``)."""

from __future__ import annotations

import dataclasses

from hypothesis import HealthCheck, given, settings

from policies import (
    SCHEDULING_POLICIES,
    Decision,
    DecisionKind,
    NodeView,
    QueuedJob,
    RunningJob,
    Snapshot,
)
from policies.scheduling.churn import late_window
from policies.snapshot import TeamView
from tests.policies.test_scheduling_contract import apply, snapshots

NOW = 1000.0
POLICIES = ("gang", "tiresias", "shared", "static-partition", "strict-priority", "pollux")


def _decide(name: str, snap: Snapshot) -> list[Decision]:
    return SCHEDULING_POLICIES.create(name).decide(snap)


def _sizes(name: str, snap: Snapshot) -> dict[str, int]:
    return {j: len(nodes) for j, nodes in apply(snap, _decide(name, snap)).items()}


# ---- a run with no step yet ------------------------------------------------------------------


def _las(first_step_at: float | None, gpus: int = 4, **running: float) -> Snapshot:
    """A long-served bulk job holds the pool; a fresh job of the same team waits (LAS first)."""
    return Snapshot(
        (NodeView("n0", 4, 4 - gpus),),
        (QueuedJob("q", "bulk", "a", 4, 1, NOW - 5.0),),
        (
            RunningJob(
                "r",
                "bulk",
                "a",
                ("n0",) * gpus,
                seq=0,
                started_at=running.get("started_at", NOW - 400.0),
                attained_service=16 * 3600.0,
                first_step_at=first_step_at,
                min_gpus=int(running.get("min_gpus", 0)),
                max_gpus=int(running.get("max_gpus", 0)),
            ),
        ),
        now=NOW,
    )


def test_shared_does_not_preempt_a_run_with_no_step_for_bulk() -> None:
    assert _sizes("shared", _las(first_step_at=NOW - 100.0)) == {"q": 4}
    assert _sizes("shared", _las(first_step_at=None)) == {"r": 4}
    assert _sizes("shared", _las(first_step_at=NOW + 10.0)) == {"r": 4}  # step still to come


def test_shared_neither_shrinks_nor_grows_a_run_with_no_step() -> None:
    elastic = {"min_gpus": 1, "max_gpus": 4}
    # alone with 2 free GPUs: a stepped run grows, one with no step yet does not
    alone = dataclasses.replace(_las(first_step_at=NOW - 100.0, gpus=2, **elastic), queue=())
    # (it checkpointed 10 s ago: with its 400 s run unsaved, the search's restart penalty,
    # 400 / (400 + 30 + 400), makes 4 GPUs worth less than the 2 it holds, and it stays)
    assert _sizes("shared", alone) == {"r": 2}
    saved = dataclasses.replace(alone.running[0], checkpoint_at=NOW - 10.0)
    alone = dataclasses.replace(alone, running=(saved,))
    assert _sizes("shared", alone) == {"r": 4}
    fresh = dataclasses.replace(
        alone, running=(dataclasses.replace(alone.running[0], first_step_at=None),)
    )
    assert _decide("shared", fresh) == []
    # a fresh 4-GPU job first in LAS order: the stepped run gives way, the other keeps its 2
    assert _sizes("shared", _las(first_step_at=NOW - 100.0, gpus=2, **elastic)) == {"q": 4}
    assert _sizes("shared", _las(first_step_at=None, gpus=2, **elastic)) == {"r": 2}


def test_an_interactive_job_may_still_take_a_run_with_no_step() -> None:
    snap = dataclasses.replace(
        _las(first_step_at=None), queue=(QueuedJob("i", "interactive", "a", 2, 1, NOW),)
    )
    for name in ("shared", "strict-priority"):
        kinds = [(d.kind, d.job_id) for d in _decide(name, snap)]
        assert (DecisionKind.PREEMPT, "r") in kinds and (DecisionKind.START, "i") in kinds


def test_tiresias_does_not_preempt_a_run_with_no_step() -> None:
    assert _sizes("tiresias", _las(first_step_at=NOW - 100.0)) == {"q": 4}
    assert _sizes("tiresias", _las(first_step_at=None)) == {"r": 4}


def test_pollux_does_not_shrink_a_run_with_no_step() -> None:
    # pollux admits in submission order: make the queued job older, so it would take GPUs
    snap = _las(first_step_at=None, min_gpus=1, max_gpus=4)
    snap = dataclasses.replace(
        snap, queue=(QueuedJob("q", "bulk", "a", 2, -1, 0.0, min_gpus=1, max_gpus=4),)
    )
    assert _sizes("pollux", snap) == {"r": 4}
    stepped = dataclasses.replace(
        snap, running=(dataclasses.replace(snap.running[0], first_step_at=NOW - 100.0),)
    )
    assert _sizes("pollux", stepped)["q"] >= 1


# no deadline: pollux's genetic search takes tens of ms a call on a loaded machine
@settings(suppress_health_check=[HealthCheck.differing_executors], max_examples=150, deadline=None)
@given(snap=snapshots(progress=True))
def test_no_bulk_job_takes_gpus_from_a_run_with_no_step(snap: Snapshot) -> None:
    """Under ``shared`` such a run loses GPUs only in a round where an interactive job starts
    (or a service grows to the replicas the SLA guard asks for), and never grows; under
    ``tiresias`` and ``pollux`` it is not touched at all."""
    fresh = {r.job_id: r.gpus for r in snap.running if not r.interactive and not r.stepped(NOW)}
    interactive = {q.job_id for q in snap.queue if q.interactive}
    services = {r.job_id: r.gpus for r in snap.running if r.interactive}
    for name in ("shared", "tiresias", "pollux"):
        decisions = _decide(name, snap)
        inter_starts = any(
            (d.kind is DecisionKind.START and d.job_id in interactive)
            or (d.kind is DecisionKind.RESIZE and len(d.nodes) > services.get(d.job_id, 1 << 30))
            for d in decisions
        )
        for d in decisions:
            if d.job_id not in fresh or d.kind is DecisionKind.WAIT:
                continue
            assert d.kind in (DecisionKind.PREEMPT, DecisionKind.RESIZE), d
            assert name == "shared" and inter_starts, f"{name}: {d}"
            assert d.kind is DecisionKind.PREEMPT or len(d.nodes) < fresh[d.job_id], d


# ---- a job preempted last round --------------------------------------------------------------


def _preempted(preempted_at: float | None, interval_s: float = 60.0, gpus: int = 4) -> Snapshot:
    """A long-served bulk job holds 4 of 4 + ``4 - gpus`` GPUs; a fresh job (LAS first),
    preempted at ``preempted_at``, waits for 4."""
    return Snapshot(
        (NodeView("n0", 4, 0), NodeView("n1", 4 - gpus, 4 - gpus)),
        (QueuedJob("q", "bulk", "a", gpus, 1, NOW - 500.0, preempted_at=preempted_at),),
        (
            RunningJob(
                "r", "bulk", "b", ("n0",) * 4, seq=0, started_at=0.0, attained_service=16 * 3600.0
            ),
        ),
        now=NOW,
        teams=(TeamView("a"), TeamView("b")),
        interval_s=interval_s,
    )


def test_a_job_preempted_last_round_does_not_preempt_in_turn() -> None:
    assert _sizes("shared", _preempted(preempted_at=None)) == {"q": 4}  # LAS: q first
    d = _decide("shared", _preempted(preempted_at=NOW - 60.0))
    assert [(x.kind, x.job_id) for x in d] == [(DecisionKind.WAIT, "q")]
    assert "preempted last round" in d[0].reason


def test_the_rule_holds_for_one_round_and_needs_an_interval() -> None:
    assert _sizes("shared", _preempted(preempted_at=NOW - 61.0)) == {"q": 4}
    assert _sizes("shared", _preempted(preempted_at=NOW - 60.0, interval_s=0.0)) == {"q": 4}


def test_a_job_preempted_last_round_gets_the_gpus_nobody_wants() -> None:
    # 2 GPUs free on n1 and nobody else waiting: it starts there, r keeps its GPUs
    assert _sizes("shared", _preempted(preempted_at=NOW - 60.0, gpus=2)) == {"r": 4, "q": 2}
    # another job wants them: it gets them first, even behind the late job in LAS order
    snap = _preempted(preempted_at=NOW - 60.0, gpus=2)
    other = QueuedJob("o", "bulk", "b", 2, 2, NOW - 5.0, attained_service=1e5)
    assert _sizes("shared", dataclasses.replace(snap, queue=(*snap.queue, other))) == {
        "r": 4,
        "o": 2,
    }


def test_an_interactive_job_is_never_held_back() -> None:
    snap = _preempted(preempted_at=NOW - 60.0)
    inter = dataclasses.replace(snap.queue[0], job_class="interactive")
    d = _decide("shared", dataclasses.replace(snap, queue=(inter,)))
    assert [(x.kind, x.job_id) for x in d] == [
        (DecisionKind.PREEMPT, "r"),
        (DecisionKind.START, "q"),
    ]


@settings(suppress_health_check=[HealthCheck.differing_executors], max_examples=150, deadline=None)
@given(snap=snapshots(progress=True))
def test_late_jobs_change_nothing_for_the_others(snap: Snapshot) -> None:
    """Under ``shared`` the other jobs' decisions are those of the round without the jobs
    preempted last round (or within the restart cost: :func:`late_window`), which only start
    after them, on GPUs left free, and never within the restart cost (issue 28)."""
    window = late_window(snap)
    late = {
        q.job_id
        for q in snap.queue
        if not q.interactive and q.preempted_at is not None and snap.now - q.preempted_at <= window
    }
    decisions = _decide("shared", snap)
    without = dataclasses.replace(snap, queue=tuple(q for q in snap.queue if q.job_id not in late))
    assert [d for d in decisions if d.job_id not in late] == _decide("shared", without)
    kinds = [d.kind for d in decisions if d.job_id in late]
    assert all(k in (DecisionKind.START, DecisionKind.WAIT) for k in kinds)
    held = {
        q.job_id
        for q in snap.queue
        if q.job_id in late and snap.now - (q.preempted_at or 0.0) < snap.restart_cost_s
    }
    assert not [d for d in decisions if d.job_id in held and d.kind is DecisionKind.START]


# ---- defaults ----------------------------------------------------------------------------------


@settings(suppress_health_check=[HealthCheck.differing_executors], max_examples=60, deadline=None)
@given(snap=snapshots())
def test_the_fields_change_nothing_when_there_is_nothing_to_protect(snap: Snapshot) -> None:
    """Every run stepped in the past, every preemption older than the last round: the same
    decisions as with the fields at their defaults, for every policy."""
    running = tuple(dataclasses.replace(r, first_step_at=r.started_at + 1.0) for r in snap.running)
    queue = tuple(dataclasses.replace(q, preempted_at=NOW - 61.0) for q in snap.queue)
    known = dataclasses.replace(snap, running=running, queue=queue, interval_s=60.0)
    for name in POLICIES:
        assert _decide(name, known) == _decide(name, snap), name
