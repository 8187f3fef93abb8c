"""GPU kinds in the policies: required and excluded kinds, one kind per gang, and the kind
``shared`` chooses (bulk: where the job is fastest; interactive: the cheapest that meets it)."""

from __future__ import annotations

import dataclasses
import itertools

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from policies import SCHEDULING_POLICIES, DecisionKind, NodeView, QueuedJob, RunningJob, Snapshot
from policies.eligibility import capacity, kind_order, place, why_barred
from policies.placement import PLACEMENTS
from tests.policies.test_eligibility import PLACING, _policy
from tests.policies.test_scheduling_contract import apply, snapshots

# two kinds, the slower first in the pool's order (a placement blind to kinds would take it)
L4 = (NodeView("l0", 4, 4, 24.0, "L4", 0.5), NodeView("l1", 4, 4, 24.0, "L4", 0.5))
H100 = (NodeView("h0", 4, 4, 80.0, "H100", 2.0), NodeView("h1", 4, 4, 80.0, "H100", 2.0))
POOL = (*L4, *H100)


def _bulk(name: str, gpus: int, **kw: object) -> QueuedJob:
    return QueuedJob(name, "bulk", "t", gpus, 0, 0.0, **kw)  # type: ignore[arg-type]


def _kinds_of(snap: Snapshot, nodes: tuple[str, ...]) -> set[str]:
    return {snap.kind_of(n) for n in nodes}


@pytest.mark.parametrize("name", sorted(PLACING))
def test_a_job_that_requires_a_kind_waits_for_it(name: str) -> None:
    busy = tuple(dataclasses.replace(n, free_gpus=0) for n in H100)
    job = _bulk("needs-h100", 2, gpu_kinds=("H100",))
    running = (RunningJob("other", "interactive", "u", ("h0",) * 4 + ("h1",) * 4),)
    snap = Snapshot((*L4, *busy), (job,), running, now=100.0)
    decisions = _policy(name).decide(snap)
    (mine,) = [d for d in decisions if d.job_id == "needs-h100"]
    assert mine.kind is DecisionKind.WAIT, mine
    # once its kind is free, it starts there and only there
    snap = Snapshot(POOL, (job,), now=100.0)
    (start,) = [d for d in _policy(name).decide(snap) if d.job_id == "needs-h100"]
    assert start.kind is DecisionKind.START
    assert _kinds_of(snap, start.nodes) == {"H100"}


@pytest.mark.parametrize("name", sorted(PLACING))
def test_an_excluded_kind_is_never_taken(name: str) -> None:
    job = _bulk("no-h100", 2, exclude_kinds=("H100",), kind_speed=(("H100", 9.0),))
    snap = Snapshot(POOL, (job,), now=100.0)
    (start,) = [d for d in _policy(name).decide(snap) if d.job_id == "no-h100"]
    assert start.kind is DecisionKind.START
    assert _kinds_of(snap, start.nodes) == {"L4"}


def test_a_job_no_kind_of_the_pool_allows_waits_naming_the_field() -> None:
    job = _bulk("a100", 1, gpu_kinds=("A100",))
    snap = Snapshot(POOL, (job,), now=100.0)
    (wait,) = SCHEDULING_POLICIES.create("shared").decide(snap)
    assert wait.kind is DecisionKind.WAIT
    assert "resources.gpu_kinds" in wait.reason and "A100" in wait.reason
    assert why_barred(snap, job) == (
        "needs GPUs of kind A100 (resources.gpu_kinds); the pool has none"
    )


def test_a_gang_larger_than_any_kind_waits_and_says_so() -> None:
    # 8 GPUs of each kind: a 12-GPU gang fits the pool's 16 but no one kind
    snap = Snapshot(POOL, (_bulk("wide", 12),), now=100.0)
    assert capacity(snap, snap.queue[0]) == 8
    (wait,) = SCHEDULING_POLICIES.create("shared").decide(snap)
    assert wait.kind is DecisionKind.WAIT and "largest kind has 8" in wait.reason


def test_an_elastic_job_that_could_use_more_than_any_kind_starts_within_one() -> None:
    # up to 16 GPUs (the pool's total) but 8 of each kind: it starts on an idle pool, on
    # one kind, rather than wait for a size no kind holds (it waited forever once)
    elastic = _bulk("el", 1, min_gpus=1, max_gpus=16, speedup=tuple(map(float, range(1, 17))))
    snap = Snapshot(POOL, (elastic,), now=100.0)
    (start,) = SCHEDULING_POLICIES.create("shared").decide(snap)
    assert start.kind is DecisionKind.START and len(start.nodes) == 8
    assert _kinds_of(snap, start.nodes) == {"H100"}
    # running on one kind, it grows to what that kind holds (before: it did not grow at all)
    running = RunningJob(
        "el", "bulk", "t", ("l0", "l0"), min_gpus=1, max_gpus=16, checkpoint_at=990.0
    )
    nodes = (dataclasses.replace(L4[0], free_gpus=2), L4[1], *H100)
    snap = Snapshot(nodes, (), (running,), now=1000.0)
    (grow,) = SCHEDULING_POLICIES.create("shared", kind_plan=False).decide(snap)
    assert grow.kind is DecisionKind.RESIZE and len(grow.nodes) == 8
    assert _kinds_of(snap, grow.nodes) == {"L4"}
    # with kinds chosen with the counts (the default), it moves to the idle faster kind, 8
    # GPUs there, in the same round
    (move,) = SCHEDULING_POLICIES.create("shared").decide(snap)
    assert move.kind is DecisionKind.RESIZE and len(move.nodes) == 8
    assert _kinds_of(snap, move.nodes) == {"H100"} and "moves from L4 to H100" in move.reason


def test_bulk_takes_the_kind_it_is_fastest_on() -> None:
    # the kinds' speeds say H100; this job's own measured speeds say L4 (memory-bound, say)
    fast_on_l4 = _bulk("j", 2, kind_speed=(("L4", 1.5), ("H100", 1.2)))
    plain = _bulk("k", 2)
    snap = Snapshot(POOL, (fast_on_l4, plain), now=100.0)
    starts = {d.job_id: d for d in SCHEDULING_POLICIES.create("shared").decide(snap)}
    assert _kinds_of(snap, starts["j"].nodes) == {"L4"}
    assert _kinds_of(snap, starts["k"].nodes) == {"H100"}  # unknown: the kinds' own speeds


def test_interactive_takes_the_cheapest_kind_that_meets_its_latency() -> None:
    meets_on_l4 = QueuedJob("svc", "interactive", "t", 1, 0, 0.0, min_speed=0.4)
    needs_h100 = QueuedJob("svc2", "interactive", "t", 1, 1, 0.0, min_speed=1.0)
    unknown = QueuedJob("svc3", "interactive", "t", 1, 2, 0.0)
    snap = Snapshot(POOL, (meets_on_l4, needs_h100, unknown), now=100.0)
    starts = {d.job_id: d for d in SCHEDULING_POLICIES.create("shared").decide(snap)}
    assert _kinds_of(snap, starts["svc"].nodes) == {"L4"}
    assert _kinds_of(snap, starts["svc2"].nodes) == {"H100"}
    assert _kinds_of(snap, starts["svc3"].nodes) == {"H100"}  # unknown: the fastest


def test_a_grow_stays_on_the_kind_the_job_runs_on() -> None:
    # an elastic job on 2 L4 GPUs with H100s idle: a grow is on L4 only (a change of kind is a
    # move, a restart: with kinds planned with counts it moves, see the test above)
    running = RunningJob("el", "bulk", "t", ("l0", "l0"), min_gpus=1, max_gpus=8)
    nodes = (dataclasses.replace(L4[0], free_gpus=2), L4[1], *H100)
    snap = Snapshot(nodes, (), (running,), now=1000.0)
    decisions = SCHEDULING_POLICIES.create("shared", kind_plan=False).decide(snap)
    (grow,) = [d for d in decisions if d.job_id == "el"]
    assert grow.kind is DecisionKind.RESIZE and len(grow.nodes) > 2
    assert _kinds_of(snap, grow.nodes) == {"L4"}


def test_a_pool_of_one_labelled_kind_places_as_a_pool_without_kinds() -> None:
    plain = tuple(dataclasses.replace(n, kind="", speed=1.0) for n in H100)
    job = _bulk("j", 6)
    a = SCHEDULING_POLICIES.create("shared").decide(Snapshot(H100, (job,), now=1.0))
    b = SCHEDULING_POLICIES.create("shared").decide(Snapshot(plain, (job,), now=1.0))
    assert a == b


# ---- the kind choice against brute force ------------------------------------------------


@st.composite
def kind_snapshots(draw: st.DrawFn) -> Snapshot:
    """Two or three kinds of random speeds and free GPUs; one queued bulk job of random
    per-kind speeds, allowed kinds and size."""
    kinds = draw(st.integers(2, 3))
    nodes = []
    for k in range(kinds):
        speed = draw(st.sampled_from([0.5, 1.0, 2.0, 3.0]))
        for i in range(draw(st.integers(1, 2))):
            cap = draw(st.integers(1, 4))
            nodes.append(
                NodeView(f"k{k}n{i}", cap, draw(st.integers(0, cap)), None, f"K{k}", speed)
            )
    names = [f"K{k}" for k in range(kinds)]
    own = tuple((k, draw(st.sampled_from([0.25, 1.0, 2.5]))) for k in names if draw(st.booleans()))
    excluded = tuple(k for k in names if draw(st.integers(0, 3)) == 0)
    job = _bulk("j", draw(st.integers(1, 4)), kind_speed=own, exclude_kinds=excluded)
    return Snapshot(tuple(nodes), (job,), now=100.0)


@settings(suppress_health_check=[HealthCheck.differing_executors], max_examples=150, deadline=None)
@given(snap=kind_snapshots())
def test_the_kind_chosen_is_the_brute_force_best(snap: Snapshot) -> None:
    """Every (kind, placement) a gang of the job could take now, by brute force: ``shared``
    starts it iff one exists, on a kind where it is fastest among those (the cheaper on ties)."""
    (job,) = snap.queue
    free = snap.free()
    feasible = []
    for kind in snap.kinds:
        if not job.allows(kind):
            continue
        room = sum(f for n, f in free.items() if snap.kind_of(n) == kind)
        if room >= job.gpus:
            feasible.append((job.speed_on(kind, snap.kinds[kind]), -snap.kinds[kind], kind))
    decisions = SCHEDULING_POLICIES.create("shared").decide(snap)
    (d,) = [d for d in decisions if d.job_id == "j"]
    if not feasible:
        assert d.kind is DecisionKind.WAIT
        return
    assert d.kind is DecisionKind.START, d
    (kind,) = _kinds_of(snap, d.nodes)
    best = max(feasible)
    assert (job.speed_on(kind, snap.kinds[kind]), -snap.kinds[kind]) == best[:2]


def test_place_tries_every_kind_in_order() -> None:
    snap = Snapshot(POOL, (), now=0.0)
    job = _bulk("j", 4)
    assert kind_order(snap, job) == ("H100", "L4")
    free = {"l0": 4, "l1": 4, "h0": 2, "h1": 1}  # H100 has 3 free: the gang goes to L4
    nodes = place(PLACEMENTS.create("topology"), 4, free, snap, job)
    assert nodes is not None and _kinds_of(snap, nodes) == {"L4"}


@st.composite
def with_kinds(draw: st.DrawFn) -> Snapshot:
    """A random snapshot whose nodes have kinds and whose jobs require or exclude some."""
    snap = draw(snapshots(progress=True))
    kinds = ["A", "B", "C"]
    speeds = {"A": 1.0, "B": 2.0, "C": 0.5}
    nodes = []
    for n in snap.nodes:
        k = draw(st.sampled_from(kinds))
        nodes.append(dataclasses.replace(n, kind=k, speed=speeds[k]))
    pick = st.sampled_from([(), (), ("A",), ("B", "C")])
    return dataclasses.replace(
        snap,
        nodes=tuple(nodes),
        queue=tuple(
            dataclasses.replace(q, gpu_kinds=draw(pick), exclude_kinds=draw(pick))
            for q in snap.queue
        ),
    )


@pytest.mark.parametrize("name", sorted(PLACING))
@settings(suppress_health_check=[HealthCheck.differing_executors], max_examples=60, deadline=None)
@given(snap=with_kinds())
def test_no_gpu_is_ever_taken_on_a_kind_the_job_does_not_allow(name: str, snap: Snapshot) -> None:
    decisions = _policy(name).decide(snap)
    apply(snap, decisions)
    queued = {q.job_id: q for q in snap.queue}
    for d in decisions:
        if d.kind is DecisionKind.START:
            job = queued[d.job_id]
            assert all(job.allows(snap.kind_of(n)) for n in d.nodes), d
            if name != "pollux":  # heterogeneity-unaware: it may span kinds
                assert len(_kinds_of(snap, d.nodes)) == 1, d


def test_kind_order_lists_only_allowed_kinds() -> None:
    snap = Snapshot(POOL, (), now=0.0)
    for req, exc in itertools.product([(), ("L4",)], [(), ("H100",)]):
        job = _bulk("j", 1, gpu_kinds=req, exclude_kinds=exc)
        assert all(job.allows(k) for k in kind_order(snap, job))


# ---- moving a running job to a faster kind ----------------------------------------------


def _on_l4(name: str, started_at: float, **kw: object) -> RunningJob:
    return RunningJob(name, "bulk", "t", ("l0", "l0"), started_at=started_at, **kw)  # type: ignore[arg-type]


def test_a_long_job_on_a_slow_kind_moves_where_it_gains_more_than_the_move_costs() -> None:
    # it has run an hour on L4 (speed 0.5) and the H100s (2.0) are idle: it moves there
    nodes = (dataclasses.replace(L4[0], free_gpus=2), L4[1], *H100)
    job = _on_l4("long", started_at=0.0, checkpoint_at=3590.0)
    snap = Snapshot(nodes, (), (job,), now=3600.0, restart_cost_s=30.0)
    (move,) = [d for d in SCHEDULING_POLICIES.create("shared").decide(snap) if d.job_id == "long"]
    assert move.kind is DecisionKind.RESIZE and len(move.nodes) == 2
    assert _kinds_of(snap, move.nodes) == {"H100"}
    assert "moves from L4 to H100" in move.reason


def test_no_move_when_the_gain_does_not_pay_for_it() -> None:
    nodes = (dataclasses.replace(L4[0], free_gpus=2), L4[1], *H100)
    # a job that started a minute ago: as long again left, 45 s saved < 2 x (30 s restart + 60 s)
    young = _on_l4("young", started_at=3540.0, checkpoint_at=3540.0)
    # one that is as fast on L4 as on H100 for itself (its own measured speeds)
    even = _on_l4("even", started_at=0.0, kind_speed=(("L4", 1.0), ("H100", 1.0)))
    # a tuning gang as long on L4 as the job that moves: its trials measure the kind they got
    tuning = _on_l4("tuning", started_at=0.0, checkpoint_at=3590.0, tuning=True)
    for job in (young, even, tuning):
        snap = Snapshot(nodes, (), (job,), now=3600.0, restart_cost_s=30.0)
        decisions = SCHEDULING_POLICIES.create("shared").decide(snap)
        assert not [d for d in decisions if d.job_id == job.job_id and "moves" in d.reason]


def test_a_pool_of_one_kind_never_moves_a_job() -> None:
    nodes = tuple(dataclasses.replace(n, kind="", speed=1.0) for n in (L4[0], *H100))
    job = RunningJob("j", "bulk", "t", ("l0", "l0"), started_at=0.0)
    snap = Snapshot(nodes, (), (job,), now=3600.0)
    assert not [d for d in SCHEDULING_POLICIES.create("shared").decide(snap) if d.job_id == "j"]


# ---- room for interactive work in a pool of several kinds -------------------------------


def _full_pool() -> tuple[tuple[NodeView, ...], tuple[RunningJob, ...]]:
    """Every GPU of both kinds held by one 4-GPU bulk job per node (teams a/b, none
    guaranteed: all of it borrowed), started an hour ago."""
    nodes = tuple(dataclasses.replace(n, free_gpus=0) for n in POOL)
    running = tuple(
        RunningJob(f"b-{n.node_id}", "bulk", "ab"[i % 2], (n.node_id,) * 4, seq=i, started_at=0.0)
        for i, n in enumerate(POOL)
    )
    return nodes, running


@pytest.mark.parametrize(("min_speed", "kind"), [(0.4, "L4"), (1.0, "H100"), (0.0, "H100")])
def test_an_interactive_start_makes_room_on_the_kind_it_starts_on(
    min_speed: float, kind: str
) -> None:
    # bulk jobs hold every GPU of both kinds: room is made on the kind it is to start on (the
    # cheapest that meets it, else the fastest), by preempting a bulk job there, never on the
    # other kind (its gang goes on one)
    nodes, running = _full_pool()
    job = QueuedJob("i", "interactive", "c", 2, 9, 3590.0, min_speed=min_speed)
    snap = Snapshot(nodes, (job,), running, now=3600.0)
    decisions = SCHEDULING_POLICIES.create("shared").decide(snap)
    (start,) = [d for d in decisions if d.job_id == "i"]
    assert start.kind is DecisionKind.START, decisions
    assert _kinds_of(snap, start.nodes) == {kind}
    victims = [d.job_id for d in decisions if d.kind is DecisionKind.PREEMPT]
    assert len(victims) == 1, decisions
    held = {r.job_id: r.nodes for r in running}
    assert _kinds_of(snap, held[victims[0]]) == {kind}
    assert set(start.nodes) <= set(held[victims[0]])


def test_a_service_grows_on_its_kind_taking_room_from_bulk_there() -> None:
    # a service on one L4 GPU asked for 3 replicas, the pool full of bulk jobs: it grows on L4,
    # by preempting an L4 bulk job, and no H100 job is touched
    nodes, running = _full_pool()
    bulk_l0 = RunningJob("b-l0", "bulk", "a", ("l0",) * 3, seq=0, started_at=0.0)
    svc = RunningJob("svc", "interactive", "c", ("l0",), seq=9, started_at=0.0, want_gpus=3)
    snap = Snapshot(nodes, (), (bulk_l0, *running[1:], svc), now=3600.0)
    decisions = SCHEDULING_POLICIES.create("shared").decide(snap)
    (grow,) = [d for d in decisions if d.job_id == "svc"]
    assert grow.kind is DecisionKind.RESIZE and len(grow.nodes) == 3, decisions
    assert _kinds_of(snap, grow.nodes) == {"L4"}
    victims = [d.job_id for d in decisions if d.kind is DecisionKind.PREEMPT]
    assert victims and all(v.startswith("b-l") for v in victims), decisions


def _elastic_l4_rigid_h100(
    pool: tuple[NodeView, ...] = POOL,
) -> tuple[tuple[NodeView, ...], tuple[RunningJob, ...]]:
    """Every GPU of ``pool`` (4 per node) held by bulk jobs started an hour ago: on each L4
    node an elastic job (1-4 GPUs, on 4), on each H100 node a rigid one (team a, nothing
    guaranteed)."""
    nodes = tuple(dataclasses.replace(n, free_gpus=0) for n in pool)
    running = tuple(
        RunningJob(
            f"b-{n.node_id}",
            "bulk",
            "a",
            (n.node_id,) * 4,
            seq=i,
            started_at=0.0,
            **({"min_gpus": 1, "max_gpus": 4} if n.kind == "L4" else {}),  # type: ignore[arg-type]
        )
        for i, n in enumerate(nodes)
    )
    return nodes, running


def test_an_interactive_start_takes_a_kind_where_shrinks_make_room_before_preempting() -> None:
    # the fastest kind (H100) is full of rigid jobs; on L4 elastic jobs can give up GPUs: a job
    # whose latency any kind meets starts on L4 by shrinks, and no job loses its work
    nodes, running = _elastic_l4_rigid_h100()
    job = QueuedJob("i", "interactive", "c", 2, 9, 3590.0)
    snap = Snapshot(nodes, (job,), running, now=3600.0)
    decisions = SCHEDULING_POLICIES.create("shared").decide(snap)
    (start,) = [d for d in decisions if d.job_id == "i"]
    assert start.kind is DecisionKind.START and _kinds_of(snap, start.nodes) == {"L4"}
    assert not [d for d in decisions if d.kind is DecisionKind.PREEMPT], decisions
    shrunk = [d for d in decisions if d.kind is DecisionKind.RESIZE]
    assert shrunk and all(d.job_id.startswith("b-l") for d in shrunk), decisions
    # a job whose latency only H100 meets still takes H100, by a preemption there
    fast = dataclasses.replace(job, min_speed=1.0)
    snap = Snapshot(nodes, (fast,), running, now=3600.0)
    decisions = SCHEDULING_POLICIES.create("shared").decide(snap)
    (start,) = [d for d in decisions if d.job_id == "i"]
    assert start.kind is DecisionKind.START and _kinds_of(snap, start.nodes) == {"H100"}
    victims = [d.job_id for d in decisions if d.kind is DecisionKind.PREEMPT]
    assert len(victims) == 1 and victims[0].startswith("b-h"), decisions


def test_a_kind_whose_shrinks_would_free_gpus_the_job_cannot_use_is_passed_over() -> None:
    # L4's elastic jobs could shrink, but one sits on l1, whose 16 GB the job's 20 GB rules
    # out (room is not made on a kind then): it starts on H100 by a preemption, not waits
    nodes, running = _elastic_l4_rigid_h100(
        (
            NodeView("l0", 4, 0, 24.0, "L4", 0.5),
            NodeView("l1", 4, 0, 16.0, "L4", 0.5),
            NodeView("h0", 4, 0, 80.0, "H100", 2.0),
            NodeView("h1", 4, 0, 80.0, "H100", 2.0),
        )
    )
    job = QueuedJob("i", "interactive", "c", 2, 9, 3590.0, gpu_memory_gb=20.0)
    snap = Snapshot(nodes, (job,), running, now=3600.0)
    decisions = SCHEDULING_POLICIES.create("shared").decide(snap)
    (start,) = [d for d in decisions if d.job_id == "i"]
    assert start.kind is DecisionKind.START and _kinds_of(snap, start.nodes) == {"H100"}


def test_a_start_after_shrinks_used_up_a_kind_preempts_on_the_other() -> None:
    # q0 (latency met on either kind) starts on H100 by shrinking the elastic job there; q1
    # finds no shrink left anywhere and starts on L4 by preempting its rigid job, rather than
    # waiting for H100, where no bulk GPU is left to free
    nodes = (NodeView("l0", 4, 0, None, "L4", 0.5), NodeView("h0", 4, 0, None, "H100", 2.0))
    running = (
        RunningJob("rigid-l4", "bulk", "a", ("l0",) * 4, seq=0),
        RunningJob("elastic-h100", "bulk", "a", ("h0",) * 4, seq=1, min_gpus=1, max_gpus=4),
    )
    queue = (
        QueuedJob("q0", "interactive", "b", 3, 10, 3590.0, min_speed=0.5),
        QueuedJob("q1", "interactive", "b", 3, 11, 3591.0),
    )
    snap = Snapshot(nodes, queue, running, now=3600.0)
    decisions = SCHEDULING_POLICIES.create("shared").decide(snap)
    starts = {d.job_id: d for d in decisions if d.kind is DecisionKind.START}
    assert set(starts) == {"q0", "q1"}, decisions
    assert _kinds_of(snap, starts["q0"].nodes) == {"H100"}
    assert _kinds_of(snap, starts["q1"].nodes) == {"L4"}
    assert [d.job_id for d in decisions if d.kind is DecisionKind.PREEMPT] == ["rigid-l4"]


def test_a_latency_job_preempts_on_a_kind_that_meets_it_before_a_free_kind_too_slow() -> None:
    # L4 is idle, H100 full of rigid bulk jobs: a job whose latency only H100 meets starts on
    # H100 by a preemption (on L4 it would miss its ceiling); one any kind meets takes L4 free
    nodes = (*L4, *(dataclasses.replace(n, free_gpus=0) for n in H100))
    running = tuple(
        RunningJob(f"b-{n.node_id}", "bulk", "a", (n.node_id,) * 4, seq=i, started_at=0.0)
        for i, n in enumerate(H100)
    )
    for min_speed, kind, preempts in ((1.0, "H100", 1), (0.4, "L4", 0), (0.0, "L4", 0)):
        job = QueuedJob("i", "interactive", "c", 2, 9, 3590.0, min_speed=min_speed)
        snap = Snapshot(nodes, (job,), running, now=3600.0)
        decisions = SCHEDULING_POLICIES.create("shared").decide(snap)
        (start,) = [d for d in decisions if d.job_id == "i"]
        assert start.kind is DecisionKind.START and _kinds_of(snap, start.nodes) == {kind}
        victims = [d for d in decisions if d.kind is DecisionKind.PREEMPT]
        assert len(victims) == preempts, (min_speed, decisions)


def test_a_move_goes_to_the_fastest_kind_with_room_for_it() -> None:
    # it has run an hour on L4 (0.5); H100 (2.0) is full, A100 (1.0) idle: it moves to A100
    # (before, it looked at H100 alone, found no room there, and stayed)
    a100 = (NodeView("a0", 4, 4, 80.0, "A100", 1.0),)
    full = tuple(dataclasses.replace(n, free_gpus=0) for n in H100)
    holders = tuple(
        RunningJob(f"b-{n.node_id}", "bulk", "t", (n.node_id,) * 4, seq=9 + i, started_at=3000.0)
        for i, n in enumerate(full)
    )
    nodes = (dataclasses.replace(L4[0], free_gpus=2), L4[1], *full, *a100)
    job = _on_l4("long", started_at=0.0, checkpoint_at=3590.0)
    snap = Snapshot(nodes, (), (job, *holders), now=3600.0, restart_cost_s=30.0)
    (move,) = [d for d in SCHEDULING_POLICIES.create("shared").decide(snap) if d.job_id == "long"]
    assert move.kind is DecisionKind.RESIZE and _kinds_of(snap, move.nodes) == {"A100"}
    assert "moves from L4 to A100" in move.reason


def test_a_move_needs_room_on_nodes_the_job_may_use() -> None:
    # F (2.0) has 4 free GPUs, but on a 16 GB node the job's 40 GB rules out; M (1.0) has
    # room it may use: it moves from S (0.5) to M
    nodes = (
        NodeView("s0", 4, 2, 48.0, "S", 0.5),
        NodeView("f-small", 4, 4, 16.0, "F", 2.0),
        NodeView("f-big", 4, 0, 80.0, "F", 2.0),
        NodeView("m0", 4, 4, 80.0, "M", 1.0),
    )
    hold = RunningJob("hold", "bulk", "t", ("f-big",) * 4, seq=1, started_at=3000.0)
    job = RunningJob(
        "long", "bulk", "t", ("s0", "s0"), started_at=0.0, checkpoint_at=3590.0, gpu_memory_gb=40.0
    )
    snap = Snapshot(nodes, (), (job, hold), now=3600.0, restart_cost_s=30.0)
    (move,) = [d for d in SCHEDULING_POLICIES.create("shared").decide(snap) if d.job_id == "long"]
    assert move.kind is DecisionKind.RESIZE and set(move.nodes) == {"m0"}


def test_a_job_on_a_node_gone_from_the_pool_is_not_moved_and_breaks_nothing() -> None:
    # its node died and the runtime has not told yet: the round goes on, and moves it nowhere
    nodes = (*L4, *H100)
    gone = RunningJob("gone", "bulk", "t", ("dead", "dead"), started_at=0.0, checkpoint_at=3590.0)
    snap = Snapshot(nodes, (), (gone,), now=3600.0, restart_cost_s=30.0)
    decisions = SCHEDULING_POLICIES.create("shared").decide(snap)
    assert not [d for d in decisions if d.job_id == "gone" and "moves" in d.reason], decisions
