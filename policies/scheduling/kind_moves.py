"""Moving a running bulk job to a faster GPU kind, when the gain beats the restart and the lost
work (issue 40, part 3): the one place a job changes kind while it runs.

A gang starts on the kind it is fastest on among those with room then
(:func:`policies.eligibility.place`); when that kind was full, it started on a slower one, and
grows and shrinks there (:func:`policies.eligibility.grow_barred`). After a round's decisions, a
running bulk job (one kind, its first step done, untouched this round, not a tuning gang) moves, at
its size, to a kind where it is faster per GPU (:func:`~policies.eligibility.kind_order`) when that
kind has its GPUs free after the round (the fastest such kind), and the time its work would save
there is more than ``margin`` times what the move costs: the restart (``Snapshot.restart_cost_s``)
and the run since its last checkpoint. Its work left is ``remaining_work`` when known, else as long
again as it has run (its run so far and its attained GPU time over its GPUs: the least-attained
estimate, heavy-tailed jobs run about as long again as they have). At most ``most`` moves a round,
the largest gain first: a move is a restart, and the kinds' free GPUs are shared. A round whose
decisions leave no kind a free GPU looks at no job (the simulator runs this every round).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

from policies.decisions import Decision, DecisionKind
from policies.eligibility import kind_free, kind_order, place_on
from policies.placement import Placement
from policies.placement.base import FreeIndex
from policies.snapshot import RunningJob, Snapshot

__all__ = ["kind_moves"]


def _free_after(snapshot: Snapshot, decisions: Sequence[Decision]) -> dict[str, int]:
    """Free GPUs per node once ``decisions`` are applied in order."""
    free = snapshot.free()
    held = {r.job_id: r.nodes for r in snapshot.running}
    for d in decisions:
        if d.kind is DecisionKind.WAIT:
            continue
        for n in held.pop(d.job_id, ()) if d.kind is not DecisionKind.START else ():
            free[n] += 1
        if d.kind is not DecisionKind.PREEMPT:
            for n in d.nodes:
                free[n] -= 1
    return free


def _left_s(job: RunningJob, now: float) -> float:
    """Seconds of work the job has left at its size (see the module doc)."""
    if job.remaining_work is not None:
        return job.remaining_work
    ran = max(0.0, now - job.started_at)
    return ran + job.attained_service / max(1, job.gpus)


def kind_moves(
    snapshot: Snapshot,
    decisions: Sequence[Decision],
    placement: Placement,
    *,
    margin: float = 2.0,
    most: int = 4,
) -> list[Decision]:
    """The ``RESIZE`` decisions that move running bulk jobs to a faster kind (the module doc);
    none in a pool of one kind."""
    if not snapshot.mixed:
        return []
    # the kinds' free GPUs once the round's decisions are applied: a job moves only to a kind
    # with room for it at its size, so a round with none anywhere looks at no job
    free = _free_after(snapshot, decisions)
    of = snapshot.kind_map.get
    room: dict[str, int] = {}
    for n, f in free.items():
        if f > 0:
            k = of(n, "")
            room[k] = room.get(k, 0) + f
    most_free = max(room.values(), default=0)
    if most_free <= 0:
        return []
    now = snapshot.now
    touched = {d.job_id for d in decisions if d.kind is not DecisionKind.WAIT}
    kinds = snapshot.kinds
    options: list[tuple[float, RunningJob, str, str]] = []
    for r in snapshot.running:
        gpus = r.gpus
        if gpus > most_free or r.interactive or r.tuning or r.job_id in touched or not r.nodes:
            continue  # a tuning gang's trials measure the kind they got: it stays there
        # the kinds faster for it than the one it is on (a node's GPUs are one kind; a gang
        # across kinds is passed over below), those with room for it at its size now
        order = kind_order(snapshot, r)
        here = of(r.nodes[0], "?")
        if here not in order or order[0] == here:
            continue  # the fastest for it already, or on a node no longer in the pool
        faster = [k for k in order[: order.index(here)] if room.get(k, 0) >= gpus]
        if not faster or not r.stepped(now):
            continue
        left = _left_s(r, now)
        cost = snapshot.restart_cost_s + max(0.0, now - max(r.checkpoint_at, r.started_at))
        if left <= margin * cost:
            continue  # even an infinitely faster kind would save less than the move costs
        if len(set(map(of, r.nodes))) != 1:
            continue  # across kinds
        speed = r.speed_on(here, kinds[here])
        barred = snapshot.barred(r)
        for there in faster:
            if barred and kind_free(free, snapshot, r, there) < gpus:
                continue  # no room there on nodes it may use
            gain = left - left * speed / r.speed_on(there, kinds[there])
            if gain > margin * cost:
                options.append((gain, r, here, there))
            break  # the fastest kind with room: a slower one gains less
    if not options:
        return []
    free = FreeIndex(free, snapshot.kind_map)  # each kind's free GPUs kept as moves take them
    out: list[Decision] = []
    for gain, r, here, there in sorted(options, key=lambda o: (-o[0], o[1].seq, o[1].job_id)):
        nodes = place_on(placement, r.gpus, free, snapshot, r, there)
        if nodes is None:
            continue
        for n, c in Counter(nodes).items():
            free[n] -= c
        out.append(
            Decision(
                DecisionKind.RESIZE,
                r.job_id,
                nodes=nodes,
                strategy=placement.ray_strategy,
                reason=f"moves from {here} to {there}, where it is faster: about {gain:,.0f} s "
                "of its work saved",
            )
        )
        if len(out) >= most:
            break
    return out
