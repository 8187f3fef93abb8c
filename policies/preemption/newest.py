"""The most recently started job gives way first."""

from __future__ import annotations

from collections.abc import Sequence

from policies.preemption.base import PREEMPTIONS, Preemption, VictimKey, pick_in_order
from policies.snapshot import RunningJob


@PREEMPTIONS.register("newest")
class NewestPreemption(Preemption):
    """Victims in reverse start order (latest start first), as priority schedulers do by
    default among equal-priority victims; blind to checkpoints."""

    def pick(self, pool: Sequence[RunningJob], need: int, now: float) -> list[RunningJob]:
        """See :meth:`Preemption.pick`."""
        return pick_in_order(pool, need, self.rank_key(now))

    def rank_key(self, now: float) -> VictimKey:
        """Latest start first, then later submission."""
        return lambda c: (-c.started_at, -c.seq, c.job_id)
