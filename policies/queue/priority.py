"""Priority by class, with ageing so that no job waits forever."""

from __future__ import annotations

from collections.abc import Sequence

from policies.queue.base import QUEUE_ORDERS, QueueOrder
from policies.snapshot import QueuedJob

CLASS_PRIORITY = {"interactive": 10.0, "bulk": 0.0}


@QUEUE_ORDERS.register("priority-ageing")
class PriorityAgeingQueue(QueueOrder):
    """Highest effective priority first: class priority plus one point per ``ageing_s`` waited.

    Interactive jobs start 10 points ahead; a bulk job that has waited ``10 * ageing_s``
    overtakes a fresh interactive job (classic ageing against starvation). Ties: submission.

    Args:
        ageing_s: seconds of waiting worth one priority point.
    """

    def __init__(self, ageing_s: float = 3600.0) -> None:
        self.ageing_s = ageing_s

    def order(self, jobs: Sequence[QueuedJob], now: float) -> list[QueuedJob]:
        """See :meth:`QueueOrder.order`."""

        def key(j: QueuedJob) -> tuple[float, int, str]:
            prio = CLASS_PRIORITY.get(j.job_class, 0.0) + max(0.0, now - j.submitted_at) / (
                self.ageing_s
            )
            return (-prio, j.seq, j.job_id)

        return sorted(jobs, key=key)
