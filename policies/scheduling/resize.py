"""Turning GPU counts into node sets: the helpers elastic scheduling policies share.

An elastic policy first decides *how many* GPUs each job gets, then these helpers decide
*which*: a shrinking job drops the GPUs on the nodes it uses least (it stays compact), a growing
job takes free GPUs on its own nodes first (no new node boundary), then wherever the placement
policy says. :func:`sizes_to_decisions` does the whole step for a policy that has a target size
for every job.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Collection, Mapping, Sequence

from policies.decisions import Decision, DecisionKind
from policies.gpu_memory import usable
from policies.placement import Placement, without
from policies.snapshot import QueuedJob, RunningJob, Snapshot


def drop_gpus(nodes: list[str], count: int) -> list[str]:
    """Remove ``count`` GPUs from a job's nodes, from the nodes it uses least (keeps it compact).

    Returns the dropped node ids (one per GPU)."""
    if nodes and count <= len(nodes) and nodes.count(nodes[0]) == len(nodes):
        node = nodes[0]  # all on one node (most jobs): what the loop below does, at once
        del nodes[:count]
        return [node] * count
    dropped: list[str] = []
    use = Counter(nodes)  # kept up to date, not recounted per GPU (a round drops hundreds)
    for _ in range(count):
        node = min(use, key=lambda n: (use[n], -nodes.index(n)))
        nodes.remove(node)
        dropped.append(node)
        use[node] -= 1
        if not use[node]:
            del use[node]
    return dropped


def grow_gpus(
    have: Sequence[str],
    extra: int,
    free: dict[str, int],
    placement: Placement,
    too_small: Collection[str] = (),
) -> list[str] | None:
    """``extra`` more GPUs for a running job: on its own nodes first, then by ``placement``
    on any node but ``too_small`` (``Snapshot.too_small`` of the job's GPU memory).

    Takes them from ``free``; returns the added node ids, or ``None`` (``free`` unchanged)."""
    added: list[str] = []
    for n in dict.fromkeys(have):
        if n in too_small:
            continue  # it keeps what it holds there, but takes no more
        take = min(free.get(n, 0), extra - len(added))
        added.extend([n] * take)
        free[n] -= take
    if len(added) < extra:
        more = placement.place(extra - len(added), without(free, too_small))
        if more is None:
            for n in added:
                free[n] += 1
            return None
        for n in more:
            free[n] -= 1
        added.extend(more)
    return added


def sizes_to_decisions(
    snapshot: Snapshot, sizes: Mapping[str, int], placement: Placement, why: str
) -> list[Decision]:
    """Decisions that bring every job to its target GPU count (0: not running).

    Running jobs with target 0 are preempted and shrinking ones resized first (they free GPUs);
    then growing jobs and starts, largest target first (big gangs get the compact holes), ties
    in submission order. A start or growth that cannot be placed is left for the next round (a
    queued job then waits). Every queued job gets a START or a WAIT.

    Args:
        snapshot: the round's snapshot.
        sizes: target GPUs per job id (missing: 0).
        placement: where new GPUs go.
        why: the reason given to jobs that start or grow.
    """
    free = snapshot.free()
    hold = {r.job_id: list(r.nodes) for r in snapshot.running}
    preempts: list[Decision] = []
    shrinks: list[Decision] = []
    for r in snapshot.running:
        target = sizes.get(r.job_id, 0)
        if target == 0:
            preempts.append(Decision(DecisionKind.PREEMPT, r.job_id, reason="gives way"))
            for n in hold.pop(r.job_id):
                free[n] += 1
        elif target < r.gpus:
            for n in drop_gpus(hold[r.job_id], r.gpus - target):
                free[n] += 1
            shrinks.append(
                Decision(
                    DecisionKind.RESIZE,
                    r.job_id,
                    nodes=tuple(hold[r.job_id]),
                    strategy=placement.ray_strategy,
                    reason=f"shrinks to {target} GPUs",
                )
            )
    jobs: list[QueuedJob | RunningJob] = [*snapshot.running, *snapshot.queue]
    growing = [j for j in jobs if sizes.get(j.job_id, 0) > len(hold.get(j.job_id, ()))]
    growing.sort(key=lambda j: (-sizes[j.job_id], j.seq, j.job_id))
    grows: list[Decision] = []
    started: set[str] = set()
    for j in growing:
        target = sizes[j.job_id]
        if isinstance(j, RunningJob):
            have = hold[j.job_id]
            small = snapshot.too_small(j.gpu_memory_gb)
            added = grow_gpus(have, target - len(have), free, placement, small)
            if added is not None:
                kind = DecisionKind.RESIZE
                nodes = tuple(have + added)
            else:
                continue
        else:
            placed = placement.place(target, usable(free, snapshot, j))
            if placed is None:
                continue
            for n in placed:
                free[n] -= 1
            kind, nodes = DecisionKind.START, placed
            started.add(j.job_id)
        grows.append(
            Decision(
                kind,
                j.job_id,
                nodes=nodes,
                strategy=placement.ray_strategy,
                reason=f"{why} on {target} GPUs",
            )
        )
    waits = [
        Decision(DecisionKind.WAIT, q.job_id, reason="waiting for GPUs")
        for q in snapshot.queue
        if q.job_id not in started
    ]
    return preempts + shrinks + grows + waits
