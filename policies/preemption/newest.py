"""The most recently started job gives way first."""

from __future__ import annotations

from collections.abc import Sequence

from policies.preemption.base import PREEMPTIONS, Preemption, trim
from policies.snapshot import RunningJob


@PREEMPTIONS.register("newest")
class NewestPreemption(Preemption):
    """Victims in reverse start order (latest start first), as priority schedulers do by
    default among equal-priority victims; blind to checkpoints."""

    def pick(self, pool: Sequence[RunningJob], need: int, now: float) -> list[RunningJob]:
        """See :meth:`Preemption.pick`."""
        chosen: list[RunningJob] = []
        got = 0
        for c in sorted(pool, key=lambda c: (-c.started_at, -c.seq, c.job_id)):
            chosen.append(c)
            got += c.gpus
            if got >= need:
                break
        return trim(chosen, need)
