"""Spread a gang across nodes, one GPU per node in turn."""

from __future__ import annotations

from collections.abc import Mapping

from policies.placement.base import PLACEMENTS, Placement


@PLACEMENTS.register("spread")
class SpreadPlacement(Placement):
    """Round-robin over nodes, most free first: spreads load and failure domains."""

    ray_strategy = "SPREAD"

    def place(self, gpus: int, free: Mapping[str, int]) -> tuple[str, ...] | None:
        """See :meth:`Placement.place`."""
        if gpus <= 0 or sum(free.values()) < gpus:
            return None
        order = {node: i for i, node in enumerate(free)}
        left = dict(free)
        nodes: list[str] = []
        while len(nodes) < gpus:
            for node in sorted(left, key=lambda n: (-left[n], order[n])):
                if left[node] > 0 and len(nodes) < gpus:
                    nodes.append(node)
                    left[node] -= 1
        return tuple(sorted(nodes, key=lambda n: order[n]))
