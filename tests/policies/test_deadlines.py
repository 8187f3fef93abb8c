"""``shared``'s deadline order: at-risk bulk jobs first in their LAS level, least slack first."""

from __future__ import annotations

from dataclasses import replace

from hypothesis import given, settings

from policies import SCHEDULING_POLICIES, Decision, DecisionKind, NodeView, QueuedJob, Snapshot
from policies.scheduling import SchedulingPolicy
from policies.scheduling.deadlines import at_risk
from policies.snapshot import RunningJob, TeamView
from tests.policies import test_scheduling_contract as contract
from tests.policies.test_scheduling_contract import apply, snapshots

NOW = 10_000.0


def _decide(snap: Snapshot) -> list[Decision]:
    return SCHEDULING_POLICIES.create("shared").decide(snap)


def _started(snap: Snapshot) -> set[str]:
    return {d.job_id for d in _decide(snap) if d.kind is DecisionKind.START}


def _bulk(
    job_id: str, seq: int, gpus: int = 4, deadline: float | None = None, work: float = 1000.0
) -> QueuedJob:
    return QueuedJob(
        job_id,
        "bulk",
        "a",
        gpus,
        seq,
        NOW - 100.0 + seq,
        deadline=deadline,
        remaining_work=work,
    )


def _pool(gpus: int = 4) -> tuple[NodeView, ...]:
    return (NodeView("n0", gpus, gpus),)


def _no_deadlines(snap: Snapshot) -> Snapshot:
    return replace(
        snap,
        queue=tuple(replace(q, deadline=None) for q in snap.queue),
        running=tuple(replace(r, deadline=None) for r in snap.running),
    )


def test_an_at_risk_job_starts_before_an_earlier_job_without_a_deadline() -> None:
    # 1,000 s of work due in 1,100 s: 1,030 s with its start-up, a slack under 10% of its work
    snap = Snapshot(
        _pool(),
        (_bulk("early", 0), _bulk("due", 1, deadline=NOW + 1100.0)),
        now=NOW,
    )
    assert _started(snap) == {"due"}
    assert _started(_no_deadlines(snap)) == {"early"}


def test_among_at_risk_jobs_least_slack_first() -> None:
    snap = Snapshot(
        _pool(),
        (
            _bulk("more-slack", 0, deadline=NOW + 1120.0),
            _bulk("less-slack", 1, deadline=NOW + 1050.0),
            _bulk("none", 2),
        ),
        now=NOW,
    )
    assert _started(snap) == {"less-slack"}


def test_a_job_with_ample_slack_is_not_prioritised() -> None:
    snap = Snapshot(
        _pool(),
        (_bulk("early", 0), _bulk("due-later", 1, deadline=NOW + 10_000.0)),
        now=NOW,
    )
    assert _started(snap) == {"early"}
    assert _decide(snap) == _decide(_no_deadlines(snap))


def test_a_job_that_cannot_make_it_even_on_its_max_gpus_is_not_prioritised() -> None:
    # 1,000 s of work (on 4 GPUs, linear) due in 400 s: 500 s on 8 GPUs, plus the start-up
    lost = replace(_bulk("lost", 1, deadline=NOW + 400.0), min_gpus=4, max_gpus=8)
    snap = Snapshot(_pool(), (_bulk("early", 0), lost), now=NOW)
    assert _started(snap) == {"early"}
    # ... but one that makes it on 8 GPUs is at risk
    saved = replace(lost, deadline=NOW + 700.0)
    assert [a.job_id for a in at_risk([(saved, 4, 8, 0)], NOW, 30.0, 0.0, 0.1)] == ["lost"]


def test_a_later_las_level_is_not_jumped() -> None:
    # the at-risk job has had an hour of service on 4 GPUs: it stays behind a new job
    served = replace(_bulk("due", 1, deadline=NOW + 1100.0), attained_service=4 * 3600.0)
    snap = Snapshot(_pool(), (_bulk("early", 0), served), now=NOW)
    assert _started(snap) == {"early"}


def test_a_running_at_risk_job_is_found_and_nothing_is_preempted() -> None:
    # two running jobs of the same level; a new at-risk job needs the GPUs of one of them
    running = (
        RunningJob("r-due", "bulk", "a", ("n0",) * 2, seq=0, started_at=NOW - 1000.0,
                   deadline=NOW + 480.0, remaining_work=450.0),
        RunningJob("r-free", "bulk", "a", ("n0",) * 2, seq=1, started_at=NOW - 1000.0,
                   remaining_work=450.0),
    )  # fmt: skip
    snap = Snapshot(
        (NodeView("n0", 4, 0),),
        (),
        running,
        now=NOW,
    )
    risk = at_risk([(r, 2, 2, 2) for r in running], NOW, 30.0, 0.0, 0.1)
    assert [a.job_id for a in risk] == ["r-due"]
    assert not any(d.kind is DecisionKind.PREEMPT for d in _decide(snap))


def test_team_guarantees_hold_against_an_at_risk_job_of_another_team() -> None:
    # team b is within its guarantee (2 of 4 GPUs); team a's at-risk job may not take them
    snap = Snapshot(
        (NodeView("n0", 4, 0),),
        (replace(_bulk("due", 5, gpus=4, deadline=NOW + 1100.0), min_gpus=2, max_gpus=4),),
        (
            RunningJob("b0", "bulk", "b", ("n0", "n0"), seq=0, started_at=NOW - 5000.0),
            RunningJob("a0", "bulk", "a", ("n0", "n0"), seq=1, started_at=NOW - 5000.0),
        ),
        now=NOW,
        teams=(TeamView("a", 1.0, 2), TeamView("b", 1.0, 2)),
    )
    held = apply(snap, _decide(snap))
    assert held.get("b0") == ("n0", "n0")
    # within its own team's share it comes first: a's other job gives way
    assert "due" in held and "a0" not in held


def test_an_at_risk_borrower_waits_for_idle_gpus() -> None:
    # team a holds its whole entitlement; its at-risk job borrows only what is idle
    snap = Snapshot(
        (NodeView("n0", 8, 2),),
        (replace(_bulk("due", 5, gpus=2, deadline=NOW + 1100.0), min_gpus=2, max_gpus=2),),
        (
            RunningJob("a0", "bulk", "a", ("n0",) * 4, seq=0, started_at=NOW - 5000.0),
            RunningJob("b0", "bulk", "b", ("n0",) * 2, seq=1, started_at=NOW - 5000.0),
        ),
        now=NOW,
        teams=(TeamView("a", 1.0, 4), TeamView("b", 1.0, 4)),
    )
    held = apply(snap, _decide(snap))
    assert held.get("b0") == ("n0", "n0") and "due" in held


@settings(max_examples=150, deadline=None)
@given(snap=snapshots(progress=True))
def test_without_at_risk_jobs_the_decisions_are_those_without_deadlines(snap: Snapshot) -> None:
    # deadlines far away (never at risk), then none at all: the same decisions as without
    far = replace(
        snap,
        queue=tuple(
            replace(q, deadline=NOW * 100, remaining_work=60.0) if not q.interactive else q
            for q in snap.queue
        ),
    )
    plain = _no_deadlines(far)
    assert _decide(far) == _decide(plain)


def _all_due(snap: Snapshot) -> Snapshot:
    """Every bulk job due just after its remaining work: all at risk (slack < 10%)."""
    return replace(
        snap,
        queue=tuple(
            q
            if q.interactive  # its start-up (30 s) and the next round counted
            else replace(q, deadline=snap.now + snap.interval_s + 135.0, remaining_work=100.0)
            for q in snap.queue
        ),
        running=tuple(
            r if r.interactive else replace(r, deadline=snap.now + 105.0, remaining_work=100.0)
            for r in snap.running
        ),
    )


class _SharedAllDue(SchedulingPolicy):
    """``shared`` on the snapshot with every bulk job at risk (same teams, GPUs and jobs)."""

    def decide(self, snapshot: Snapshot) -> list[Decision]:
        return _decide(_all_due(snapshot))


class TestSharedWithEveryDeadlineAtRisk(contract.TestShared):
    """``shared``'s contract (team guarantees, interactive starts, bounds) with every bulk
    job's deadline at risk."""

    def make(self) -> SchedulingPolicy:
        return _SharedAllDue()
