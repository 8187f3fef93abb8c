"""First in, first out: plain, and by class (interactive before bulk)."""

from __future__ import annotations

from collections.abc import Sequence

from policies.queue.base import QUEUE_ORDERS, QueueOrder
from policies.snapshot import QueuedJob

CLASS_RANK = {"interactive": 0, "bulk": 1}


@QUEUE_ORDERS.register("fifo")
class FifoQueue(QueueOrder):
    """Submission order, whatever the class."""

    def order(self, jobs: Sequence[QueuedJob], now: float) -> list[QueuedJob]:
        """Sort by submission sequence."""
        return sorted(jobs, key=lambda j: (j.seq, j.job_id))


@QUEUE_ORDERS.register("class-fifo")
class ClassFifoQueue(QueueOrder):
    """Interactive jobs before bulk jobs; submission order within a class."""

    def order(self, jobs: Sequence[QueuedJob], now: float) -> list[QueuedJob]:
        """Sort by (class rank, submission sequence)."""
        return sorted(jobs, key=lambda j: (CLASS_RANK.get(j.job_class, 9), j.seq, j.job_id))
