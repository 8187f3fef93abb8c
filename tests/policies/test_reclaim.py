"""``shared``: a team below its guarantee reclaims at once; ``min_runtime_s`` guards the rest."""

from __future__ import annotations

from policies import SCHEDULING_POLICIES, DecisionKind, NodeView, QueuedJob, RunningJob, Snapshot
from policies.snapshot import TeamView
from tests.policies.test_scheduling_contract import apply

NOW = 1000.0


def _borrowed(
    started_at: float = NOW - 10.0,
    min_gpus: int = 2,
    first_step_at: float | None = 0.0,
    guarantees: tuple[int, int] = (0, 2),
    c_gpus: int = 2,
) -> Snapshot:
    """8 GPUs, all held: team a's interactive session (4, above a's fair share of 2), team b's
    elastic bulk job (4 of ``min_gpus``..4, within b's fair share, after a long service: LAS
    puts it last), and team c waits with a ``c_gpus``-GPU job. With c's guarantee of 2, the
    bulk pool (4) cannot hold both b's job and c's guarantee."""
    return Snapshot(
        (NodeView("n0", 8, 0),),
        (QueuedJob("c1", "bulk", "c", c_gpus, 3, NOW - 5.0),),
        (
            RunningJob("a1", "interactive", "a", ("n0",) * 4, seq=0, started_at=0.0),
            RunningJob(
                "b1",
                "bulk",
                "b",
                ("n0",) * 4,
                seq=1,
                started_at=started_at,
                min_gpus=min_gpus,
                max_gpus=4,
                attained_service=1e6,
                first_step_at=first_step_at,
            ),
        ),
        now=NOW,
        teams=(
            TeamView("a"),
            TeamView("b", weight=2.0, guaranteed_gpus=guarantees[0]),
            TeamView("c", guaranteed_gpus=guarantees[1]),
        ),
    )


def _held(snap: Snapshot, **options: float) -> dict[str, int]:
    decisions = SCHEDULING_POLICIES.create("shared", **options).decide(snap)
    return {job_id: len(nodes) for job_id, nodes in apply(snap, decisions).items()}


def test_a_young_borrower_shrinks_for_an_owner_below_its_guarantee() -> None:
    held = _held(_borrowed())
    assert held["c1"] == 2 and held["b1"] == 2


def test_a_young_rigid_borrower_is_preempted_for_an_owner_below_its_guarantee() -> None:
    held = _held(_borrowed(min_gpus=4))
    assert held["c1"] == 2 and "b1" not in held


def test_reclaim_min_runtime_protects_a_young_borrower() -> None:
    held = _held(_borrowed(), reclaim_min_runtime_s=600.0)
    assert held == {"a1": 4, "b1": 4}
    # older than that, it gives way as with no reclaim minimum
    held = _held(_borrowed(started_at=NOW - 700.0), reclaim_min_runtime_s=600.0)
    assert held["c1"] == 2 and held["b1"] == 2


def test_a_run_with_no_step_yet_is_not_reclaimed() -> None:
    # reclaim waits for the borrower's first step (seconds live): its start-up is not wasted
    held = _held(_borrowed(first_step_at=None))
    assert held == {"a1": 4, "b1": 4}
    held = _held(_borrowed(first_step_at=NOW + 5.0))  # its first step is still to come
    assert held == {"a1": 4, "b1": 4}
    held = _held(_borrowed(first_step_at=NOW - 5.0))
    assert held["c1"] == 2


def test_fairness_and_goodput_preemption_still_respect_min_runtime() -> None:
    # no guarantee for c: LAS puts c's job first, but b's young job keeps its GPUs
    assert _held(_borrowed(guarantees=(0, 0))) == {"a1": 4, "b1": 4}
    held = _held(_borrowed(started_at=NOW - 400.0, guarantees=(0, 0)))
    assert held["c1"] == 2 and held["b1"] == 2


def test_a_team_keeps_its_own_guarantee() -> None:
    # b's 4 GPUs are its guarantee: nothing borrowed to reclaim, c's guarantee waits
    assert _held(_borrowed(guarantees=(4, 2))) == {"a1": 4, "b1": 4}


def test_reclaim_takes_only_what_the_guarantee_needs() -> None:
    # c's guarantee is 2 but it asks for 1 GPU: b's elastic job gives up 1 of its 4, no more
    held = _held(_borrowed(c_gpus=1))
    assert held["c1"] == 1 and held["b1"] == 3


def test_no_reclaim_when_the_guarantees_cannot_fit_anyway() -> None:
    # the interactive session holds 6 of 8 GPUs: c's guarantee (2) and d's (2) cannot both be
    # met on the 2 left, so b's young job is not cut for a reclaim that would not complete
    snap = Snapshot(
        (NodeView("n0", 8, 0),),
        (
            QueuedJob("c1", "bulk", "c", 2, 3, NOW - 5.0),
            QueuedJob("d1", "bulk", "d", 2, 4, NOW - 5.0),
        ),
        (
            RunningJob("a1", "interactive", "a", ("n0",) * 6, seq=0, started_at=0.0),
            RunningJob("b1", "bulk", "b", ("n0",) * 2, seq=1, started_at=NOW - 10.0),
        ),
        now=NOW,
        teams=(
            TeamView("a"),
            TeamView("b", weight=4.0),
            TeamView("c", guaranteed_gpus=1),
            TeamView("d", guaranteed_gpus=1),
        ),
    )
    decisions = SCHEDULING_POLICIES.create("shared").decide(snap)
    assert not [d for d in decisions if d.kind is DecisionKind.PREEMPT]
