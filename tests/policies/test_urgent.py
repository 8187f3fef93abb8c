"""The SLA guard's urgency as a policy input: an urgent elastic job gets spare GPUs first."""

from __future__ import annotations

from dataclasses import replace

from policies import SCHEDULING_POLICIES, DecisionKind, NodeView, Snapshot
from policies.elastic import ElasticJob
from policies.elastic.goodput import GoodputElastic
from policies.snapshot import RunningJob

NOW = 10_000.0
# a curve that flattens: a second GPU adds little, so goodput would rather spread GPUs
FLAT = (1.0, 1.1, 1.15, 1.2)


def test_goodput_gives_an_urgent_job_the_spare_gpus_first() -> None:
    jobs = [
        ElasticJob("calm", 1, 4, 1, current=1, speedup=(1.0, 2.0, 3.0, 4.0), run_s=1e6),
        ElasticJob("short", 1, 4, 1, current=1, speedup=FLAT, run_s=1e6),
    ]
    base = GoodputElastic().allocate(jobs, 4, restart_cost_s=30.0)
    assert base == {"calm": 3, "short": 1}  # goodput grows the job that scales
    jobs[1].urgent = True
    assert GoodputElastic().allocate(jobs, 4, restart_cost_s=30.0) == {"calm": 1, "short": 3}


def _running(job_id: str, node_gpus: tuple[str, ...], seq: int, **kw: object) -> RunningJob:
    return RunningJob(
        job_id,
        "bulk",
        "a",
        node_gpus,
        seq=seq,
        submitted_at=NOW - 5000.0,
        started_at=NOW - 4000.0,
        checkpoint_at=NOW - 10.0,
        min_gpus=1,
        max_gpus=3,
        **kw,  # type: ignore[arg-type]
    )


def test_shared_grows_the_urgent_job() -> None:
    snap = Snapshot(
        (NodeView("n0", 4, 2),),
        running=(
            _running("calm", ("n0",), 0, speedup=(1.0, 2.0, 3.0)),
            _running("short", ("n0",), 1, speedup=FLAT[:3]),
        ),
        now=NOW,
    )
    shared = SCHEDULING_POLICIES.create("shared")

    def grown(s: Snapshot) -> dict[str, int]:
        return {d.job_id: len(d.nodes) for d in shared.decide(s) if d.kind is DecisionKind.RESIZE}

    assert grown(snap).get("short", 1) == 1
    urgent = replace(snap, running=(snap.running[0], replace(snap.running[1], urgent=True)))
    assert grown(urgent)["short"] == 3
