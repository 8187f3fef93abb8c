"""Placement: on which nodes a job's gang of GPUs goes."""

from __future__ import annotations

import abc
from collections.abc import Mapping

from policies.registry import Registry


class Placement(abc.ABC):
    """Chooses nodes for a gang of ``gpus`` GPUs given the free GPUs per node.

    Contract: ``place`` is pure and deterministic; it returns one node id per GPU (so a node id
    repeats for each GPU taken on that node) and never more GPUs on a node than ``free`` says, or
    ``None`` when the gang does not fit right now. The whole gang is placed or nothing is.
    ``ray_strategy`` names the Ray placement-group strategy that realises the same intent.
    """

    ray_strategy: str = "PACK"

    @abc.abstractmethod
    def place(self, gpus: int, free: Mapping[str, int]) -> tuple[str, ...] | None:
        """Return the node id of each of the ``gpus`` GPUs, or ``None`` if it cannot fit.

        Args:
            gpus: gang size, at least 1.
            free: free GPUs per node id; iteration order is the pool's stable node order.
        """


PLACEMENTS: Registry[Placement] = Registry("placement")
