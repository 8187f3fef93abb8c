"""Tiresias: two-queue discretised least-attained-service, as the Pollux artifact runs it."""

from __future__ import annotations

from policies.decisions import Decision, DecisionKind
from policies.eligibility import capacity, place, why_barred
from policies.placement import PLACEMENTS, Placement
from policies.scheduling.base import SCHEDULING_POLICIES, SchedulingPolicy
from policies.snapshot import QueuedJob, RunningJob, Snapshot


def service(job: QueuedJob | RunningJob, now: float) -> float:
    """GPU-seconds a job has attained by ``now`` (a running job's current run included)."""
    if isinstance(job, RunningJob):
        return job.attained_service + job.gpus * max(0.0, now - job.started_at)
    return job.attained_service


@SCHEDULING_POLICIES.register("tiresias")
class TiresiasSchedulingPolicy(SchedulingPolicy):
    """Discretised 2-queue LAS (Gu et al., NSDI'19), with the Pollux artifact's semantics.

    A job enters queue 0 in arrival order and moves to the end of queue 1 once its attained
    service (GPU-seconds held) reaches ``threshold_gpu_s`` (16 GPU-hours); no starvation guard.
    Each round, jobs are taken in queue order: a job runs if its GPU count fits in the GPUs not
    yet taken this round (counted over the pool, not per node), otherwise it is skipped and, if
    it was running, preempted. A running job keeps its GPUs; a new one is placed by
    ``placement`` (default: most free node first, as published). Jobs run at their requested
    ``gpus`` (no elasticity). One addition to the published policy: a running job that has
    not done its first step yet (``RunningJob.first_step_at``) is never preempted; its GPUs are
    counted as taken before the queues are walked. Another: a job goes only on nodes whose
    GPUs have the memory it needs (``gpu_memory_gb``), and a queued job larger than all such
    nodes together is passed over (the budget stays pool-wide, as published: a job whose
    nodes are busy waits as "fragmented").

    State: unlike most scheduling policies this one remembers one thing between rounds, the
    order in which jobs were demoted to queue 1 (Tiresias orders queue 1 by demotion time). A
    fresh instance rebuilds it from attained service, in submission order, so a restarted
    scheduler degrades gracefully. Deciding twice on one snapshot gives the same decisions.

    Args:
        threshold_gpu_s: service at which a job is demoted to queue 1.
        placement: a placement policy, or its registered name.
    """

    def __init__(
        self, threshold_gpu_s: float = 16 * 3600.0, placement: Placement | str = "most-free"
    ) -> None:
        self.threshold = threshold_gpu_s
        self.placement = PLACEMENTS.create(placement) if isinstance(placement, str) else placement
        self._demoted: dict[str, None] = {}

    def decide(self, snapshot: Snapshot) -> list[Decision]:
        """See :meth:`SchedulingPolicy.decide`."""
        now = snapshot.now
        jobs: list[QueuedJob | RunningJob] = [*snapshot.running, *snapshot.queue]
        jobs.sort(key=lambda j: (j.seq, j.job_id))
        active = {j.job_id for j in jobs}
        self._demoted = {k: None for k in self._demoted if k in active}
        for j in jobs:
            if j.job_id not in self._demoted and service(j, now) >= self.threshold:
                self._demoted[j.job_id] = None
        rank = {k: i for i, k in enumerate(self._demoted)}
        ordered = sorted(jobs, key=lambda j: (j.job_id in rank, rank.get(j.job_id, j.seq)))
        budget = snapshot.total_gpus
        # a run with no step yet keeps its GPUs: preempting it would only waste its start-up
        runs = {r.job_id for r in snapshot.running if not r.stepped(now)}
        budget -= sum(r.gpus for r in snapshot.running if r.job_id in runs)
        for j in ordered:
            if j.gpus <= budget and j.job_id not in runs:
                # a queued job larger than the GPUs with the memory it needs would take its
                # share of the budget (and preempt for it) every round and never start
                if isinstance(j, QueuedJob) and j.gpus > capacity(snapshot, j):
                    continue
                runs.add(j.job_id)
                budget -= j.gpus
        decisions: list[Decision] = []
        free = snapshot.free()
        for r in snapshot.running:
            if r.job_id not in runs:
                decisions.append(Decision(DecisionKind.PREEMPT, r.job_id, reason="lower queue"))
                for node in r.nodes:
                    free[node] = free.get(node, 0) + 1
        queued = {q.job_id for q in snapshot.queue}
        for j in ordered:
            if j.job_id not in queued:
                continue
            if j.job_id not in runs:
                why, note = "waiting for GPUs (Tiresias)", why_barred(snapshot, j)
                why = f"{why}; {note}" if note else why
                decisions.append(Decision(DecisionKind.WAIT, j.job_id, reason=why))
                continue
            nodes = place(self.placement, j.gpus, free, snapshot, j)
            if nodes is None:  # only for want of nodes with its memory: the count fits
                why = why_barred(snapshot, j) or "fragmented"
                decisions.append(Decision(DecisionKind.WAIT, j.job_id, reason=why))
                continue
            for node in nodes:
                free[node] -= 1
            decisions.append(
                Decision(
                    DecisionKind.START,
                    j.job_id,
                    nodes=nodes,
                    strategy=self.placement.ray_strategy,
                    reason="queue 1" if j.job_id in rank else "queue 0",
                )
            )
        return decisions
