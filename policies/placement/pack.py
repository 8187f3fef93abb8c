"""Pack a gang onto as few nodes as possible (best fit)."""

from __future__ import annotations

from collections.abc import Mapping

from policies.placement.base import PLACEMENTS, Placement, best_fit, by_most_free


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
        best = best_fit(gpus, free)
        if best is not None:
            return (best,) * gpus
        nodes: list[str] = []
        for node in by_most_free(free):
            take = min(free[node], gpus - len(nodes))
            nodes.extend([node] * take)
            if len(nodes) == gpus:
                break
        return tuple(nodes)
