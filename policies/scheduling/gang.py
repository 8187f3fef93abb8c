"""First version: ordered queue, whole-job gang placement, no preemption."""

from __future__ import annotations

from policies.decisions import Decision
from policies.placement import PLACEMENTS, Placement
from policies.queue import QUEUE_ORDERS, QueueOrder
from policies.scheduling.base import SCHEDULING_POLICIES, SchedulingPolicy
from policies.scheduling.in_order import place_in_order
from policies.snapshot import Snapshot


@SCHEDULING_POLICIES.register("gang")
class GangSchedulingPolicy(SchedulingPolicy):
    """Start queued jobs in queue order while their whole gang fits.

    The first job that does not fit blocks the jobs behind it (no backfill), so a large job is
    never starved by a stream of small ones; with the default ``class-fifo`` order this means
    interactive jobs before bulk jobs and FIFO within a class. A job larger than the whole pool
    can never fit: it is told so and does not block the others.

    Args:
        queue: a queue-order policy, or its registered name.
        placement: a placement policy, or its registered name.
    """

    def __init__(
        self, queue: QueueOrder | str = "class-fifo", placement: Placement | str = "pack"
    ) -> None:
        self.queue = QUEUE_ORDERS.create(queue) if isinstance(queue, str) else queue
        self.placement = PLACEMENTS.create(placement) if isinstance(placement, str) else placement

    def decide(self, snapshot: Snapshot) -> list[Decision]:
        """See :meth:`SchedulingPolicy.decide`."""
        free = {n.node_id: max(0, n.free_gpus) for n in snapshot.nodes}
        ordered = self.queue.order(snapshot.queue, snapshot.now)
        return place_in_order(ordered, free, snapshot.total_gpus, self.placement, snapshot=snapshot)
