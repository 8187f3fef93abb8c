"""Rigid jobs: each admitted job gets exactly the GPUs it asked for."""

from __future__ import annotations

from collections.abc import Sequence

from policies.elastic.base import ELASTIC, ElasticAllocation, ElasticJob


@ELASTIC.register("fixed")
class FixedElastic(ElasticAllocation):
    """No elasticity: in order, a job runs on ``preferred`` GPUs if they are left, else not.

    (``lo`` and ``floor`` are ignored: the baseline schedulers run jobs at their request.)
    """

    def allocate(
        self, jobs: Sequence[ElasticJob], gpus: int, restart_cost_s: float
    ) -> dict[str, int]:
        """See :meth:`ElasticAllocation.allocate`."""
        out: dict[str, int] = {}
        left = gpus
        for j in jobs:
            take = j.preferred if j.preferred <= left else 0
            out[j.job_id] = take
            left -= take
        return out
