"""Pack a gang onto as few nodes as possible (best fit)."""

from __future__ import annotations

from collections.abc import Mapping

from policies.placement.base import PLACEMENTS, Placement


@PLACEMENTS.register("pack")
class PackPlacement(Placement):
    """Best fit: the single node whose free GPUs fit the gang most tightly.

    When no single node fits, fill the nodes with the most free GPUs first, so the gang spans as
    few nodes as possible. Best fit keeps large holes open for later large gangs (the classic
    bin-packing heuristic).
    """

    ray_strategy = "PACK"

    def place(self, gpus: int, free: Mapping[str, int]) -> tuple[str, ...] | None:
        """See :meth:`Placement.place`."""
        if gpus <= 0 or sum(free.values()) < gpus:
            return None
        order = {node: i for i, node in enumerate(free)}
        fits = [n for n, f in free.items() if f >= gpus]
        if fits:
            best = min(fits, key=lambda n: (free[n], order[n]))
            return (best,) * gpus
        nodes: list[str] = []
        for node in sorted(free, key=lambda n: (-free[n], order[n])):
            take = min(free[node], gpus - len(nodes))
            nodes.extend([node] * take)
            if len(nodes) == gpus:
                break
        return tuple(nodes)
