"""Least work lost, fewest jobs disturbed."""

from __future__ import annotations

from collections.abc import Sequence

from policies.preemption.base import PREEMPTIONS, Preemption, VictimKey, lost_work, pick_in_order
from policies.snapshot import RunningJob


@PREEMPTIONS.register("cost-aware")
class CostAwarePreemption(Preemption):
    """Minimise the work lost since the victims' last checkpoints, then the jobs disturbed.

    If one job can free enough, the single job losing the least work does (one job disturbed);
    otherwise jobs are taken by least work lost per GPU freed (ties: more GPUs, later
    submission), and victims that turn out unnecessary are dropped again.
    """

    def pick(self, pool: Sequence[RunningJob], need: int, now: float) -> list[RunningJob]:
        """See :meth:`Preemption.pick`."""
        return pick_in_order(pool, need, self.rank_key(now), self.single_key(now))

    def rank_key(self, now: float) -> VictimKey:
        """Least work lost per GPU freed, then more GPUs, later submission."""
        return lambda c: (lost_work(c, now) / c.gpus, -c.gpus, -c.seq, c.job_id)

    def single_key(self, now: float) -> VictimKey:
        """Least work lost, then fewest GPUs, later submission."""
        return lambda c: (lost_work(c, now), c.gpus, -c.seq, c.job_id)
