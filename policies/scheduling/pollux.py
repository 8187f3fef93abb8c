"""Pollux-style baseline: every round, reallocate the whole pool for goodput, blind to class."""

from __future__ import annotations

from policies.decisions import Decision
from policies.elastic import ElasticJob, GoodputElastic
from policies.placement import PLACEMENTS, Placement
from policies.scheduling.base import SCHEDULING_POLICIES, SchedulingPolicy
from policies.scheduling.resize import sizes_to_decisions
from policies.snapshot import QueuedJob, RunningJob, Snapshot


@SCHEDULING_POLICIES.register("pollux")
class PolluxSchedulingPolicy(SchedulingPolicy):
    """Goodput-maximising reallocation each round, as Pollux (Qiao et al., OSDI'21) does.

    Pollux re-optimises every job's GPU count each round from its goodput curve, counting the
    cost of a restart, and admits jobs in submission order (a job that cannot get its minimum
    waits). This baseline does the same with our elastic family: all jobs, queued and running,
    in submission order are admitted at their minimum while it fits (a later, smaller job may
    still start), running jobs keep what they hold first, and spare GPUs go one at a time to
    the largest marginal gain of ``objective`` (:class:`~policies.elastic.GoodputElastic`; a
    running job grows only when the gain pays for the restart). It knows no job class and no
    team: an interactive session is a rigid job in the same FIFO, and nothing is preempted for
    it; room is made for it only by shrinking elastic jobs, as the optimisation sees fit.

    Differences from the published Pollux: a greedy marginal allocation instead of its genetic
    search over placements, the jobs' true speedup curves instead of fitted ones, and a running
    job that has not done its first step yet (``RunningJob.first_step_at``) is left as it is
    (admitted first on its GPUs, neither shrunk, grown nor preempted).

    Args:
        objective: ``"harmonic"`` (default: Pollux's fairness exponent ``p = -1``), ``"log"``
            or ``"sum"``.
        placement: where new GPUs go (default ``topology``: fewest nodes per job).
    """

    def __init__(
        self, objective: str = "harmonic", placement: Placement | str = "topology"
    ) -> None:
        self.elastic = GoodputElastic(objective)
        self.placement = PLACEMENTS.create(placement) if isinstance(placement, str) else placement

    def decide(self, snapshot: Snapshot) -> list[Decision]:
        """See :meth:`SchedulingPolicy.decide`."""
        now = snapshot.now
        jobs: list[QueuedJob | RunningJob] = [*snapshot.running, *snapshot.queue]
        jobs.sort(key=lambda j: (j.seq, j.job_id))
        elastic: list[ElasticJob] = []
        for j in jobs:
            if not isinstance(j, RunningJob):
                elastic.append(ElasticJob(j.job_id, j.lo, j.hi, j.gpus, speedup=j.speedup))
                continue
            # a run with no step yet keeps exactly its GPUs: a resize would restart it
            keep = j.gpus if not j.stepped(now) else 0
            elastic.append(
                ElasticJob(
                    j.job_id,
                    lo=j.lo,
                    hi=max(keep, j.lo) if keep else j.hi,
                    preferred=j.gpus,
                    current=j.gpus,
                    speedup=j.speedup,
                    floor=keep,
                    run_s=now - j.started_at,
                )
            )
        sizes = self.elastic.allocate(elastic, snapshot.total_gpus, snapshot.restart_cost_s)
        return sizes_to_decisions(snapshot, sizes, self.placement, "goodput")
