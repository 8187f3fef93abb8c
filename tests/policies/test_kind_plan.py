"""Kinds chosen with counts (``policies.scheduling.kind_plan``): against brute force on small
pools, each kind's GPUs respected, and ``shared`` moving jobs where the plan puts them."""

from __future__ import annotations

import dataclasses
import itertools
import math

from hypothesis import given, settings
from hypothesis import strategies as st

from policies import SCHEDULING_POLICIES, DecisionKind, NodeView, QueuedJob, RunningJob, Snapshot
from policies.elastic import ElasticJob, SearchElastic
from policies.scheduling.kind_plan import EXACT_CELLS, plan_kinds, stuck_moves

SLOW = (NodeView("s0", 4, 4, 24.0, "S", 1.0), NodeView("s1", 4, 4, 24.0, "S", 1.0))
FAST = (NodeView("f0", 4, 4, 80.0, "F", 3.0),)
# the objective without the served weight: sum of -log(speed x speedup), one term per job
PLAIN = SearchElastic(served_scale_s=0.0)


def _curve(gain: float, n: int = 8) -> tuple[float, ...]:
    """A concave speedup curve: each GPU adds ``gain`` of the one before it."""
    return tuple(sum(gain**i for i in range(k)) for k in range(1, n + 1))


def _value(jobs: list[QueuedJob], plan: dict[str, tuple[str, int]], snap: Snapshot) -> float:
    """The objective of a plan of queued jobs (no restart penalty): sum of -log(goodput)."""
    total = 0.0
    for q in jobs:
        kind, n = plan[q.job_id]
        total -= math.log(q.speed_on(kind, snap.kinds[kind]) * q.speedup[n - 1])
    return total


def _brute(jobs: list[QueuedJob], snap: Snapshot) -> float:
    """The least objective over every (kind, count) per job within each kind's GPUs."""
    caps = dict(snap.kind_gpus)
    options = [
        [(k, n) for k in snap.kinds for n in range(q.min_gpus, q.max_gpus + 1) if n <= caps[k]]
        for q in jobs
    ]
    best = math.inf
    for combo in itertools.product(*options):
        used = {k: 0 for k in caps}
        for k, n in combo:
            used[k] += n
        if all(used[k] <= caps[k] for k in caps):
            best = min(
                best, _value(jobs, {q.job_id: c for q, c in zip(jobs, combo, strict=True)}, snap)
            )
    return best


@st.composite
def small_problems(draw: st.DrawFn) -> tuple[list[QueuedJob], Snapshot]:
    jobs = []
    for i in range(draw(st.integers(1, 4))):
        gain = draw(st.sampled_from((0.3, 0.6, 0.9)))
        fast = draw(st.sampled_from((1.2, 3.0, 6.0)))
        jobs.append(
            QueuedJob(
                f"j{i}",
                "bulk",
                "t",
                1,
                i,
                0.0,
                min_gpus=1,
                max_gpus=draw(st.integers(1, 6)),
                speedup=_curve(gain),
                kind_speed=(("S", 1.0), ("F", fast)),
            )
        )
    return jobs, Snapshot((*SLOW, *FAST), tuple(jobs), now=10.0)


def _plan(
    jobs: list[QueuedJob], snap: Snapshot, exact_cells: int = EXACT_CELLS
) -> tuple[dict[str, int], dict[str, str]]:
    elastic = [ElasticJob(q.job_id, q.min_gpus, q.max_gpus, 1, 0, q.speedup) for q in jobs]
    caps = {n.node_id: n.free_gpus for n in snap.nodes}
    of = {q.job_id: q for q in jobs}
    plan = plan_kinds(elastic, of, caps, 30.0, snap, PLAIN, exact_cells=exact_cells)
    assert plan is not None
    return plan


def _fits(
    jobs: list[QueuedJob], snap: Snapshot, sizes: dict[str, int], kinds: dict[str, str]
) -> float:
    """Every job placed (the pool holds every minimum) within its bounds, each kind within its
    GPUs; returns the plan's objective."""
    assert set(kinds) == {q.job_id for q in jobs}
    for k, cap in snap.kind_gpus.items():
        assert sum(n for j, n in sizes.items() if kinds[j] == k) <= cap
    for q in jobs:
        assert q.min_gpus <= sizes[q.job_id] <= q.max_gpus
    return _value(jobs, {j: (kinds[j], sizes[j]) for j in sizes}, snap)


@settings(max_examples=60, deadline=None)
@given(small_problems())
def test_the_exact_plan_is_the_brute_force_best_and_fits_each_kind(
    problem: tuple[list[QueuedJob], Snapshot],
) -> None:
    jobs, snap = problem
    got = _fits(jobs, snap, *_plan(jobs, snap))
    best = _brute(jobs, snap)
    assert got <= best + 1e-9, (got, best)


def test_fast_gpus_are_spread_where_they_gain_most() -> None:
    # four GPUs of F (3x) and eight of S: a job that scales well takes S's many GPUs, the two
    # that barely scale share F's few (the homogeneous search gave the first comer F's four)
    scales = QueuedJob(
        "scales", "bulk", "t", 1, 0, 0.0, min_gpus=1, max_gpus=8, speedup=_curve(0.95)
    )
    flat = [
        QueuedJob(
            f"flat{i}", "bulk", "t", 1, i + 1, 0.0, min_gpus=1, max_gpus=4, speedup=_curve(0.1)
        )
        for i in range(2)
    ]
    jobs = [scales, *flat]
    snap = Snapshot((*SLOW, *FAST), tuple(jobs), now=10.0)
    sizes, kinds = _plan(jobs, snap)
    assert kinds == {"scales": "S", "flat0": "F", "flat1": "F"}
    assert sizes["scales"] == 8 and sizes["flat0"] + sizes["flat1"] == 4


def test_a_kept_job_stays_on_its_kind_and_a_tuning_gang_too() -> None:
    # a run with no step yet (kept by admission: floor = what it holds) and a tuning gang on
    # S, F idle and 3x faster: neither moves; an old plain run does
    nodes = (dataclasses.replace(SLOW[0], free_gpus=0), *SLOW[1:], *FAST)
    fresh = RunningJob("fresh", "bulk", "t", ("s0", "s0"), started_at=3590.0)
    tuning = RunningJob("tuning", "bulk", "t", ("s0",), started_at=0.0, tuning=True)
    old = RunningJob("old", "bulk", "t", ("s0",), started_at=0.0, checkpoint_at=3590.0)
    snap = Snapshot(nodes, (), (fresh, tuning, old), now=3600.0, restart_cost_s=30.0)
    decisions = SCHEDULING_POLICIES.create("shared").decide(snap)
    moved = {d.job_id for d in decisions if d.kind is DecisionKind.RESIZE}
    assert moved == {"old"}, decisions


def test_a_move_and_a_start_in_one_round_apply_one_after_another() -> None:
    # F is full with a long-running job that barely gains there; S has a queued job that gains
    # 6x on F: the plan swaps them, and every decision fits when applied in order
    from tests.policies.test_scheduling_contract import apply

    nodes = (*SLOW, dataclasses.replace(FAST[0], free_gpus=0))
    holder = RunningJob(
        "holder",
        "bulk",
        "t",
        ("f0",) * 4,
        started_at=0.0,
        checkpoint_at=3590.0,
        kind_speed=(("S", 1.0), ("F", 1.05)),
    )
    wants = QueuedJob("wants", "bulk", "t", 4, 0, 0.0, kind_speed=(("S", 1.0), ("F", 6.0)))
    snap = Snapshot(nodes, (wants,), (holder,), now=3600.0, restart_cost_s=30.0)
    decisions = SCHEDULING_POLICIES.create("shared").decide(snap)
    apply(snap, decisions)  # raises on a decision that does not fit
    by = {d.job_id: d for d in decisions}
    assert by["holder"].kind is DecisionKind.RESIZE
    assert {snap.kind_of(n) for n in by["holder"].nodes} == {"S"}
    assert by["wants"].kind is DecisionKind.START
    assert {snap.kind_of(n) for n in by["wants"].nodes} == {"F"}


def test_a_swap_of_kinds_is_stuck_and_a_chain_is_not() -> None:
    held = {"a": ("S", 2), "b": ("F", 4)}
    swap = ({"a": 2, "b": 4}, {"a": "F", "b": "S"})
    # neither can go first with nothing free: both stuck (shared plans again, keeping them)
    assert stuck_moves(*swap, held, {"S": 0, "F": 0}) == {"a", "b"}
    # two F GPUs free: a moves, and leaves S two; b needs four there
    assert stuck_moves(*swap, held, {"S": 0, "F": 2}) == {"b"}
    # and two S GPUs free as well: a's move makes room for b's
    assert stuck_moves(*swap, held, {"S": 2, "F": 2}) == set()
    # a shrink or a preemption frees its GPUs before any move
    assert stuck_moves({"a": 2, "b": 0}, {"a": "F"}, held, {"S": 0, "F": 0}) == set()


def test_too_large_a_programme_is_declined_and_shared_places_as_one_kind_then_moves() -> None:
    jobs = [
        QueuedJob(f"j{i}", "bulk", "t", 1, i, 0.0, min_gpus=1, max_gpus=4, speedup=_curve(0.9))
        for i in range(3)
    ]
    snap = Snapshot((*SLOW, *FAST), tuple(jobs), now=10.0)
    elastic = [ElasticJob(q.job_id, q.min_gpus, q.max_gpus, 1, 0, q.speedup) for q in jobs]
    caps = {n.node_id: n.free_gpus for n in snap.nodes}
    of = {q.job_id: q for q in jobs}
    assert plan_kinds(elastic, of, caps, 30.0, snap, PLAIN, exact_cells=10) is None
    # shared's round goes on without it: every job starts, each on one kind
    decisions = SCHEDULING_POLICIES.create("shared").decide(snap)
    assert sorted(d.job_id for d in decisions if d.kind is DecisionKind.START) == ["j0", "j1", "j2"]


def test_a_full_kind_leaves_out_the_later_job_in_admission_order() -> None:
    # two jobs that may run only on F (4 GPUs): the first takes 3, the second needs 2; the
    # programme leaves out the second (admission's order), never the first to fit the second
    first = QueuedJob("first", "bulk", "t", 3, 0, 0.0, gpu_kinds=("F",))
    second = QueuedJob("second", "bulk", "t", 2, 1, 0.0, gpu_kinds=("F",))
    snap = Snapshot((*SLOW, *FAST), (first, second), now=10.0)
    elastic = [ElasticJob(q.job_id, q.gpus, q.gpus, q.gpus) for q in (first, second)]
    caps = {n.node_id: n.free_gpus for n in snap.nodes}
    plan = plan_kinds(elastic, {"first": first, "second": second}, caps, 30.0, snap, PLAIN)
    assert plan == ({"first": 3, "second": 0}, {"first": "F"})
    # in the other order, the other one
    plan = plan_kinds(elastic[::-1], {"first": first, "second": second}, caps, 30.0, snap, PLAIN)
    assert plan == ({"second": 2, "first": 0}, {"second": "F"})


def test_a_run_with_no_step_is_never_left_out_for_a_job_before_it() -> None:
    # N holds every A GPU and has done no step; D, due soon and only on A, comes first in
    # admission (the deadline class): D waits, N is not preempted (B is idle, D may not use it)
    a = (NodeView("a0", 4, 0, 80.0, "A", 2.0), NodeView("a1", 4, 0, 80.0, "A", 2.0))
    b = (NodeView("b0", 4, 4, 80.0, "B", 1.0), NodeView("b1", 4, 4, 80.0, "B", 1.0))
    n = RunningJob("n", "bulk", "t", ("a0",) * 4 + ("a1",) * 4, started_at=90.0, first_step_at=None)
    d = QueuedJob(
        "d", "bulk", "t", 8, 1, 0.0, deadline=400.0, gpu_kinds=("A",), remaining_work=300.0
    )
    decisions = SCHEDULING_POLICIES.create("shared").decide(
        Snapshot((*a, *b), (d,), (n,), now=100.0)
    )
    assert not [x for x in decisions if x.job_id == "n"], decisions
    assert [x.kind for x in decisions if x.job_id == "d"] == [DecisionKind.WAIT]


def test_the_gpus_of_a_job_across_kinds_are_not_given_to_another() -> None:
    # X holds 2 GPUs of F and 2 of S (across kinds: left as it is); Q, only on F, takes the
    # 2 F GPUs that are free, not 4 it could never get
    x = RunningJob("x", "bulk", "t", ("f0", "f0", "s0", "s0"), started_at=0.0)
    q = QueuedJob(
        "q",
        "bulk",
        "t",
        2,
        1,
        0.0,
        min_gpus=2,
        max_gpus=4,
        gpu_kinds=("F",),
        speedup=_curve(0.9, 4),
    )
    nodes = (
        dataclasses.replace(SLOW[0], free_gpus=2),
        SLOW[1],
        dataclasses.replace(FAST[0], free_gpus=2),
    )
    decisions = SCHEDULING_POLICIES.create("shared").decide(Snapshot(nodes, (q,), (x,), now=100.0))
    (start,) = [d for d in decisions if d.job_id == "q"]
    assert start.kind is DecisionKind.START and start.nodes == ("f0", "f0")


def test_after_a_job_is_left_out_the_others_are_still_planned_exactly() -> None:
    # F holds the first job (4 GPUs); the second, only on F too, is left out; fifty jobs that
    # each gain from a second S GPU all get two (the cost of leaving one out once rounded
    # their choices away: they got one each, leaving 50 S GPUs idle)
    s_nodes = tuple(NodeView(f"s{i}", 4, 4, 24.0, "S", 1.0) for i in range(25))
    on_f = [
        QueuedJob(f"f{i}", "bulk", "t", g, i, 0.0, gpu_kinds=("F",)) for i, g in enumerate((4, 2))
    ]
    on_s = [
        QueuedJob(
            f"j{i}",
            "bulk",
            "t",
            1,
            2 + i,
            0.0,
            min_gpus=1,
            max_gpus=2,
            speedup=(1.0, 1.5),
            gpu_kinds=("S",),
        )
        for i in range(50)
    ]
    jobs = on_f + on_s
    snap = Snapshot((*s_nodes, *FAST), tuple(jobs), now=10.0)
    elastic = [ElasticJob(q.job_id, q.lo, q.hi, q.gpus, 0, q.speedup) for q in jobs]
    caps = {n.node_id: n.free_gpus for n in snap.nodes}
    plan = plan_kinds(elastic, {q.job_id: q for q in jobs}, caps, 30.0, snap, PLAIN)
    assert plan is not None
    sizes, kinds = plan
    assert (sizes["f0"], sizes["f1"]) == (4, 0)
    assert all(sizes[q.job_id] == 2 and kinds[q.job_id] == "S" for q in on_s), sizes
