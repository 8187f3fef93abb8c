"""The last step of a ``shared`` round: bulk GPU counts turned into decisions.

:meth:`~policies.scheduling.shared.SharedSchedulingPolicy.decide` has decided how many GPUs
each bulk job gets (0: none); this releases what shrinking and preempted jobs give back, then
places the grows and starts (largest first), undoes the preemptions whose GPUs nobody took,
lets the jobs preempted last round take what is left, and makes every other queued job wait.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from policies.decisions import Decision, DecisionKind
from policies.eligibility import grow_barred, kind_order, place, place_on, why_barred
from policies.placement import FreeIndex, Placement
from policies.scheduling.churn import unused_preemptions
from policies.scheduling.resize import drop_gpus, grow_gpus
from policies.snapshot import QueuedJob, RunningJob, Snapshot


@dataclass(slots=True)
class Applied:
    """A round's bulk decisions, each list in apply order."""

    preempts: list[Decision]
    shrinks: list[Decision]
    grows: list[Decision]
    waits: list[Decision]


def apply_sizes(
    sizes: dict[str, int],
    queued: Sequence[tuple[QueuedJob, int, int]],
    kept: Sequence[tuple[RunningJob, int, int, int]],
    late: set[str],
    hold: dict[str, Sequence[str]],
    free: dict[str, int],
    preempted: list[str],
    touched: set[str],
    placement: Placement,
    snapshot: Snapshot,
    kinds: dict[str, str] | None = None,
) -> Applied:
    """Decisions that bring the bulk jobs to ``sizes``.

    Args:
        sizes: GPUs per bulk job id (missing or 0: none).
        queued: the queued bulk jobs of the round, with their ``(lo, hi)``.
        kept: the running bulk jobs not preempted for an interactive job, with ``lo``, ``hi``
            and GPUs.
        late: queued jobs preempted last round: they take only what the others leave.
        hold: GPUs each running job holds (updated).
        free: free GPUs per node (updated by the releases only).
        preempted: jobs preempted so far this round (updated; the bulk victims are added).
        touched: running jobs shrunk so far this round (updated).
        placement: where new GPUs go.
        snapshot: the round's snapshot.
        kinds: the kind each bulk job is to run on, where the round chose kinds with the
            counts (:mod:`~policies.scheduling.kind_plan`): a job starts there, and a running
            job on another kind moves there (before any other grow or start, on the GPUs free
            once preemptions and shrinks are done; what it leaves is free after the moves).
    """
    growing, shrinks = _release(
        sizes, queued, kept, hold, free, preempted, touched, placement, snapshot, kinds
    )
    # up to hundreds of gangs placed one after another (with its kinds' free GPUs kept, in a
    # pool of several kinds: the round's own index, kept since its start, where it has one)
    if type(free) is not FreeIndex:
        free = FreeIndex(free, snapshot.kind_map if snapshot.mixed else None)
    moves: list[Decision] = []
    if kinds:
        moves = _moves(growing, sizes, kinds, hold, free, placement, snapshot)
    # grows and starts, largest first (placement quality), then priority order; then the
    # preemptions whose GPUs nobody took are undone; jobs preempted recently last (they
    # take only what the others leave)
    growing.sort(key=lambda j: -sizes[j.job_id])
    first = [j for j in growing if j.job_id not in late] if late else growing
    grows = moves + place_growth(first, sizes, hold, free, placement, snapshot, kinds)
    if preempted:
        undone = unused_preemptions(preempted, snapshot, free)
        preempted[:] = [job_id for job_id in preempted if job_id not in undone]
    if late:
        grows += place_growth(
            [j for j in growing if j.job_id in late], sizes, hold, free, placement, snapshot, kinds
        )
    started = {d.job_id for d in grows}
    waits: list[Decision] = []
    for q, _, _ in queued:
        if q.job_id not in started:
            reason = (
                "preempted last round: takes only GPUs no other job wants"
                if q.job_id in late
                else "waiting for GPUs"
            )
            note = why_barred(snapshot, q) if q.restricted else ""
            reason = f"{reason}; {note}" if note else reason
            waits.append(Decision(DecisionKind.WAIT, q.job_id, reason=reason))
    preempts = [Decision(DecisionKind.PREEMPT, job_id, reason="gives way") for job_id in preempted]
    return Applied(preempts, shrinks, grows, waits)


def _release(
    sizes: dict[str, int],
    queued: Sequence[tuple[QueuedJob, int, int]],
    kept: Sequence[tuple[RunningJob, int, int, int]],
    hold: dict[str, Sequence[str]],
    free: dict[str, int],
    preempted: list[str],
    touched: set[str],
    placement: Placement,
    snapshot: Snapshot,
    kinds: dict[str, str] | None = None,
) -> tuple[list[QueuedJob | RunningJob], list[Decision]]:
    """The GPUs of preempted and shrinking jobs back to ``free`` (see :func:`apply_sizes`);
    returns the jobs to grow or start (queued ones first, in order) and the shrinks, one per
    job that lost GPUs this round (to an interactive job too), in snapshot order."""
    for job_id in preempted:
        for n in hold.pop(job_id):
            free[n] += 1
    # bulk shrinks and preemptions release first; the jobs to grow or start are noted
    growing: list[QueuedJob | RunningJob] = [q for q, _, _ in queued if sizes.get(q.job_id, 0) > 0]
    kind_of = snapshot.kind_of
    for r, _, _, _ in kept:
        job_id = r.job_id
        target = sizes.get(job_id, 0)
        holds = len(hold[job_id])
        if target and kinds and job_id in kinds and kind_of(hold[job_id][0]) != kinds[job_id]:
            growing.append(r)  # a move to another kind (_moves), whatever its size there
        elif target == 0:
            preempted.append(job_id)
            for n in hold.pop(job_id):
                free[n] += 1
        elif target < holds:
            smaller = hold[job_id] = list(hold[job_id])
            for n in drop_gpus(smaller, holds - target):
                free[n] += 1
            touched.add(job_id)
        elif target > holds:
            growing.append(r)
    shrinks = [
        Decision(
            DecisionKind.RESIZE,
            r.job_id,
            nodes=tuple(hold[r.job_id]),
            strategy=placement.ray_strategy,
            reason=f"shrinks to {len(hold[r.job_id])} GPUs",
        )
        for r in (snapshot.running if touched else ())
        if r.job_id in touched and r.job_id in hold
    ]
    return growing, shrinks


def _moves(
    growing: list[QueuedJob | RunningJob],
    sizes: dict[str, int],
    kinds: dict[str, str],
    hold: dict[str, Sequence[str]],
    free: dict[str, int],
    placement: Placement,
    snapshot: Snapshot,
) -> list[Decision]:
    """Running jobs whose chosen kind is not the one they run on, moved there at their size
    (largest first); taken out of ``growing``. Each move frees what the job held, for the moves
    after it (the round's decisions apply one after another); those that found no room are
    tried again while a pass moves any. One that never finds room stays as it is."""
    kind_of = snapshot.kind_of
    moving = [
        j
        for j in growing
        if isinstance(j, RunningJob)
        and j.job_id in kinds
        and hold.get(j.job_id)
        and kind_of(hold[j.job_id][0]) != kinds[j.job_id]
    ]
    if not moving:
        return []
    gone = {j.job_id for j in moving}
    growing[:] = [j for j in growing if j.job_id not in gone]
    moving.sort(key=lambda j: -sizes[j.job_id])
    out: list[Decision] = []
    while moving:  # passes: a move may need the GPUs another move leaves
        stuck: list[RunningJob] = []
        for j in moving:
            nodes, here, there = _move(
                j, sizes[j.job_id], kinds[j.job_id], hold, free, placement, snapshot
            )
            if nodes is None:
                stuck.append(j)
                continue
            for n in hold[j.job_id]:
                if n in free:  # a node gone from the pool frees nothing
                    free[n] += 1
            hold[j.job_id] = nodes
            out.append(
                Decision(
                    DecisionKind.RESIZE,
                    j.job_id,
                    nodes=nodes,
                    strategy=placement.ray_strategy,
                    reason=f"moves from {here} to {there} on {len(nodes)} GPUs: kind and count "
                    "chosen together for goodput",
                )
            )
        if len(stuck) == len(moving):
            break  # the rest stay as they are (a cycle of moves, or no room on nodes they may use)
        moving = stuck
    return out


def _move(
    job: RunningJob,
    gpus: int,
    there: str,
    hold: dict[str, Sequence[str]],
    free: dict[str, int],
    placement: Placement,
    snapshot: Snapshot,
) -> tuple[tuple[str, ...] | None, str, str]:
    """Nodes for ``job`` on ``gpus`` GPUs of ``there`` (taken from ``free``), else of a kind
    faster for it than its own where it fits (the plan counts a kind's GPUs, not the nodes a
    job may use); ``None``: nowhere now. Returns the nodes, its kind and theirs."""
    here = snapshot.kind_of(hold[job.job_id][0])
    nodes = place_on(placement, gpus, free, snapshot, job, there)
    if nodes is None:
        order = kind_order(snapshot, job)
        for there in order[: order.index(here)] if here in order else ():
            nodes = place_on(placement, gpus, free, snapshot, job, there)
            if nodes is not None:
                break
    if nodes is not None:
        for n in nodes:
            free[n] -= 1
    return nodes, here, there


def place_growth(
    jobs: Sequence[QueuedJob | RunningJob],
    sizes: dict[str, int],
    hold: dict[str, Sequence[str]],
    free: dict[str, int],
    placement: Placement,
    snapshot: Snapshot,
    kinds: dict[str, str] | None = None,
) -> list[Decision]:
    """Grow running ``jobs`` and start queued ones to their ``sizes``, in order, on ``free``
    (updated); a job that does not fit is left out (it waits). A queued job with a kind in
    ``kinds`` starts there when it fits there, else where :func:`place` finds room."""
    grows: list[Decision] = []
    for j in jobs:
        have = hold.get(j.job_id, ())
        extra = sizes[j.job_id] - len(have)
        if isinstance(j, RunningJob):
            added = grow_gpus(have, extra, free, placement, grow_barred(snapshot, j))
            if added is None:
                continue
            grows.append(
                Decision(
                    DecisionKind.RESIZE,
                    j.job_id,
                    nodes=(*have, *added),
                    strategy=placement.ray_strategy,
                    reason=f"grows to {sizes[j.job_id]} GPUs for goodput",
                )
            )
        else:
            there = kinds.get(j.job_id) if kinds else None
            nodes = (
                place_on(placement, extra, free, snapshot, j, there) if there is not None else None
            )
            if nodes is None:
                nodes = place(placement, extra, free, snapshot, j)
            if nodes is None:
                continue
            for n in nodes:
                free[n] -= 1
            grows.append(
                Decision(
                    DecisionKind.START,
                    j.job_id,
                    nodes=nodes,
                    strategy=placement.ray_strategy,
                    reason=f"bulk on {extra} GPUs",
                )
            )
    return grows
