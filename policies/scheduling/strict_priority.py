"""Strict-priority baseline: interactive over bulk, preempting bulk, FIFO within a class."""

from __future__ import annotations

from policies.decisions import Decision, DecisionKind
from policies.eligibility import capacity, place, usable, why_barred
from policies.placement import PLACEMENTS, Placement
from policies.preemption import PREEMPTIONS, Preemption, VictimIndex
from policies.scheduling.base import SCHEDULING_POLICIES, SchedulingPolicy
from policies.scheduling.in_order import place_in_order
from policies.snapshot import Snapshot


@SCHEDULING_POLICIES.register("strict-priority")
class StrictPrioritySchedulingPolicy(SchedulingPolicy):
    """Two priority classes, the higher preempting the lower, as production schedulers do.

    Kubernetes priority classes and Slurm's partition-priority preemption (``PreemptMode=
    REQUEUE``) behave this way: a pending interactive job that does not fit evicts running bulk
    jobs, chosen by ``preemption`` (default ``newest``: the most recently started first, blind
    to checkpoints and teams), and the victims go back to the queue. Interactive jobs are taken
    in start-deadline order; nothing is preempted for one that would not fit even with every
    bulk job gone (it waits, and bulk jobs do not start past it). Bulk jobs then start in
    strict submission order on what is left (the first that does not fit blocks the rest).
    Jobs run at their requested ``gpus``; teams are not looked at. A job goes only on nodes
    whose GPUs have the memory it needs (``gpu_memory_gb``), and bulk jobs are preempted for
    an interactive one only when the GPUs they free then let it start.

    Args:
        placement: a placement policy, or its registered name.
        preemption: victim choice among running bulk jobs, or its registered name.
        min_runtime_s: the victims' minimum-runtime protection (see
            :class:`~policies.preemption.Preemption`; 0 by default, as in those schedulers).
    """

    def __init__(
        self,
        placement: Placement | str = "pack",
        preemption: Preemption | str = "newest",
        min_runtime_s: float = 0.0,
    ) -> None:
        self.placement = PLACEMENTS.create(placement) if isinstance(placement, str) else placement
        self.preemption = (
            PREEMPTIONS.create(preemption, min_runtime_s=min_runtime_s)
            if isinstance(preemption, str)
            else preemption
        )

    def decide(self, snapshot: Snapshot) -> list[Decision]:
        """See :meth:`SchedulingPolicy.decide`."""
        free = snapshot.free()
        free_total = sum(free.values())
        # the victims of every interactive job come from one index of the round (built when
        # first needed): it is sorted once instead of once per interactive job
        index: VictimIndex | None = None
        preempts: list[Decision] = []
        starts: list[Decision] = []
        blocked: str | None = None
        inter = sorted(
            (q for q in snapshot.queue if q.interactive),
            key=lambda q: (q.submitted_at + q.wait_target_s, q.seq, q.job_id),
        )
        for q in inter:
            note = why_barred(snapshot, q)  # "" unless nodes are too small for it
            if note and q.gpus > capacity(snapshot, q):
                starts.append(Decision(DecisionKind.WAIT, q.job_id, reason=note))
                continue  # it can never start: it holds back nobody
            short = q.gpus - (sum(usable(free, snapshot, q).values()) if note else free_total)
            if short > 0:
                if index is None:
                    bulk = [r for r in snapshot.running if not r.interactive]
                    one_group = {r.job_id: "" for r in bulk}
                    index = self.preemption.index(bulk, one_group, snapshot.now)
                victims = index.choose(("",), short)
                if victims is not None and note:
                    # victims are chosen by count: GPUs they free on nodes too small for the
                    # job would be preempted for nothing, so they go only if it then fits
                    trial = dict(free)
                    for v in victims:
                        for n in v.nodes:
                            trial[n] += 1
                    if place(self.placement, q.gpus, trial, snapshot, q) is None:
                        victims = None
                if victims is None:
                    blocked = blocked or q.job_id
                    why = "interactive jobs hold the pool"
                    starts.append(
                        Decision(
                            DecisionKind.WAIT, q.job_id, reason=f"{why}; {note}" if note else why
                        )
                    )
                    continue
                for v in victims:
                    index.remove(v.job_id)
                    for n in v.nodes:
                        free[n] += 1
                    free_total += v.gpus
                    preempts.append(
                        Decision(DecisionKind.PREEMPT, v.job_id, reason=f"gives way to {q.job_id}")
                    )
            nodes = place(self.placement, q.gpus, free, snapshot, q)
            if nodes is None:  # cannot happen: the count fits, and placements span nodes
                starts.append(Decision(DecisionKind.WAIT, q.job_id, reason="fragmented"))
                continue
            for n in nodes:
                free[n] -= 1
            free_total -= len(nodes)
            starts.append(self._start(q.job_id, nodes, "interactive: high priority"))
        queue = sorted(
            (q for q in snapshot.queue if not q.interactive), key=lambda q: (q.seq, q.job_id)
        )
        starts += place_in_order(
            queue,
            free,
            snapshot.total_gpus,
            self.placement,
            snapshot=snapshot,
            label="bulk: low priority",
            blocked_by=blocked,
        )
        return preempts + starts

    def _start(self, job_id: str, nodes: tuple[str, ...], why: str) -> Decision:
        return Decision(
            DecisionKind.START,
            job_id,
            nodes=nodes,
            strategy=self.placement.ray_strategy,
            reason=why,
        )
