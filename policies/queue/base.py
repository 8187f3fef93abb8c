"""Queue order: which waiting job is considered first."""

from __future__ import annotations

import abc
from collections.abc import Sequence

from policies.registry import Registry
from policies.snapshot import QueuedJob


class QueueOrder(abc.ABC):
    """Orders the waiting jobs of a snapshot.

    Contract: ``order`` returns a permutation of ``jobs``; it is a pure function of its inputs
    (deterministic, no state kept between rounds).
    """

    @abc.abstractmethod
    def order(self, jobs: Sequence[QueuedJob], now: float) -> list[QueuedJob]:
        """Return ``jobs`` in the order they should be considered."""


QUEUE_ORDERS: Registry[QueueOrder] = Registry("queue")
