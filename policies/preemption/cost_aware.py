"""Least work lost, fewest jobs disturbed."""

from __future__ import annotations

from collections.abc import Sequence

from policies.preemption.base import PREEMPTIONS, Preemption, lost_work, trim
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
        singles = [c for c in pool if c.gpus >= need]
        if singles:
            return [min(singles, key=lambda c: (lost_work(c, now), c.gpus, -c.seq, c.job_id))]
        ranked = sorted(pool, key=lambda c: (lost_work(c, now) / c.gpus, -c.gpus, -c.seq, c.job_id))
        chosen: list[RunningJob] = []
        got = 0
        for c in ranked:
            chosen.append(c)
            got += c.gpus
            if got >= need:
                break
        return trim(chosen, need)
