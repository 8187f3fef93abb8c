"""Turning GPU counts into node sets: the helpers elastic scheduling policies share.

An elastic policy first decides *how many* GPUs each job gets, then these helpers decide
*which*: a shrinking job drops the GPUs on the nodes it uses least (it stays compact), a growing
job takes free GPUs on its own nodes first (no new node boundary), then wherever the placement
policy says.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Collection, Sequence

from policies.placement import Placement, without


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
