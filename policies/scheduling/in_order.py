"""First-in-order gang placement without backfill, shared by the simple policies."""

from __future__ import annotations

from collections.abc import Iterable

from policies.decisions import Decision, DecisionKind
from policies.eligibility import capacity as gpus_that_fit
from policies.eligibility import place, why_barred
from policies.placement import Placement
from policies.snapshot import QueuedJob, Snapshot


def place_in_order(
    jobs: Iterable[QueuedJob],
    free: dict[str, int],
    capacity: int,
    placement: Placement,
    *,
    snapshot: Snapshot,
    where: str = "the pool",
    label: str = "",
    blocked_by: str | None = None,
) -> list[Decision]:
    """Start ``jobs`` in the given order while each whole gang fits in ``free``.

    The first job that does not fit blocks every job after it (no backfill), so a large job is
    never starved by small ones; a job larger than ``capacity`` can never fit, is told so, and
    blocks nobody, as is one larger than the pool's GPUs with the memory it needs
    (``gpu_memory_gb``). ``free`` is updated with the GPUs the starts take.

    Args:
        jobs: queued jobs, already in the order to consider them.
        free: free GPUs per node id (mutated).
        capacity: GPUs of ``where`` in total (the pool, or a partition of it).
        placement: chooses the nodes of each gang.
        snapshot: the round's snapshot (which nodes are too small for a job).
        where: how messages name the capacity (``"the pool"``, ``"the bulk partition"``).
        label: prefix of a START's reason.
        blocked_by: a job already blocking these ones (e.g. a waiting interactive job).
    """
    decisions: list[Decision] = []
    for job in jobs:
        if job.gpus > capacity:
            reason = f"needs {job.gpus} GPUs; {where} has {capacity}"
            decisions.append(Decision(DecisionKind.WAIT, job.job_id, reason=reason))
            continue
        note = why_barred(snapshot, job)
        if note and job.gpus > gpus_that_fit(snapshot, job):
            decisions.append(Decision(DecisionKind.WAIT, job.job_id, reason=note))
            continue
        if blocked_by is not None:
            reason = f"queued behind {blocked_by}"
            decisions.append(Decision(DecisionKind.WAIT, job.job_id, reason=reason))
            continue
        nodes = place(placement, job.gpus, free, snapshot, job)
        if nodes is None:
            blocked_by = job.job_id
            reason = f"needs {job.gpus} GPUs; {sum(free.values())} free"
            reason = f"{reason}; {note}" if note else reason
            decisions.append(Decision(DecisionKind.WAIT, job.job_id, reason=reason))
            continue
        for node in nodes:
            free[node] -= 1
        spread = f"placed on {len(set(nodes))} node(s)"
        decisions.append(
            Decision(
                DecisionKind.START,
                job.job_id,
                nodes=nodes,
                strategy=placement.ray_strategy,
                reason=f"{label}, {spread}" if label else spread,
            )
        )
    return decisions
