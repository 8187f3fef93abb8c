"""Take GPUs node by node, always from the node with the most free GPUs."""

from __future__ import annotations

from collections.abc import Mapping

from policies.placement.base import PLACEMENTS, Placement


@PLACEMENTS.register("most-free")
class MostFreePlacement(Placement):
    """Worst fit: repeatedly take all it can from the node with the most free GPUs.

    The allocator of the published Tiresias baseline (Pollux OSDI'21 artifact); ties go to the
    earlier node in the pool's order. The node ids come back in the order they were taken.
    """

    ray_strategy = "PACK"

    def place(self, gpus: int, free: Mapping[str, int]) -> tuple[str, ...] | None:
        """See :meth:`Placement.place`."""
        if gpus <= 0 or sum(max(0, f) for f in free.values()) < gpus:
            return None
        left = {n: f for n, f in free.items() if f > 0}
        order = {n: i for i, n in enumerate(free)}
        nodes: list[str] = []
        while len(nodes) < gpus:
            node = min(left, key=lambda n: (-left[n], order[n]))
            take = min(left[node], gpus - len(nodes))
            nodes.extend([node] * take)
            left[node] -= take
        return tuple(nodes)
