"""SLA-aware order: least slack first."""

from __future__ import annotations

import math
from collections.abc import Sequence

from policies.queue.base import QUEUE_ORDERS, QueueOrder
from policies.snapshot import QueuedJob


def slack(job: QueuedJob, now: float) -> float:
    """Seconds a job can still wait and meet its SLA (``inf`` without one).

    Interactive: until its start-wait target. Bulk with a deadline: the deadline minus now
    minus its remaining work (on the GPUs it asked for); unknown work counts as none.
    """
    if job.interactive:
        return job.submitted_at + job.wait_target_s - now
    if job.deadline is None:
        return math.inf
    return job.deadline - now - (job.remaining_work or 0.0)


@QUEUE_ORDERS.register("sla")
class SlackQueue(QueueOrder):
    """Interactive jobs first (by start deadline), then bulk jobs by least slack, then FIFO."""

    def order(self, jobs: Sequence[QueuedJob], now: float) -> list[QueuedJob]:
        """See :meth:`QueueOrder.order`."""
        return sorted(jobs, key=lambda j: (not j.interactive, slack(j, now), j.seq, j.job_id))
