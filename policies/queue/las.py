"""Least attained service first, discretised into levels."""

from __future__ import annotations

import math
from collections.abc import Sequence

from policies.queue.base import QUEUE_ORDERS, QueueOrder
from policies.snapshot import QueuedJob


def las_level(service_gpu_s: float, first_gpu_s: float, factor: float) -> int:
    """Level of a job that attained ``service_gpu_s``: 0 below ``first_gpu_s``, then one level
    per ``factor`` times more (Tiresias's discretised LAS, with geometric thresholds)."""
    if service_gpu_s < first_gpu_s:
        return 0
    return 1 + int(math.log(service_gpu_s / first_gpu_s, factor))


@QUEUE_ORDERS.register("las")
class LeastAttainedQueue(QueueOrder):
    """Lower LAS level first, submission order within a level (no size knowledge needed).

    Short jobs finish in level 0 ahead of long ones, which minimises mean completion time
    for heavy-tailed job sizes without knowing any job's size (Tiresias, NSDI'19).

    Args:
        first_gpu_s: service that ends level 0 (default 1 GPU-hour).
        factor: each further level is this many times longer.
    """

    def __init__(self, first_gpu_s: float = 3600.0, factor: float = 4.0) -> None:
        self.first_gpu_s = first_gpu_s
        self.factor = factor

    def order(self, jobs: Sequence[QueuedJob], now: float) -> list[QueuedJob]:
        """See :meth:`QueueOrder.order`."""
        return sorted(
            jobs,
            key=lambda j: (
                not j.interactive,
                las_level(j.attained_service, self.first_gpu_s, self.factor),
                j.seq,
                j.job_id,
            ),
        )
