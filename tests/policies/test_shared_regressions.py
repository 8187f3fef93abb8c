"""Counterexamples hypothesis found for the ``shared`` policy, kept as regression tests."""

from __future__ import annotations

from collections import Counter

import pytest

from policies import SCHEDULING_POLICIES, NodeView, QueuedJob, RunningJob, Snapshot
from policies.snapshot import TeamView
from tests.policies.test_scheduling_contract import apply


def _got(snap: Snapshot) -> Counter[str]:
    held = apply(snap, SCHEDULING_POLICIES.create("shared").decide(snap))
    team_of = {q.job_id: q.team for q in snap.queue} | {r.job_id: r.team for r in snap.running}
    got: Counter[str] = Counter()
    for job_id, nodes in held.items():
        got[team_of[job_id]] += len(nodes)
    return got


def test_an_elastic_job_is_not_shrunk_below_its_teams_guarantee() -> None:
    # Team b (guarantee 2) holds 2 on an elastic job; an interactive job of team a needs 1 GPU
    # on a full pool: a's own bulk job gives way, b keeps its guarantee.
    snap = Snapshot(
        (NodeView("n0", 1, 0), NodeView("n1", 5, 0)),
        (QueuedJob("q5", "interactive", "a", 1, 5, 5.0),),
        (
            RunningJob("r0", "bulk", "b", ("n1", "n1"), seq=0, min_gpus=1, max_gpus=2),
            RunningJob("r1", "interactive", "a", ("n1",), seq=1),
            RunningJob("r2", "interactive", "a", ("n1",), seq=2),
            RunningJob("r3", "bulk", "a", ("n0",), seq=3),
            RunningJob("r4", "interactive", "a", ("n1",), seq=4),
        ),
        now=1000.0,
        teams=(TeamView("a"), TeamView("b", 2.0, 2), TeamView("c", 3.0)),
    )
    assert _got(snap)["b"] == 2


@pytest.mark.xfail(
    strict=True,
    reason="known gap: a 6-GPU interactive start leaves no free GPU, and the bulk phase does "
    "not take one back from team b (no guarantee) for team c (guarantee 2)",
)
def test_a_team_under_guarantee_reclaims_after_a_large_interactive_start() -> None:
    snap = Snapshot(
        nodes=(
            NodeView(node_id="n0", total_gpus=1, free_gpus=1),
            NodeView(node_id="n1", total_gpus=8, free_gpus=2),
        ),
        queue=(
            QueuedJob(
                job_id="q5",
                job_class="interactive",
                team="a",
                gpus=6,
                seq=5,
                submitted_at=5.0,
                min_gpus=6,
                max_gpus=6,
                deadline=None,
                wait_target_s=60.0,
                attained_service=0.0,
                remaining_work=None,
                speedup=(),
            ),
        ),
        running=(
            RunningJob(
                job_id="r0",
                job_class="bulk",
                team="c",
                nodes=("n1",),
                seq=0,
                submitted_at=0.0,
                started_at=0.0,
                checkpoint_at=0.0,
                min_gpus=1,
                max_gpus=2,
                deadline=None,
                attained_service=0.0,
                remaining_work=None,
                speedup=(),
            ),
            RunningJob(
                job_id="r1",
                job_class="bulk",
                team="a",
                nodes=("n1",),
                seq=1,
                submitted_at=0.0,
                started_at=0.0,
                checkpoint_at=0.0,
                min_gpus=1,
                max_gpus=1,
                deadline=None,
                attained_service=0.0,
                remaining_work=None,
                speedup=(),
            ),
            RunningJob(
                job_id="r2",
                job_class="bulk",
                team="b",
                nodes=("n1", "n1"),
                seq=2,
                submitted_at=0.0,
                started_at=990.0,
                checkpoint_at=0.0,
                min_gpus=2,
                max_gpus=2,
                deadline=None,
                attained_service=0.0,
                remaining_work=None,
                speedup=(),
            ),
            RunningJob(
                job_id="r3",
                job_class="bulk",
                team="a",
                nodes=("n1",),
                seq=3,
                submitted_at=0.0,
                started_at=0.0,
                checkpoint_at=0.0,
                min_gpus=1,
                max_gpus=1,
                deadline=None,
                attained_service=0.0,
                remaining_work=None,
                speedup=(),
            ),
            RunningJob(
                job_id="r4",
                job_class="bulk",
                team="a",
                nodes=("n1",),
                seq=4,
                submitted_at=0.0,
                started_at=0.0,
                checkpoint_at=0.0,
                min_gpus=1,
                max_gpus=1,
                deadline=None,
                attained_service=0.0,
                remaining_work=None,
                speedup=(),
            ),
        ),
        now=1000.0,
        seed=7,
        teams=(
            TeamView(name="a", weight=1.0, guaranteed_gpus=0, max_gpus=0),
            TeamView(name="b", weight=2.0, guaranteed_gpus=0, max_gpus=0),
            TeamView(name="c", weight=3.0, guaranteed_gpus=2, max_gpus=0),
        ),
        restart_cost_s=30.0,
    )
    assert _got(snap)["c"] >= 2
