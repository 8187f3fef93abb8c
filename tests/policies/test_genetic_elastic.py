"""``elastic="genetic"``: admission as every allocator, then Pollux's genetic search (issue 16)."""

from __future__ import annotations

import zlib
from dataclasses import replace

import pytest

from policies import SCHEDULING_POLICIES, DecisionKind, NodeView, QueuedJob, RunningJob, Snapshot
from policies.elastic import ELASTIC, ElasticJob, GeneticElastic, GoodputElastic
from policies.scheduling import SharedSchedulingPolicy
from policies.scheduling.pollux_search import genetic_search

# a GPU on a second node costs more than it adds; the node's other GPUs win it back
DIP = (1.0, 1.9, 2.7, 3.4, 3.0, 4.6, 6.0, 7.2)
LINEAR = tuple(float(n) for n in range(1, 9))
FLAT = (1.0, 1.2, 1.3, 1.35, 1.4, 1.4, 1.4, 1.4)


def test_registered_and_checks_its_arguments() -> None:
    assert isinstance(ELASTIC.create("genetic"), GeneticElastic)
    with pytest.raises(ValueError, match="p must be non-zero"):
        GeneticElastic(p=0.0)
    with pytest.raises(ValueError, match="population must be >= 2"):
        GeneticElastic(population=1)


def test_crosses_a_dip_in_the_speedup_curve_where_greedy_goodput_stops() -> None:
    jobs = [ElasticJob("yolo", 1, 8, 1, speedup=DIP)]
    assert GoodputElastic("harmonic").allocate(jobs, 8, 30.0) == {"yolo": 4}
    assert GeneticElastic().allocate(jobs, 8, 30.0) == {"yolo": 8}


def test_gives_what_the_genetic_search_gives_beyond_admission() -> None:
    jobs = [
        ElasticJob("a", 2, 8, 2, speedup=LINEAR),
        ElasticJob("b", 1, 8, 1, current=3, speedup=FLAT, run_s=600.0),
        ElasticJob("c", 1, 8, 1, speedup=DIP),
    ]
    alloc = GeneticElastic(seed=3)
    got = alloc.allocate(jobs, 12, 30.0)
    admitted = {"a": 2, "b": 1, "c": 1}  # minimums in order: 8 GPUs left for the search
    problem = alloc.problem(jobs, admitted, 8, 4, 30.0)  # fair share ceil(12 / 3)
    assert problem.base.tolist() == [0, 2, 0]  # b holds 3: 2 beyond its minimum
    key = zlib.crc32(b"a\nb\nc")
    extra = genetic_search(problem, [3, key], alloc.population, alloc.generations)
    assert got == {j: admitted[j] + int(k) for j, k in zip("abc", extra, strict=True)}
    assert sum(got.values()) <= 12 and all(got[j.job_id] >= j.lo for j in jobs)


def test_is_deterministic_for_a_seed() -> None:
    jobs = [ElasticJob(f"j{i}", 1, 8, 1, speedup=(LINEAR, FLAT, DIP)[i % 3]) for i in range(6)]
    first = GeneticElastic(seed=1).allocate(jobs, 20, 30.0)
    assert all(GeneticElastic(seed=1).allocate(jobs, 20, 30.0) == first for _ in range(3))
    assert sum(first.values()) <= 20


def test_admission_floors_and_urgent_jobs_come_before_the_search() -> None:
    jobs = [
        ElasticJob("calm", 1, 4, 1, current=1, speedup=LINEAR[:4], run_s=1e6),
        ElasticJob("kept", 1, 4, 1, current=2, speedup=FLAT[:4], floor=2, run_s=10.0),
        ElasticJob("short", 1, 4, 1, current=1, speedup=FLAT[:4], run_s=1e6, urgent=True),
        ElasticJob("late", 3, 4, 3, speedup=LINEAR[:4]),
    ]
    got = GeneticElastic().allocate(jobs, 6, 30.0)
    # the floor first, minimums in order (no room for "late"), the spare GPUs to "short"
    assert got == {"calm": 1, "kept": 2, "short": 3, "late": 0}


def test_a_running_job_moves_only_when_it_pays_for_its_restart() -> None:
    new = ElasticJob("new", 1, 8, 1, speedup=LINEAR)
    young = ElasticJob("big", 1, 8, 1, current=7, speedup=LINEAR, run_s=1.0)
    assert GeneticElastic().allocate([young, new], 8, 30.0) == {"big": 7, "new": 1}
    old = replace(young, run_s=1e6)  # the harmonic mean wants them even: 4 and 4
    assert GeneticElastic().allocate([old, new], 8, 30.0) == {"big": 4, "new": 4}


def test_shared_with_the_setting_starts_interactive_jobs_first() -> None:
    nodes = (NodeView("n0", 4, 0), NodeView("n1", 4, 4))
    running = (
        RunningJob(
            "b", "bulk", "a", ("n0",) * 4, min_gpus=1, max_gpus=8, started_at=0.0, speedup=LINEAR
        ),
    )
    queue = (
        QueuedJob("i", "interactive", "a", 6, 1, 990.0),
        QueuedJob("q", "bulk", "a", 1, 2, 900.0, min_gpus=1, max_gpus=8, speedup=DIP),
    )
    snap = Snapshot(nodes, queue, running, now=1000.0, seed=5)
    policy = SCHEDULING_POLICIES.create("shared", elastic="genetic")
    d = policy.decide(snap)
    assert d == policy.decide(snap)
    kinds = {x.job_id: (x.kind, len(x.nodes)) for x in d}
    # 8 GPUs: the interactive job takes 6 (the bulk job shrinks), bulk jobs share the rest
    assert kinds["i"] == (DecisionKind.START, 6)
    assert kinds["b"] == (DecisionKind.RESIZE, 1)
    assert kinds["q"] == (DecisionKind.START, 1)


def test_work_since_the_checkpoint_counts_against_moving_a_running_job() -> None:
    new = ElasticJob("new", 1, 8, 1, speedup=LINEAR)
    # an hour into its allocation, it splits evenly with the newcomer (as above) ...
    held = ElasticJob("big", 1, 8, 1, current=7, speedup=LINEAR, run_s=3600.0)
    assert GeneticElastic().allocate([held, new], 8, 30.0) == {"big": 4, "new": 4}
    # ... but the hour since its last checkpoint, thrown away by any change, halves what a
    # change is worth to it: it gives up less
    unsaved = replace(held, lost_s=3600.0)
    assert GeneticElastic().allocate([unsaved, new], 8, 30.0) == {"big": 5, "new": 3}
    # count_lost=False: the restart cost alone, as Pollux (its jobs checkpoint at every stop)
    blind = GeneticElastic(count_lost=False).allocate([unsaved, new], 8, 30.0)
    assert blind == {"big": 4, "new": 4}


def test_shared_reads_the_work_since_the_checkpoint_from_the_snapshot() -> None:
    nodes = (NodeView("n0", 4, 0), NodeView("n1", 4, 1))

    def size(checkpoint_at: float) -> int:
        big = RunningJob(
            "b", "bulk", "a", ("n0",) * 4 + ("n1",) * 3, min_gpus=1, max_gpus=8,
            started_at=0.0, checkpoint_at=checkpoint_at, speedup=LINEAR,
        )  # fmt: skip
        queue = (QueuedJob("q", "bulk", "a", 1, 2, 3500.0, min_gpus=1, max_gpus=8),)
        snap = Snapshot(nodes, queue, (big,), now=3600.0, seed=5)
        policy = SCHEDULING_POLICIES.create("shared", elastic="genetic", min_runtime_s=0.0)
        resized = [len(x.nodes) for x in policy.decide(snap) if x.job_id == "b"]
        return resized[0] if resized else big.gpus

    assert size(checkpoint_at=3590.0) == 4  # checkpointed 10 s ago: split with the newcomer
    assert size(checkpoint_at=0.0) == 5  # an hour of work at stake: it gives up less


def test_shared_genetic_is_shared_with_its_three_settings() -> None:
    policy = SCHEDULING_POLICIES.create("shared-genetic")
    assert isinstance(policy, SharedSchedulingPolicy)
    assert isinstance(policy.elastic, GeneticElastic)
    assert (policy.las_first_gpu_s, policy.min_runtime_s) == (28800.0, 0.0)
    # any setting may still be given
    assert SCHEDULING_POLICIES.create("shared-genetic", min_runtime_s=60.0).min_runtime_s == 60.0
