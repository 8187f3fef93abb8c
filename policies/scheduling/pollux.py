"""Pollux (Qiao et al., OSDI'21): each round, reallocate the pool for a fair mean of speedups.

Class-blind, as published: an interactive session is a rigid job among the others, nothing
reserves room for it.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable, Collection, Sequence

from policies.decisions import Decision, DecisionKind
from policies.eligibility import capacity
from policies.placement import PLACEMENTS, Placement, without
from policies.scheduling.base import SCHEDULING_POLICIES, SchedulingPolicy
from policies.scheduling.pollux_search import CountProblem, genetic_search, power_cost
from policies.scheduling.resize import drop_gpus
from policies.snapshot import QueuedJob, RunningJob, Snapshot

Job = QueuedJob | RunningJob


@SCHEDULING_POLICIES.register("pollux")
class PolluxSchedulingPolicy(SchedulingPolicy):
    """Pollux's allocation: a genetic search maximising the power mean of the jobs' speedups.

    Each round (the published artifact's ``PolluxPolicy.optimize``, re-derived):

    1. Jobs, queued and running, in priority order: least attained service first, then
       submission (the order in which the search's repair serves them when GPUs run out).
    2. Each job's speedup on ``n`` GPUs is its goodput there (``speedup``, from its goodput
       model: throughput x statistical efficiency at the best batch and micro-batch for ``n``;
       the artifact's agent fits that model to what the job has run on, prior included, and
       the reproduction benchmark shows this policy the same view:
       :class:`~orchestrator.sim.pollux_view.FittedViewJobModel`) over its goodput at the
       fair share ``ceil(GPUs / jobs)`` (on the packed placement; ``fair_rate`` where given,
       e.g. the artifact's one-node baseline), scaled by ``nodes / GPUs`` as the artifact
       does (a node's worth of fair share is 1). A change of allocation (a start too) multiplies it
       by the restart penalty ``max(age - restarts x restart_cost_s, 0) / (age +
       restart_cost_s)``, ``age`` counted from submission and ``restarts`` the job's
       allocations after its first (``restarts``), as the artifact's.
    3. A job may get at most twice the most GPUs it has run on (1 if none): Pollux trusts its
       fitted throughput model only up to twice the largest allocation it has measured
       (``max(most_gpus, GPUs held)``), so a job ramps up 1, 2, 4, ... rounds apart, and one
       shrunk from 8 GPUs may grow back to 16 at once (``ramp=False`` lifts this).
    4. The genetic search (:func:`~policies.scheduling.pollux_search.genetic_search`) minimises
       ``sum((s_j + EPSILON) ** p)`` for ``p < 0`` (maximises the power mean with exponent ``p``;
       ``p = -1``, the default, is the harmonic mean) or maximises ``sum(s_j ** p)`` for
       ``p > 0`` (``p = 1``: total goodput); see
       :func:`~policies.scheduling.pollux_search.power_cost`.
    5. The counts become nodes: a shrinking job drops GPUs where it has fewest, a growing or new
       job takes the most compact placement of the free GPUs (its own included), and, for
       interference avoidance, no node holds GPUs of two jobs that span several nodes each.
       A job's count is capped by, and its GPUs taken from, the nodes whose GPUs have the
       memory it needs (``gpu_memory_gb``).

    A running job that has not done its first step yet (``RunningJob.first_step_at``) keeps
    exactly its GPUs (a change would throw its start-up away): it is pinned, and served before
    every other job, as the artifact serves its pinned jobs. Differences from the artifact:
    it searches GPU counts (speedups are known per count, on the most compact placement)
    rather than job-by-node matrices; its first population is the current allocation and a
    greedy one rather than the previous round's population (a policy keeps no state); and it
    runs ``generations`` generations of ``population`` rather than 100 of 100.

    Args:
        p: the fairness exponent (``-1``: harmonic mean; ``1``: sum of speedups).
        population: the genetic search's population size.
        generations: generations per round.
        ramp: cap a job at twice what it holds (see 3).
        placement: where a new or moved job goes (default ``topology``: fewest nodes).
        fair_rate: ``(job id, GPUs) ->`` the job's goodput at the fair share, in its
            ``speedup`` unit, instead of ``rate(fair)``: the artifact computes that baseline
            as if the fair share sat on one node (petuum/adaptdl ``simulator/pollux.py``
            ``Problem.__init__``, ``fair_nodes`` is 1 in its 16-node cluster), which a GPU-count
            table cannot say; the reproduction benchmark passes
            :meth:`~orchestrator.sim.pollux_view.FittedViewJobModel.fair_goodput`.
    """

    def __init__(
        self,
        p: float = -1.0,
        population: int = 50,
        generations: int = 40,
        ramp: bool = True,
        placement: Placement | str = "topology",
        fair_rate: Callable[[str, int], float] | None = None,
    ) -> None:
        if p == 0:
            raise ValueError("p must be non-zero (-1: harmonic mean, 1: sum of speedups)")
        self.p = p
        self.population = population
        self.generations = generations
        self.ramp = ramp
        self.placement = PLACEMENTS.create(placement) if isinstance(placement, str) else placement
        self.fair_rate = fair_rate

    def decide(self, snapshot: Snapshot) -> list[Decision]:
        """See :meth:`SchedulingPolicy.decide`."""
        jobs: list[Job] = [*snapshot.running, *snapshot.queue]
        now = snapshot.now
        # pinned first (a run with no step yet keeps its GPUs), then least attained service
        jobs.sort(
            key=lambda j: (
                not (isinstance(j, RunningJob) and not j.stepped(now)),
                j.attained_service,
                j.submitted_at,
                j.seq,
                j.job_id,
            )
        )
        if not jobs:
            return []
        problem = self.problem(snapshot, jobs)
        counts = genetic_search(
            problem,
            [snapshot.seed, int(snapshot.now)],
            self.population,
            self.generations,
        )
        sizes = {j.job_id: int(n) for j, n in zip(jobs, counts, strict=True)}
        return place_counts(snapshot, jobs, sizes, self.placement)

    def problem(self, snapshot: Snapshot, jobs: Sequence[Job]) -> CountProblem:
        """The round's :class:`CountProblem`: each job's cost on 0..cap GPUs (see steps 2-4)."""
        import numpy as np

        now, total = snapshot.now, snapshot.total_gpus
        lo = np.zeros(len(jobs), dtype=np.int64)
        cap = np.zeros(len(jobs), dtype=np.int64)
        base = np.zeros(len(jobs), dtype=np.int64)
        pinned = np.zeros(len(jobs), dtype=bool)
        for i, j in enumerate(jobs):
            have = j.gpus if isinstance(j, RunningJob) else 0
            base[i] = have
            if isinstance(j, RunningJob) and not j.stepped(now):
                lo[i] = cap[i] = have
                pinned[i] = True
                continue
            lo[i] = j.lo
            measured = have if have > j.most_gpus else j.most_gpus
            most = max(2 * measured, 1) if self.ramp else j.hi
            # only GPUs with the memory it needs count (below lo: it gets none)
            cap[i] = min(j.hi, max(most, j.lo), capacity(snapshot, j))
        width = int(cap.max()) + 1
        fair = math.ceil(total / len(jobs))
        scale = len(snapshot.nodes) / max(total, 1)
        cost = np.empty((len(jobs), width))
        restart = snapshot.restart_cost_s
        for i, j in enumerate(jobs):
            rates = np.array([j.rate(n) for n in range(width)])
            at_fair = self.fair_rate(j.job_id, fair) if self.fair_rate else j.rate(fair)
            speedup = rates / max(at_fair, 1e-12) * scale
            age = max(now - j.submitted_at, 0.0)
            penalty = max(age - j.restarts * restart, 0.0) / (age + restart) if restart else 1.0
            cost[i] = power_cost(speedup, int(base[i]), penalty, self.p)
        return CountProblem(cost, lo, cap, base, total, pinned)


def place_counts(
    snapshot: Snapshot, jobs: Sequence[Job], sizes: dict[str, int], placement: Placement
) -> list[Decision]:
    """Decisions that give every job its target GPU count (0: not running).

    Stopped and shrinking jobs first (they free GPUs); then growing and new jobs in priority
    order (``jobs``: least attained service first), each on the most compact of (its own GPUs
    plus free ones, the free ones only): a job that moves does so in one resize. Priority
    order, as the artifact's repair settles conflicts (petuum/adaptdl ``simulator/pollux.py``
    ``Problem._repair``: node capacity and the one-distributed-job-per-node rule are enforced
    by a cumulative sum over the jobs in ``optimize``'s order, so an earlier job keeps its
    GPUs); largest target first instead left a young job's growth unplaced once the large
    ones had taken the free nodes. A job that spans several nodes never
    shares a node with another such job (interference avoidance); a target that cannot be
    placed so is lowered until it can (a queued job that fits nowhere waits).
    """
    free = snapshot.free()
    hold = {r.job_id: list(r.nodes) for r in snapshot.running}
    out: list[Decision] = []
    for r in snapshot.running:
        target = sizes.get(r.job_id, 0)
        if target == 0:
            out.append(Decision(DecisionKind.PREEMPT, r.job_id, reason="gives way (goodput)"))
            for n in hold.pop(r.job_id):
                free[n] += 1
        elif target < r.gpus:
            for n in drop_gpus(hold[r.job_id], r.gpus - target):
                free[n] += 1
            out.append(_resize(r.job_id, hold[r.job_id], placement, "shrinks"))
    spread = Counter(n for nodes in hold.values() if len(set(nodes)) > 1 for n in set(nodes))
    rank = {j.job_id: i for i, j in enumerate(jobs)}
    growing = [j for j in jobs if sizes.get(j.job_id, 0) > len(hold.get(j.job_id, ()))]
    growing.sort(key=lambda j: rank[j.job_id])
    started: set[str] = set()
    for j in growing:
        have = hold.get(j.job_id, [])
        if len(set(have)) > 1:
            spread.subtract(set(have))
        floor = max(len(have), j.lo - 1)  # never below what it holds, nor its minimum
        small = snapshot.barred(j)
        nodes = _place(sizes[j.job_id], floor, have, free, spread, placement, small)
        if nodes is None:
            if len(set(have)) > 1:
                spread.update(set(have))
            continue
        for n in have:
            free[n] += 1
        for n in nodes:
            free[n] -= 1
        if len(set(nodes)) > 1:
            spread.update(set(nodes))
        if have:
            hold[j.job_id] = list(nodes)
            out.append(_resize(j.job_id, nodes, placement, "grows"))
        else:
            started.add(j.job_id)
            out.append(
                Decision(
                    DecisionKind.START,
                    j.job_id,
                    nodes=tuple(nodes),
                    strategy=placement.ray_strategy,
                    reason=f"goodput on {len(nodes)} GPUs",
                )
            )
    out.extend(
        Decision(DecisionKind.WAIT, q.job_id, reason="waiting for GPUs (goodput)")
        for q in snapshot.queue
        if q.job_id not in started
    )
    return out


def _resize(job_id: str, nodes: Sequence[str], placement: Placement, verb: str) -> Decision:
    return Decision(
        DecisionKind.RESIZE,
        job_id,
        nodes=tuple(nodes),
        strategy=placement.ray_strategy,
        reason=f"{verb} to {len(nodes)} GPUs (goodput)",
    )


def _place(
    target: int,
    floor: int,
    have: Sequence[str],
    free: dict[str, int],
    spread: Counter[str],
    placement: Placement,
    too_small: Collection[str] = (),
) -> tuple[str, ...] | None:
    """The nodes for ``target`` GPUs (a job holding ``have``), lowered down to ``floor + 1``.

    Candidates: its own GPUs kept and free ones added on its nodes first, or a fresh compact
    placement over the free GPUs and its own; the one on fewer nodes wins (ties: staying). A
    candidate over several nodes may not use a node in ``spread``; none takes a GPU on a node
    in ``too_small`` (its GPUs lack the job's memory).
    """
    mine = Counter(have)
    pool = dict(free)
    for n, c in mine.items():
        pool[n] = pool.get(n, 0) + c
    pool = dict(without(pool, too_small))
    taken = {n for n, c in spread.items() if c > 0}
    alone = {n: c for n, c in pool.items() if n not in taken}
    for size in range(target, floor, -1):
        options = []
        stay = _grow_in_place(have, size, free, placement, too_small)
        if stay is not None:
            options.append(stay)
        fresh = placement.place(size, pool)
        if fresh is not None:
            options.append(fresh)
        fresh = placement.place(size, alone)
        if fresh is not None:
            options.append(fresh)
        ok = [o for o in options if len(set(o)) == 1 or not set(o) & taken]
        if ok:
            return min(ok, key=lambda o: len(set(o)))
    return None


def _grow_in_place(
    have: Sequence[str],
    size: int,
    free: dict[str, int],
    placement: Placement,
    too_small: Collection[str] = (),
) -> tuple[str, ...] | None:
    if not have:
        return None
    nodes = list(have)
    left = dict(without(free, too_small))
    for n in dict.fromkeys(have):
        take = min(left.get(n, 0), size - len(nodes))
        nodes.extend([n] * take)
        if take:
            left[n] -= take
    if len(nodes) < size:
        more = placement.place(size - len(nodes), left)
        if more is None:
            return None
        nodes.extend(more)
    return tuple(nodes)
