"""Services resized to the replicas the SLA guard asks for (``RunningJob.want_gpus``), as
interactive work in ``shared``: first, making room from bulk jobs, within the team caps; bulk
work fills what they give back."""

from __future__ import annotations

from dataclasses import replace

from orchestrator.control.invariants import check_decisions, guarded
from policies import SCHEDULING_POLICIES, Decision, DecisionKind, NodeView, QueuedJob, Snapshot
from policies.snapshot import RunningJob, TeamView

NOW = 10_000.0


def service(nodes: tuple[str, ...], want: int, team: str = "web") -> RunningJob:
    return RunningJob(
        "svc", "interactive", team, nodes, seq=0, started_at=NOW - 100, want_gpus=want
    )


def bulk(job_id: str, nodes: tuple[str, ...], lo: int = 0, hi: int = 0, seq: int = 1) -> RunningJob:
    return RunningJob(
        job_id,
        "bulk",
        "ml",
        nodes,
        seq=seq,
        submitted_at=NOW - 5000,
        started_at=NOW - 4000,
        checkpoint_at=NOW - 10,
        min_gpus=lo,
        max_gpus=hi,
    )


def decide(snap: Snapshot) -> list[Decision]:
    """The ``shared`` policy's decisions as both worlds run them (inside the team caps), all
    of them keeping the decision contract."""
    decisions = guarded(SCHEDULING_POLICIES.create("shared")).decide(snap)
    kept, broken = check_decisions(snap, decisions)
    assert broken == []
    return kept


def sizes(decisions: list[Decision], kind: DecisionKind) -> dict[str, int]:
    return {d.job_id: len(d.nodes) for d in decisions if d.kind is kind}


def test_a_service_asked_for_more_takes_free_gpus_on_its_node_first() -> None:
    snap = Snapshot((NodeView("a", 4, 2), NodeView("b", 4, 4)), (), (service(("a",) * 2, 4),))
    (d,) = [d for d in decide(snap) if d.job_id == "svc"]
    assert d.kind is DecisionKind.RESIZE and sorted(d.nodes) == ["a"] * 4
    assert "the SLA guard asks for 4 replicas" in d.reason


def test_a_growing_service_makes_room_from_bulk_as_an_interactive_start_does() -> None:
    # a full node: an elastic bulk job (2..3 GPUs) and a rigid one; the service wants 3 more:
    # the elastic job shrinks to its minimum (1 GPU), then a bulk job gives way for the rest
    # (the victim by the preemption policy: here the 2-GPU one, the least to throw away)
    snap = Snapshot(
        (NodeView("a", 8, 0),),
        running=(
            service(("a",), 4),
            bulk("elastic", ("a",) * 3, lo=2, hi=3),
            bulk("rigid", ("a",) * 4, seq=2),
        ),
        now=NOW,
    )
    got = decide(snap)
    assert sizes(got, DecisionKind.RESIZE) == {"svc": 4}
    assert [d.job_id for d in got if d.kind is DecisionKind.PREEMPT] == ["elastic"]
    # the other way round, a service asked for nothing more is never a victim of bulk work
    waiting = QueuedJob("big", "bulk", "ml", 8, seq=3, submitted_at=NOW - 10)
    calm = replace(snap, queue=(waiting,), running=(service(("a",), 0), *snap.running[1:]))
    assert "svc" not in {d.job_id for d in decide(calm) if d.kind is not DecisionKind.WAIT}


def test_bulk_fills_the_gpus_a_shrinking_service_gives_back_in_the_same_round() -> None:
    waiting = QueuedJob("train", "bulk", "ml", 2, seq=1, submitted_at=NOW - 10)
    snap = Snapshot((NodeView("a", 3, 0),), (waiting,), (service(("a",) * 3, 1),), now=NOW)
    got = decide(snap)
    assert sizes(got, DecisionKind.RESIZE) == {"svc": 1}
    assert sizes(got, DecisionKind.START) == {"train": 2}


def test_a_service_grows_only_into_its_teams_quota() -> None:
    teams = (TeamView("web", max_gpus=3), TeamView("ml"))
    snap = Snapshot((NodeView("a", 8, 6),), (), (service(("a",) * 2, 4),), now=NOW, teams=teams)
    assert sizes(decide(snap), DecisionKind.RESIZE) == {"svc": 3}
    full = replace(snap, teams=(TeamView("web", max_gpus=2), TeamView("ml")))
    assert sizes(decide(full), DecisionKind.RESIZE) == {}


def test_without_an_ask_a_service_keeps_its_gpus_against_bulk() -> None:
    waiting = QueuedJob("train", "bulk", "ml", 4, seq=1, submitted_at=NOW - 10)
    snap = Snapshot((NodeView("a", 4, 0),), (waiting,), (service(("a",) * 4, 0),), now=NOW)
    got = decide(snap)
    assert [d.kind for d in got] == [DecisionKind.WAIT]
