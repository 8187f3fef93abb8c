"""Team caps (``max_gpus``) hold around every scheduling policy (hypothesis)."""

from __future__ import annotations

import dataclasses
from collections import Counter

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from policies import SCHEDULING_POLICIES, DecisionKind, NodeView, QueuedJob, RunningJob, Snapshot
from policies.scheduling import TeamCaps
from policies.snapshot import TeamView
from tests.policies.test_scheduling_contract import apply, snapshots

POLICIES = ("gang", "tiresias", "strict-priority", "pollux", "shared", "static-partition")


@st.composite
def capped(draw: st.DrawFn) -> Snapshot:
    """A random snapshot whose teams get random caps; running jobs already within them."""
    snap = draw(snapshots())
    held = Counter()
    for r in snap.running:
        held[r.team] += r.gpus
    teams = tuple(
        dataclasses.replace(
            t,
            max_gpus=max(held[t.name], t.guaranteed_gpus, 1)
            + draw(st.integers(min_value=0, max_value=3)),
        )
        for t in snap.teams
    )
    return dataclasses.replace(snap, teams=teams)


@pytest.mark.parametrize("name", POLICIES)
@settings(suppress_health_check=[HealthCheck.differing_executors], max_examples=50, deadline=None)
@given(snap=capped())
def test_no_team_exceeds_its_cap(name: str, snap: Snapshot) -> None:
    policy = TeamCaps(SCHEDULING_POLICIES.create(name))
    decisions = policy.decide(snap)
    assert decisions == TeamCaps(SCHEDULING_POLICIES.create(name)).decide(snap)
    held = apply(snap, decisions)
    team_of = {q.job_id: q.team for q in snap.queue} | {r.job_id: r.team for r in snap.running}
    use = Counter()
    for job_id, nodes in held.items():
        use[team_of[job_id]] += len(nodes)
    for t in snap.teams:
        assert use[t.name] <= t.max_gpus, f"team {t.name} holds {use[t.name]} > {t.max_gpus}"
    decided = sorted(
        d.job_id for d in decisions if d.kind in (DecisionKind.START, DecisionKind.WAIT)
    )
    assert decided == sorted(q.job_id for q in snap.queue)  # every queued job hears back


def test_a_team_at_its_cap_is_held_and_told_why() -> None:
    nodes = (NodeView("n0", 8, 6),)
    running = (RunningJob("r0", "bulk", "a", ("n0", "n0")),)
    queue = (
        QueuedJob("q1", "bulk", "a", 2, 1, 1.0),  # would take team a to 4 > 3
        QueuedJob("q2", "bulk", "b", 2, 2, 2.0),
    )
    snap = Snapshot(nodes, queue, running, teams=(TeamView("a", max_gpus=3),))
    decisions = {d.job_id: d for d in TeamCaps(SCHEDULING_POLICIES.create("gang")).decide(snap)}
    assert decisions["q1"].kind is DecisionKind.WAIT
    assert "holds 2 of its 3-GPU limit" in decisions["q1"].reason
    assert decisions["q2"].kind is DecisionKind.START  # another team is not held up


def test_two_jobs_that_fit_alone_do_not_both_start_over_the_cap() -> None:
    nodes = (NodeView("n0", 8, 8),)
    queue = (QueuedJob("q1", "bulk", "a", 2, 1, 1.0), QueuedJob("q2", "bulk", "a", 2, 2, 2.0))
    snap = Snapshot(nodes, queue, teams=(TeamView("a", max_gpus=3),))
    kinds = {d.job_id: d.kind for d in TeamCaps(SCHEDULING_POLICIES.create("gang")).decide(snap)}
    assert kinds == {"q1": DecisionKind.START, "q2": DecisionKind.WAIT}


def test_an_elastic_job_is_started_within_its_teams_room() -> None:
    nodes = (NodeView("n0", 8, 8),)
    queue = (QueuedJob("q1", "bulk", "a", 2, 1, 1.0, min_gpus=1, max_gpus=8),)
    snap = Snapshot(nodes, queue, teams=(TeamView("a", max_gpus=3),))
    (d,) = TeamCaps(SCHEDULING_POLICIES.create("shared")).decide(snap)
    assert d.kind is DecisionKind.START and 1 <= len(d.nodes) <= 3
