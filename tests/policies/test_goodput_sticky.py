"""``GoodputElastic(sticky=False)``: running jobs compete for spare GPUs like queued ones."""

from __future__ import annotations

from dataclasses import replace

from policies import SCHEDULING_POLICIES, DecisionKind, NodeView, QueuedJob, RunningJob, Snapshot
from policies.elastic import ElasticJob, GoodputElastic

LINEAR = tuple(float(n) for n in range(1, 9))
FLAT = (1.0, 1.2, 1.3, 1.35, 1.4, 1.4, 1.4, 1.4)


def test_a_job_that_grew_alone_gives_gpus_back_to_a_newcomer_by_marginal_goodput() -> None:
    big = ElasticJob("big", 1, 8, 1, current=8, speedup=LINEAR, run_s=3600.0)
    new = ElasticJob("new", 1, 8, 1, speedup=LINEAR)
    # sticky (the default): the running job gets its 8 back as far as they go
    assert GoodputElastic().allocate([big, new], 8, 30.0) == {"big": 7, "new": 1}
    # not sticky: log goodput of two linear jobs is highest split evenly
    assert GoodputElastic(sticky=False).allocate([big, new], 8, 30.0) == {"big": 4, "new": 4}
    # a flat curve gains little from its GPUs: the newcomer takes most of them
    flat = replace(big, speedup=FLAT)
    got = GoodputElastic(sticky=False).allocate([flat, new], 8, 30.0)
    assert got["new"] > got["big"] >= 1 and sum(got.values()) == 8


def test_not_sticky_still_gates_growth_and_keeps_admission() -> None:
    # a young running job is not grown past what it holds when the gain cannot pay the restart
    young = ElasticJob("young", 1, 8, 1, current=2, speedup=FLAT, run_s=1.0)
    got = GoodputElastic(sticky=False).allocate([young], 8, 30.0)
    assert got == {"young": 2}
    # a floor (a team's guarantee or min_runtime_s) is admission: kept without the sticky step
    kept = ElasticJob("kept", 1, 8, 1, current=6, speedup=LINEAR, floor=6, run_s=10.0)
    new = ElasticJob("new", 1, 8, 1, speedup=LINEAR)
    assert GoodputElastic(sticky=False).allocate([new, kept], 8, 30.0) == {"new": 2, "kept": 6}


def test_not_sticky_is_deterministic() -> None:
    jobs = [
        ElasticJob(f"j{i}", 1, 8, 1, current=i % 4, speedup=(LINEAR, FLAT)[i % 2], run_s=600.0 * i)
        for i in range(8)
    ]
    first = GoodputElastic(sticky=False).allocate(jobs, 24, 30.0)
    assert all(GoodputElastic(sticky=False).allocate(jobs, 24, 30.0) == first for _ in range(3))
    assert sum(first.values()) <= 24 and all(first[j.job_id] >= j.lo for j in jobs)


def test_shared_not_sticky_shrinks_a_long_running_job_for_a_queued_one() -> None:
    nodes = (NodeView("n0", 4, 0), NodeView("n1", 4, 0))  # "b" holds all 8 GPUs
    running = (
        RunningJob(
            "b", "bulk", "a", ("n0",) * 4 + ("n1",) * 4, min_gpus=1, max_gpus=8, started_at=0.0
        ),
    )
    queue = (QueuedJob("q", "bulk", "a", 1, 1, 900.0, min_gpus=1, max_gpus=8),)
    snap = Snapshot(nodes, queue, running, now=1000.0, seed=5)

    def sizes(sticky: bool) -> dict[str, tuple[DecisionKind, int]]:
        policy = SCHEDULING_POLICIES.create("shared", elastic=GoodputElastic(sticky=sticky))
        d = policy.decide(snap)
        assert d == policy.decide(snap)
        return {x.job_id: (x.kind, len(x.nodes)) for x in d}

    # "b" has 8,000 GPU-s of service, above the first LAS level: "q" comes first in order;
    # sticky: "b" gets back all it can (7); not sticky: log goodput splits them evenly
    assert sizes(True) == {"b": (DecisionKind.RESIZE, 7), "q": (DecisionKind.START, 1)}
    assert sizes(False) == {"b": (DecisionKind.RESIZE, 4), "q": (DecisionKind.START, 4)}
