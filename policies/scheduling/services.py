"""Services resized to the replicas the SLA guard asks for, as interactive work (issue 24).

A service's replicas are its GPUs. The guard (``policies.replicas``, fed by the live loop)
says how many it should run (``RunningJob.want_gpus``); a policy that honours it calls
:func:`resize_services` in its interactive step: a service asked to run fewer drops the GPUs
on the nodes it uses least (they are free for the rest of the round: bulk work fills them), one
asked to run more takes free GPUs on its own nodes first, then wherever the placement says,
bulk jobs shrinking or giving way for it as for an interactive start (``Room``). A grow that
cannot be placed this round is left (the service keeps what it holds; the guard's ask stands
and the next round tries again).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

from policies.decisions import Decision, DecisionKind
from policies.eligibility import grow_barred
from policies.placement import Placement, without
from policies.scheduling.resize import drop_gpus, grow_gpus
from policies.scheduling.room import Room
from policies.snapshot import RunningJob, Snapshot

__all__ = ["resize_services", "services_to_resize"]


def services_to_resize(snapshot: Snapshot) -> list[RunningJob]:
    """Running interactive jobs asked to run another number of GPUs, fewer first (they free
    GPUs), then in submission order."""
    asked = [
        r for r in snapshot.running if r.want_gpus and r.want_gpus != len(r.nodes) and r.interactive
    ]
    return sorted(asked, key=lambda r: (r.want_gpus > len(r.nodes), r.seq, r.job_id))


def resize_services(
    services: Sequence[RunningJob],
    snapshot: Snapshot,
    hold: dict[str, Sequence[str]],
    free: dict[str, int],
    room: Room,
    placement: Placement,
    inter_held: Counter[str],
) -> list[Decision]:
    """The ``RESIZE`` decisions that bring ``services`` (:func:`services_to_resize`) to the
    GPUs they are asked for; ``hold``, ``free`` and ``inter_held`` are updated, and ``room``
    frees bulk GPUs for a grow that needs them."""
    out: list[Decision] = []
    for r in services:
        have = list(hold[r.job_id])
        extra = r.want_gpus - len(have)
        if extra < 0:
            for n in drop_gpus(have, -extra):
                free[n] += 1
        else:
            small = grow_barred(snapshot, r)
            short = extra - sum(without(free, small).values())
            if short > 0 and snapshot.mixed:
                # in a pool of several kinds it grows on its own kind: room is made there,
                # when no bulk job there holds nodes it may not use (none for a service that
                # spans kinds: a round makes room by kinds or over the whole pool, not both)
                kinds = {snapshot.kind_of(n) for n in have}
                kind = kinds.pop() if len(kinds) == 1 else None
                if kind is not None and not room.holds_bulk_on(snapshot.barred(r), kind):
                    room.make(short, r.team, extra, kind)
            elif short > 0 and not small:  # nodes too small for it: no preemption for nothing
                room.make(short, r.team, extra)
            added = grow_gpus(have, extra, free, placement, small)
            if added is None:
                continue
            have += added
        hold[r.job_id] = have
        inter_held[r.team] += extra
        out.append(
            Decision(
                DecisionKind.RESIZE,
                r.job_id,
                nodes=tuple(have),
                strategy=placement.ray_strategy,
                reason=f"service: the SLA guard asks for {r.want_gpus} replicas",
            )
        )
    return out
