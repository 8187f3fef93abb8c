"""Elastic allocation: how many GPUs each bulk job gets, within its min/max."""

from __future__ import annotations

import abc
import math
from collections.abc import Sequence
from dataclasses import dataclass

from policies.registry import Registry


@dataclass(slots=True)
class ElasticJob:
    """What the allocator knows of one bulk job.

    A scheduling policy builds one for every bulk job every round, so this is a plain slotted
    dataclass (a frozen one takes several times longer to build); allocators only read it.

    Attributes:
        job_id: the job.
        lo, hi: fewest and most GPUs it runs on.
        preferred: the GPUs it asked for (rigid allocators give exactly this).
        current: GPUs it holds now (0: queued).
        speedup: relative goodput on 1..n GPUs (empty: linear; see ``QueuedJob.speedup``).
        floor: GPUs it must get if it is admitted at all (its team's guarantee), 0 for none.
        run_s: seconds since its current allocation started (how long a change has paid off).
        urgent: a running job the SLA guard measured short of its floor or deadline
            (``RunningJob.urgent``): an allocator should grow it first with spare GPUs.
        lost_s: seconds of work a change of its GPUs throws away (a running job's time since
            its last checkpoint, ``RunningJob.checkpoint_at``; 0 when it checkpoints
            continuously or is queued), on top of the pool's restart cost.
        served: GPU-seconds it has attained, its current run included (filled only for an
            allocator whose ``reads_served`` is set; else 0).
    """

    job_id: str
    lo: int
    hi: int
    preferred: int
    current: int = 0
    speedup: tuple[float, ...] = ()
    floor: int = 0
    run_s: float = 0.0
    urgent: bool = False
    lost_s: float = 0.0
    served: float = 0.0

    def rate(self, gpus: int) -> float:
        """Relative goodput on ``gpus`` GPUs."""
        if gpus <= 0:
            return 0.0
        if not self.speedup:
            return float(gpus)
        return self.speedup[min(gpus, len(self.speedup)) - 1]


class ElasticAllocation(abc.ABC):
    """Splits ``gpus`` GPUs among bulk jobs given in priority order.

    Contract: pure and deterministic. Returns GPUs per job id for every job: 0 (not admitted)
    or a count in ``lo..hi``; the counts sum to at most ``gpus``. Admission follows the given
    order: jobs with a ``floor`` get it first, in order, then jobs get ``lo`` in order, and a
    job is left out only when what is left cannot hold it. How the GPUs left after admission
    are spread is the implementation's choice.

    ``reads_lost``: whether :meth:`allocate` reads ``ElasticJob.lost_s``; a producer fills it
    only then (it costs a call per running job every round, a tenth of a 100,000-job
    simulation's time).
    """

    reads_lost: bool = False
    reads_served: bool = False

    @abc.abstractmethod
    def allocate(
        self, jobs: Sequence[ElasticJob], gpus: int, restart_cost_s: float
    ) -> dict[str, int]:
        """GPUs per job id."""


ELASTIC: Registry[ElasticAllocation] = Registry("elastic")


def admit(jobs: Sequence[ElasticJob], gpus: int, size: dict[str, int]) -> int:
    """Admission shared by every allocator: floors in order, then minimums in order.

    Fills ``size`` (job id -> GPUs) and returns the GPUs left.
    """
    left = gpus
    size.update(dict.fromkeys([j.job_id for j in jobs], 0))
    floored = False  # whether any job got its floor: else every size is still 0
    for j in jobs:
        if j.floor:
            want = min(max(j.floor, j.lo), j.hi)
        elif j.hi < 0:  # as min(0, hi): never for a valid job
            want = j.hi
        else:
            continue
        if want and want <= left:
            size[j.job_id] = want
            left -= want
            floored = True
    # runs for every bulk job every round: without floors, no size to look up
    for j in jobs:
        if j.lo <= left and (not floored or size[j.job_id] == 0):
            size[j.job_id] = j.lo
            left -= j.lo
    return left


def grow_urgent(
    jobs: Sequence[ElasticJob], size: dict[str, int], left: int
) -> tuple[int, set[str]]:
    """The spare GPUs to admitted ``urgent`` jobs first, up to their maximum, in order.

    An urgent job is short of its SLA (see :class:`ElasticJob`): it grows whatever the restart
    costs. Updates ``size``; returns the GPUs left and the jobs grown (not to be undone).
    """
    grown: set[str] = set()
    for j in jobs:
        if not j.urgent:  # most jobs: no size to look up (every bulk job, every round)
            continue
        n = size[j.job_id]
        if n and n < j.hi and left > 0:
            add = min(j.hi - n, left)
            size[j.job_id] = n + add
            left -= add
            grown.add(j.job_id)
    return left, grown


def growth_left(
    jobs: Sequence[ElasticJob], gpus: int, size: dict[str, int]
) -> tuple[int, list[ElasticJob], int]:
    """The first steps of an allocator that searches how to spread growth (``search``,
    ``genetic``): admission (:func:`admit`), then urgent jobs (:func:`grow_urgent`).

    Fills ``size`` and returns the GPUs left, the jobs that may still grow (admitted, below
    their most, not grown for urgency) and an admitted job's fair share of the pool
    (``ceil(gpus / admitted)``, the unit Pollux's fairness term measures growth in).
    """
    left = admit(jobs, gpus, size)
    left, grown = grow_urgent(jobs, size, left)
    admitted = 0
    open_ = []
    for j in jobs:  # one pass: this runs over every bulk job every round
        n = size[j.job_id]
        if n:
            admitted += 1
            if 0 < n < j.hi and j.job_id not in grown:
                open_.append(j)
    return left, open_, math.ceil(gpus / admitted) if admitted else gpus
