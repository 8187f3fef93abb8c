"""Keep a multi-GPU job on as few nodes as possible, then fit the remainder tightly."""

from __future__ import annotations

from collections.abc import Mapping

from policies.placement.base import PLACEMENTS, Placement


@PLACEMENTS.register("topology")
class TopologyPlacement(Placement):
    """Fewest nodes first, best fit second.

    A gang that fits one node goes to the tightest such node (best fit). Otherwise it needs
    ``k`` nodes, the least number whose largest free counts cover it: it takes the ``k - 1``
    nodes with the most free GPUs whole, and for the remainder the node that fits it most
    tightly, so large holes stay open and the gang crosses the fewest node boundaries (the
    link that dominates gradient-sync time in the Pollux measurements).
    """

    ray_strategy = "PACK"

    def place(self, gpus: int, free: Mapping[str, int]) -> tuple[str, ...] | None:
        """See :meth:`Placement.place`."""
        if gpus <= 0 or sum(max(0, f) for f in free.values()) < gpus:
            return None
        order = {n: i for i, n in enumerate(free)}
        ranked = sorted((n for n in free if free[n] > 0), key=lambda n: (-free[n], order[n]))
        nodes: list[str] = []
        need = gpus
        for i, node in enumerate(ranked):
            if free[node] >= need:
                rest = [n for n in ranked[i:] if free[n] >= need]
                best = min(rest, key=lambda n: (free[n], order[n]))
                nodes.extend([best] * need)
                return tuple(nodes)
            nodes.extend([node] * free[node])
            need -= free[node]
        return None  # unreachable: the total fits
