"""Contract every scheduling policy keeps, checked on random snapshots (hypothesis).

Decisions are applied in order to the snapshot's free GPUs: a PREEMPT frees the job's GPUs,
a RESIZE frees the old set and takes the new one, a START takes its GPUs. No node may ever go
below zero free GPUs. Same snapshot and seed, same decisions.
"""

from __future__ import annotations

from collections import Counter

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from policies import (
    SCHEDULING_POLICIES,
    Decision,
    DecisionKind,
    NodeView,
    QueuedJob,
    RunningJob,
    SchedulingPolicy,
    Snapshot,
)
from policies.snapshot import TeamView

TEAMS = ("a", "b", "c")


@st.composite
def snapshots(draw: st.DrawFn, progress: bool = False) -> Snapshot:
    """Random snapshots at ``now=1000``; with ``progress``, the fields about runs' progress and
    recent preemptions (``first_step_at``, ``preempted_at``, ``interval_s``) vary too."""
    n_nodes = draw(st.integers(min_value=1, max_value=4))
    caps = [draw(st.integers(min_value=1, max_value=8)) for _ in range(n_nodes)]
    free = list(caps)
    running: list[RunningJob] = []
    seq = 0
    for _ in range(draw(st.integers(min_value=0, max_value=6))):
        have = [i for i, f in enumerate(free) if f > 0]
        if not have:
            break
        gpus = draw(st.integers(min_value=1, max_value=min(4, sum(free))))
        nodes: list[str] = []
        for i in sorted(have, key=lambda i: -free[i]):
            take = min(free[i], gpus - len(nodes))
            nodes += [f"n{i}"] * take
            free[i] -= take
        cls = draw(st.sampled_from(["bulk", "bulk", "interactive"]))
        lo = draw(st.integers(min_value=1, max_value=gpus)) if cls == "bulk" else gpus
        hi = draw(st.integers(min_value=gpus, max_value=gpus + 4)) if cls == "bulk" else gpus
        running.append(
            RunningJob(
                f"r{seq}",
                cls,
                draw(st.sampled_from(TEAMS)),
                tuple(nodes),
                seq=seq,
                started_at=draw(st.sampled_from([0.0, 500.0, 990.0])),
                checkpoint_at=draw(st.sampled_from([0.0, 900.0])),
                min_gpus=lo,
                max_gpus=hi,
                attained_service=draw(st.sampled_from([0.0, 5000.0, 1e6])),
                first_step_at=draw(st.sampled_from([0.0, None, 995.0, 1010.0]))
                if progress
                else 0.0,
                # a service the SLA guard asks to run fewer or more replicas (issue 24)
                want_gpus=draw(st.sampled_from([0, 0, 1, gpus + 1, gpus + 3]))
                if cls == "interactive"
                else 0,
            )
        )
        seq += 1
    queue: list[QueuedJob] = []
    for _ in range(draw(st.integers(min_value=0, max_value=8))):
        cls = draw(st.sampled_from(["bulk", "interactive"]))
        gpus = draw(st.integers(min_value=1, max_value=6))
        lo = draw(st.integers(min_value=1, max_value=gpus)) if cls == "bulk" else gpus
        hi = draw(st.integers(min_value=gpus, max_value=gpus + 4)) if cls == "bulk" else gpus
        queue.append(
            QueuedJob(
                f"q{seq}",
                cls,
                draw(st.sampled_from(TEAMS)),
                gpus,
                seq,
                float(seq),
                min_gpus=lo,
                max_gpus=hi,
                attained_service=draw(st.sampled_from([0.0, 1e5])),
                preempted_at=draw(st.sampled_from([None, 940.0, 975.0, 999.0, 500.0]))
                if progress
                else None,
            )
        )
        seq += 1
    guarantees = [draw(st.integers(min_value=0, max_value=4)) for _ in TEAMS]
    total = sum(caps)
    while sum(guarantees) > total:
        guarantees[guarantees.index(max(guarantees))] -= 1
    teams = tuple(
        TeamView(t, weight=float(i + 1), guaranteed_gpus=g)
        for i, (t, g) in enumerate(zip(TEAMS, guarantees, strict=True))
    )
    nodes_view = tuple(
        NodeView(f"n{i}", c, f) for i, (c, f) in enumerate(zip(caps, free, strict=True))
    )
    interval = draw(st.sampled_from([0.0, 1.0, 60.0])) if progress else 0.0
    return Snapshot(
        nodes_view,
        tuple(queue),
        tuple(running),
        now=1000.0,
        seed=7,
        teams=teams,
        interval_s=interval,
    )


def apply(snapshot: Snapshot, decisions: list[Decision]) -> dict[str, tuple[str, ...]]:
    """Apply decisions in order; return every job's GPUs afterwards; assert capacity."""
    free = snapshot.free()
    held = {r.job_id: r.nodes for r in snapshot.running}
    queued = {q.job_id for q in snapshot.queue}
    for d in decisions:
        if d.kind is DecisionKind.WAIT:
            assert d.job_id in queued
            continue
        if d.kind is DecisionKind.PREEMPT:
            for n in held.pop(d.job_id):
                free[n] += 1
            continue
        if d.kind is DecisionKind.RESIZE:
            for n in held.pop(d.job_id):
                free[n] += 1
        else:
            assert d.job_id in queued and d.job_id not in held
        for node, count in Counter(d.nodes).items():
            free[node] -= count
            assert free[node] >= 0, f"{d} over-allocates {node}"
        held[d.job_id] = d.nodes
    return held


class SchedulingContract:
    """Shared contract. Hypothesis runs the inherited tests per subclass: intended."""

    def make(self) -> SchedulingPolicy:
        raise NotImplementedError

    def check(self, snap: Snapshot) -> None:
        decisions = self.make().decide(snap)
        assert decisions == self.make().decide(snap)
        apply(snap, decisions)
        ids = [d.job_id for d in decisions if d.kind in (DecisionKind.START, DecisionKind.WAIT)]
        assert sorted(ids) == sorted(q.job_id for q in snap.queue)

    @settings(
        suppress_health_check=[HealthCheck.differing_executors], max_examples=60, deadline=None
    )
    @given(snap=snapshots())
    def test_never_over_allocates_and_is_deterministic(self, snap: Snapshot) -> None:
        self.check(snap)

    @settings(
        suppress_health_check=[HealthCheck.differing_executors], max_examples=60, deadline=None
    )
    @given(snap=snapshots(progress=True))
    def test_keeps_the_contract_with_progress_fields(self, snap: Snapshot) -> None:
        self.check(snap)


class TestGang(SchedulingContract):
    def make(self) -> SchedulingPolicy:
        return SCHEDULING_POLICIES.create("gang")


class TestTiresias(SchedulingContract):
    def make(self) -> SchedulingPolicy:
        return SCHEDULING_POLICIES.create("tiresias")


class TestStaticPartition(SchedulingContract):
    def make(self) -> SchedulingPolicy:
        return SCHEDULING_POLICIES.create("static-partition", interactive_fraction=0.25)


class TestStrictPriority(SchedulingContract):
    def make(self) -> SchedulingPolicy:
        return SCHEDULING_POLICIES.create("strict-priority")

    @settings(suppress_health_check=[HealthCheck.differing_executors], max_examples=60)
    @given(snap=snapshots())
    def test_interactive_waits_only_when_bulk_cannot_make_room(self, snap: Snapshot) -> None:
        decisions = self.make().decide(snap)
        held = apply(snap, decisions)
        kinds = {q.job_id: q.job_class for q in snap.queue}
        kinds.update({r.job_id: r.job_class for r in snap.running})
        bulk_held = sum(len(n) for j, n in held.items() if kinds[j] == "bulk")
        free = snap.total_gpus - sum(len(n) for n in held.values())
        for d in decisions:
            if d.kind is DecisionKind.WAIT and kinds[d.job_id] == "interactive":
                gpus = next(q.gpus for q in snap.queue if q.job_id == d.job_id)
                assert gpus > free + bulk_held
            if d.kind is DecisionKind.PREEMPT:
                assert kinds[d.job_id] == "bulk"


class TestPollux(SchedulingContract):
    def make(self) -> SchedulingPolicy:
        return SCHEDULING_POLICIES.create("pollux")

    @settings(
        suppress_health_check=[HealthCheck.differing_executors], max_examples=60, deadline=None
    )
    @given(snap=snapshots())
    def test_sizes_within_bounds(self, snap: Snapshot) -> None:
        held = apply(snap, self.make().decide(snap))
        jobs = {q.job_id: (q.lo, q.hi) for q in snap.queue}
        jobs.update({r.job_id: (r.lo, r.hi) for r in snap.running})
        for job_id, nodes in held.items():
            lo, hi = jobs[job_id]
            assert lo <= len(nodes) <= hi


class TestShared(SchedulingContract):
    def make(self) -> SchedulingPolicy:
        return SCHEDULING_POLICIES.create("shared")

    @settings(suppress_health_check=[HealthCheck.differing_executors], max_examples=80)
    @given(snap=snapshots())
    def test_interactive_never_waits_while_bulk_capacity_exists(self, snap: Snapshot) -> None:
        decisions = self.make().decide(snap)
        waiting = [
            q
            for q in snap.queue
            if q.interactive
            and any(d.job_id == q.job_id and d.kind is DecisionKind.WAIT for d in decisions)
        ]
        if not waiting:
            return
        held = apply(snap, decisions)
        kinds = {q.job_id: q.job_class for q in snap.queue}
        kinds.update({r.job_id: r.job_class for r in snap.running})
        bulk_held = sum(len(n) for j, n in held.items() if kinds[j] == "bulk")
        free = snap.total_gpus - sum(len(n) for n in held.values())
        for q in waiting:  # it waits only if even all bulk GPUs plus free ones are too few
            assert q.gpus > free + bulk_held

    @settings(suppress_health_check=[HealthCheck.differing_executors], max_examples=80)
    @given(snap=snapshots())
    def test_a_service_moves_only_to_the_replicas_asked_and_is_never_preempted(
        self, snap: Snapshot
    ) -> None:
        decisions = self.make().decide(snap)
        inter = {r.job_id: r for r in snap.running if r.interactive}
        for d in decisions:
            r = inter.get(d.job_id)
            if r is not None:
                assert d.kind is DecisionKind.RESIZE and len(d.nodes) == r.want_gpus, d
        for r in inter.values():  # giving back needs nothing: it is always done
            if 0 < r.want_gpus < r.gpus:
                assert any(d.job_id == r.job_id for d in decisions)

    @settings(suppress_health_check=[HealthCheck.differing_executors], max_examples=80)
    @given(snap=snapshots())
    def test_team_with_demand_gets_its_guarantee(self, snap: Snapshot) -> None:
        held = apply(snap, self.make().decide(snap))
        assert short_of_guarantee(snap, held) == []


class TestSharedGenetic(TestShared):
    """``shared-genetic``: ``shared`` with its bulk GPUs spread by the Pollux genetic search,
    LAS levels of 8 GPU-hours and no minimum run time (issue 16): the same contract,
    interactive-first and guarantees included."""

    def make(self) -> SchedulingPolicy:
        return SCHEDULING_POLICIES.create("shared-genetic")


class TestSharedChurnOptions(TestShared):
    """``shared`` with the options of issue 28 that are off by default (``young_kept``,
    ``running_first``): the same contract."""

    def make(self) -> SchedulingPolicy:
        return SCHEDULING_POLICIES.create("shared", young_kept=True, running_first=True)


def test_shared_interactive_preempts_bulk() -> None:
    nodes = (NodeView("n0", 4, 0),)
    running = (RunningJob("b", "bulk", "a", ("n0",) * 4, started_at=0.0, checkpoint_at=0.0),)
    queue = (QueuedJob("i", "interactive", "a", 2, 1, 10.0),)
    d = SCHEDULING_POLICIES.create("shared").decide(Snapshot(nodes, queue, running, now=20.0))
    assert [x.kind for x in d][:2] == [DecisionKind.PREEMPT, DecisionKind.START]


def test_shared_shrinks_an_elastic_job_before_preempting() -> None:
    nodes = (NodeView("n0", 4, 0),)
    running = (RunningJob("b", "bulk", "a", ("n0",) * 4, min_gpus=1, max_gpus=4, started_at=0.0),)
    queue = (QueuedJob("i", "interactive", "a", 2, 1, 10.0),)
    d = SCHEDULING_POLICIES.create("shared").decide(Snapshot(nodes, queue, running, now=20.0))
    assert d[0].kind is DecisionKind.RESIZE and len(d[0].nodes) == 2
    assert d[1].kind is DecisionKind.START and d[1].job_id == "i"


def test_tiresias_demotes_after_threshold() -> None:
    # r0 has 16 GPU-hours: queue 1; the queued job (queue 0) takes the whole pool.
    nodes = (NodeView("n0", 4, 0),)
    running = (RunningJob("r0", "bulk", "a", ("n0",) * 4, seq=0, attained_service=16 * 3600.0),)
    queue = (QueuedJob("q1", "bulk", "a", 4, 1, 0.0),)
    d = SCHEDULING_POLICIES.create("tiresias").decide(Snapshot(nodes, queue, running, now=0.0))
    assert [(x.kind, x.job_id) for x in d] == [
        (DecisionKind.PREEMPT, "r0"),
        (DecisionKind.START, "q1"),
    ]


def test_static_partition_keeps_bulk_off_reserved_gpus() -> None:
    # 8 GPUs, a quarter reserved: 2 GPUs only for interactive work, even while idle.
    nodes = (NodeView("n0", 4, 4), NodeView("n1", 4, 4))
    queue = (
        QueuedJob("b1", "bulk", "a", 4, 0, 0.0),
        QueuedJob("b2", "bulk", "a", 4, 1, 0.0),
        QueuedJob("b3", "bulk", "a", 1, 2, 0.0),
        QueuedJob("i", "interactive", "a", 2, 3, 0.0),
    )
    pol = SCHEDULING_POLICIES.create("static-partition", interactive_fraction=0.25)
    d = {x.job_id: x for x in pol.decide(Snapshot(nodes, queue))}
    assert d["i"].kind is DecisionKind.START and d["i"].nodes == ("n0", "n0")
    assert d["b1"].kind is DecisionKind.START and d["b1"].nodes == ("n1",) * 4
    # b2 does not fit in the 2 bulk GPUs left on n0; strict FIFO: b3 waits behind it
    assert d["b2"].kind is DecisionKind.WAIT and d["b3"].kind is DecisionKind.WAIT


def test_strict_priority_preempts_newest_bulk() -> None:
    nodes = (NodeView("n0", 4, 0),)
    running = (
        RunningJob("old", "bulk", "a", ("n0",) * 2, seq=0, started_at=0.0),
        RunningJob("new", "bulk", "a", ("n0",) * 2, seq=1, started_at=50.0),
    )
    queue = (QueuedJob("i", "interactive", "a", 2, 2, 90.0),)
    d = SCHEDULING_POLICIES.create("strict-priority").decide(
        Snapshot(nodes, queue, running, now=100.0)
    )
    assert [(x.kind, x.job_id) for x in d] == [
        (DecisionKind.PREEMPT, "new"),
        (DecisionKind.START, "i"),
    ]


def test_pollux_grows_the_job_with_the_best_marginal_goodput() -> None:
    # 4 free GPUs, two queued elastic jobs (1..4 GPUs): a scales linearly, b saturates at 1.5x
    nodes = (NodeView("n0", 4, 4),)
    queue = (
        QueuedJob("a", "bulk", "t", 1, 0, 0.0, min_gpus=1, max_gpus=4),
        QueuedJob("b", "bulk", "t", 1, 1, 0.0, min_gpus=1, max_gpus=4, speedup=(1.0, 1.5)),
    )
    snap = Snapshot(nodes, queue, now=60.0)
    d = SCHEDULING_POLICIES.create("pollux", ramp=False).decide(snap)
    assert {x.job_id: len(x.nodes) for x in d} == {"a": 2, "b": 2}
    d = SCHEDULING_POLICIES.create("pollux", p=1.0, ramp=False).decide(snap)
    assert {x.job_id: len(x.nodes) for x in d} == {"a": 3, "b": 1}


@pytest.mark.parametrize(
    "name",
    [
        "gang",
        "tiresias",
        "shared",
        "shared-genetic",
        "static-partition",
        "strict-priority",
        "pollux",
    ],
)
def test_registered(name: str) -> None:
    assert name in SCHEDULING_POLICIES.names()


def short_of_guarantee(snap: Snapshot, held: dict[str, tuple[str, ...]]) -> list[str]:
    """The teams with demand that got less than their guarantee (or their jobs' minimums, issue
    26: a guarantee protects minimums, not growth), by more than one job's minimum (a job
    cannot start on part of its minimum)."""
    short: list[str] = []
    team_of = {q.job_id: q.team for q in snap.queue}
    team_of.update({r.job_id: r.team for r in snap.running})
    got = Counter()
    for job_id, nodes in held.items():
        got[team_of[job_id]] += len(nodes)
    for t in snap.teams:
        bulk = [q for q in snap.queue if q.team == t.name and not q.interactive]
        bulk += [r for r in snap.running if r.team == t.name and not r.interactive]
        inter = [q for q in snap.queue if q.team == t.name and q.interactive]
        inter_run = [r for r in snap.running if r.team == t.name and r.interactive]
        demand = sum(j.hi for j in bulk) + sum(q.gpus for q in inter)
        # a service counts the replicas the SLA guard asks of it (services come first)
        demand += sum(r.want_gpus or r.gpus for r in inter_run)
        interactive = sum(q.gpus for q in snap.queue if q.interactive)
        interactive += sum(r.want_gpus or r.gpus for r in snap.running if r.interactive)
        if interactive > snap.total_gpus - sum(x.guaranteed_gpus for x in snap.teams):
            continue  # interactive jobs start at once, even on guaranteed GPUs
        # a team gets its guarantee (or its jobs' minimums, issue 26: a guarantee protects
        # minimums, not growth), short of it only by less than one job's minimum (a job
        # cannot start on part of its minimum)
        minimums = sum(j.lo for j in bulk) + demand - sum(j.hi for j in bulk)
        want = min(t.guaranteed_gpus, minimums)
        slack = max((j.lo for j in bulk), default=1) - 1
        if got[t.name] < want - slack:
            short.append(t.name)
    return short
