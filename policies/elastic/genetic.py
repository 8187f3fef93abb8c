"""Spread bulk GPUs by Pollux's genetic search over the jobs' speedup curves.

The search itself is :func:`policies.scheduling.pollux_search.genetic_search` (the reproduced
Pollux's); it is imported when an allocation runs, not with this module: ``policies.scheduling``
imports this family, and numpy stays out of ``import policies``.
"""

from __future__ import annotations

import zlib
from collections.abc import Sequence
from typing import TYPE_CHECKING

from policies.elastic.base import ELASTIC, ElasticAllocation, ElasticJob, growth_left

if TYPE_CHECKING:
    from policies.scheduling.pollux_search import CountProblem


@ELASTIC.register("genetic")
class GeneticElastic(ElasticAllocation):
    """Pollux's allocation search (Qiao et al., OSDI'21, section 4.2) after admission.

    Admission is every allocator's (floors, then minimums, in order; see the base contract),
    and urgent jobs get the spare GPUs first, as in ``goodput``. The GPUs still left are spread
    by the genetic search, minimising Pollux's cost ``sum((s_j + EPSILON) ** p)``
    (:func:`~policies.scheduling.pollux_search.power_cost`), where ``s_j`` is job ``j``'s
    goodput over its goodput at the fair share ``ceil(gpus / admitted jobs)``, and a running
    job's change (any count but the one it holds) scales ``s_j`` by the restart penalty
    ``run_s / (run_s + restart_cost_s + lost_s)`` (Pollux's ``age / (age + restart)``, the
    age counted from the current allocation's start, the horizon ``goodput``'s restart gate
    uses). ``lost_s``, the work since the job's last checkpoint, is not in Pollux's penalty:
    its jobs checkpoint when they are stopped, so a restart loses only the restart. Ours may
    lose up to a checkpoint interval; without it the search moved jobs with much unsaved work
    as readily as any (on the mixed benchmark, 61% more resizes than ``goodput`` and bulk mean
    JCT +11%; counting it, +1%; BENCHMARKS.md, issue 16).

    It searches each admitted job's GPUs *beyond* its admission (``0..hi - admitted``), so no
    admitted job loses its place. Its first population holds what running jobs hold and the
    greedy seed. Unlike ``goodput`` it has no ramp (Pollux caps a job at twice what it holds
    because it fits its model online; these curves are measured), and it does not give running
    jobs their GPUs back first: the penalty decides whether moving them pays. What that buys,
    on the Pollux workloads: a jump across a non-concave part of a curve (a GPU on a new node
    lowers goodput before more GPUs raise it), and the re-spread of a large job's GPUs when new
    jobs arrive (BENCHMARKS.md, issue 16).

    Deterministic: the search is seeded from ``seed`` and the admitted jobs' ids (an allocator
    gets no snapshot and keeps no state).

    Args:
        p: the fairness exponent, ``< 0`` (``-1``: harmonic mean of speedups, Pollux's
            default) or ``> 0`` (``1``: total goodput).
        population: the search's population size.
        generations: generations per allocation.
        seed: mixed into every search's seed.
        count_lost: count ``lost_s`` in the restart penalty (``False``: the restart alone,
            as Pollux).
    """

    def __init__(
        self,
        p: float = -1.0,
        population: int = 50,
        generations: int = 40,
        seed: int = 0,
        count_lost: bool = True,
    ) -> None:
        if p == 0:
            raise ValueError("p must be non-zero (-1: harmonic mean, 1: sum of speedups)")
        if population < 2 or generations < 0:
            raise ValueError(
                f"population must be >= 2 and generations >= 0, got {population}, {generations}"
            )
        self.p = p
        self.population = population
        self.generations = generations
        self.seed = seed
        self.reads_lost = count_lost  # the base class's flag: lost_s is read when counted

    def allocate(
        self, jobs: Sequence[ElasticJob], gpus: int, restart_cost_s: float
    ) -> dict[str, int]:
        """See :meth:`ElasticAllocation.allocate`."""
        size: dict[str, int] = {}
        left, open_, fair = growth_left(jobs, gpus, size)
        if left <= 0 or not open_:
            return size
        from policies.scheduling.pollux_search import genetic_search

        problem = self.problem(open_, size, left, fair, restart_cost_s)
        key = zlib.crc32("\n".join(j.job_id for j in open_).encode())
        extra = genetic_search(problem, [self.seed, key], self.population, self.generations)
        for j, k in zip(open_, extra, strict=True):
            size[j.job_id] += int(k)
        return size

    def problem(
        self,
        jobs: Sequence[ElasticJob],
        size: dict[str, int],
        left: int,
        fair: int,
        restart_cost_s: float,
    ) -> CountProblem:
        """The search over ``jobs``' GPUs beyond ``size`` (their admission), ``left`` in all.

        Row ``i``, column ``k``: job ``i``'s cost on ``size + k`` GPUs (see the class
        docstring); the first population's allocation is what each job holds beyond ``size``.
        """
        import numpy as np

        from policies.scheduling.pollux_search import CountProblem, power_cost

        have = np.array([size[j.job_id] for j in jobs], dtype=np.int64)
        cap = np.minimum(np.array([j.hi for j in jobs], dtype=np.int64) - have, left)
        base = np.zeros(len(jobs), dtype=np.int64)
        width = int(cap.max()) + 1
        cost = np.empty((len(jobs), width))
        for i, j in enumerate(jobs):
            a = int(have[i])
            rates = np.array([j.rate(n) for n in range(a, a + width)])
            base[i] = min(max(j.current - a, 0), int(cap[i]))
            penalty = 1.0
            lost = restart_cost_s + j.lost_s if self.reads_lost else restart_cost_s
            if j.current and lost:
                penalty = j.run_s / (j.run_s + lost)
            # column k is a + k GPUs: the count it holds is column current - a
            cost[i] = power_cost(rates / max(j.rate(fair), 1e-12), j.current - a, penalty, self.p)
        return CountProblem(cost, np.zeros(len(jobs), dtype=np.int64), cap, base, left)
