"""Keep a multi-GPU job on as few nodes as possible, then fit the remainder tightly."""

from __future__ import annotations

from collections.abc import Mapping

from policies.placement.base import PLACEMENTS, Placement, best_fit, by_most_free, free_total


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
        if gpus <= 0:
            return None
        # one node that holds it first: then the total holds it too, and summing the pool's
        # free GPUs first took most of a call (hundreds of calls a round)
        best = best_fit(gpus, free)
        if best is not None:
            return (best,) * gpus
        if free_total(free) < gpus:
            return None
        ranked = by_most_free(free)
        nodes: list[str] = []
        need = gpus
        for i, node in enumerate(ranked):
            if free[node] >= need:
                tight = best_fit(need, free, ranked[i:])
                nodes.extend([node if tight is None else tight] * need)
                return tuple(nodes)
            nodes.extend([node] * free[node])
            need -= free[node]
        return None  # unreachable: the total fits
