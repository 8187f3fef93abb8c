"""Take GPUs node by node, always from the node with the most free GPUs."""

from __future__ import annotations

from collections.abc import Mapping

from policies.placement.base import PLACEMENTS, Placement, by_most_free, free_total


@PLACEMENTS.register("most-free")
class MostFreePlacement(Placement):
    """Worst fit: repeatedly take all it can from the node with the most free GPUs.

    The allocator of the published Tiresias baseline (Pollux OSDI'21 artifact); ties go to the
    earlier node in the pool's order. The node ids come back in the order they were taken.
    """

    ray_strategy = "PACK"

    def place(self, gpus: int, free: Mapping[str, int]) -> tuple[str, ...] | None:
        """See :meth:`Placement.place`."""
        if gpus <= 0 or free_total(free) < gpus:
            return None
        nodes: list[str] = []
        for node in by_most_free(free):  # each node is taken whole, but maybe the last
            take = min(free[node], gpus - len(nodes))
            nodes.extend([node] * take)
            if len(nodes) == gpus:
                break
        return tuple(nodes)
