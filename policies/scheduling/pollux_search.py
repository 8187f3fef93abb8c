"""Pollux's genetic search over GPU counts (Qiao et al., OSDI'21, section 4.2).

The published scheduler searches job-by-node replica matrices with a genetic algorithm
(NSGA-II in the artifact, its second objective unused for a fixed cluster): a population of
allocations, single-point crossover over the job axis, mutations that reset a job to its
current allocation, zero it or raise it, and a repair that makes every allocation feasible,
giving GPUs to jobs in priority order (least attained service first) when the pool runs out.
This module runs that search over each job's GPU *count*; which nodes a count lands on is
decided afterwards (compactly, see :mod:`policies.scheduling.pollux`), because a job's
speedup here is known per GPU count on its most compact placement.

The objective is separable: ``cost[j, n]`` is job ``j``'s term with ``n`` GPUs (the caller
folds the fairness exponent and the restart penalty into it), and the search minimises the sum
of the terms. Everything is numpy, vectorised over the population; the result is a pure
function of the inputs and the seed.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # numpy is imported lazily: ``import policies`` stays light
    import numpy as np
    from numpy.typing import NDArray

    IntArray = NDArray[np.int64]
    FloatArray = NDArray[np.float64]


EPSILON = 1e-3
"""Added to every scaled speedup before the power mean (the artifact's), so a job with no GPUs
costs a large but finite amount: every job gets a GPU before any job gets a second one."""


def power_cost(speedup: FloatArray, current: int, penalty: float, p: float) -> FloatArray:
    """One job's row of :attr:`CountProblem.cost`: its term of Pollux's power mean.

    Args:
        speedup: the job's speedup on ``0..width-1`` GPUs (over its fair share).
        current: the GPUs it holds (0: queued): any other count costs a restart.
        penalty: the restart penalty, ``age / (age + restart_cost_s)``; it scales the speedup
            of every count but ``current``.
        p: the fairness exponent: for ``p < 0``, ``(s + EPSILON) ** p`` (minimising the sum
            maximises the power mean; ``-1``: harmonic mean); for ``p > 0``, ``-(s ** p)``.
    """
    import numpy as np

    counts = np.arange(len(speedup))
    scaled = np.where(counts == current, speedup, speedup * penalty)
    out: FloatArray = (scaled + EPSILON) ** p if p < 0 else -(scaled**p)
    return out


@dataclass(frozen=True)
class CountProblem:
    """One round's allocation problem, jobs in priority order (first = served first).

    Attributes:
        cost: ``(jobs, width)`` cost of job ``j`` on ``n`` GPUs (``n < width``); minimised.
        lo: fewest GPUs each job runs on (fewer is repaired to 0).
        cap: most GPUs each job may get now (``< width``).
        base: the current allocation (0 for queued jobs): mutation resets a job to it.
        gpus: GPUs in the pool.
        pinned: jobs that keep ``base`` whatever the search does (put them first: they are
            served first); ``None``: none.
    """

    cost: FloatArray
    lo: IntArray
    cap: IntArray
    base: IntArray
    gpus: int
    pinned: NDArray[np.bool_] | None = None

    def repair(self, pop: IntArray) -> IntArray:
        """Make every row feasible: within ``lo..cap`` (or 0) and within the pool, the jobs
        first in priority order keeping their GPUs when the pool runs out (as the artifact's
        repair, which clips the cumulative sum over jobs)."""
        import numpy as np

        pop = np.clip(pop, 0, self.cap)
        if self.pinned is not None:
            pop = np.where(self.pinned, self.base, pop)
        pop = np.where(pop < self.lo, 0, pop)
        total = np.minimum(np.cumsum(pop, axis=1), self.gpus)
        pop = np.diff(total, axis=1, prepend=0)
        return np.where(pop < self.lo, 0, pop)

    def evaluate(self, pop: IntArray) -> FloatArray:
        """The objective of every row (lower is better)."""
        import numpy as np

        rows = np.arange(pop.shape[1])
        out: FloatArray = self.cost[rows, pop].sum(axis=1)
        return out


def greedy_seed(problem: CountProblem) -> IntArray:
    """A good starting allocation: ``lo`` GPUs per job in priority order while they fit, then
    repeatedly the step (to any larger count, so a non-concave curve is crossed) with the best
    cost drop per GPU."""
    import numpy as np

    cost, cap, lo = problem.cost, problem.cap, problem.lo
    x = np.zeros(len(cap), dtype=np.int64)
    left = problem.gpus
    for j in range(len(cap)):
        if 0 < lo[j] <= min(left, cap[j]):
            x[j] = lo[j]
            left -= int(lo[j])
    width = cost.shape[1]
    steps = np.arange(width)
    while left > 0:
        cur = cost[np.arange(len(x)), x]
        ahead = steps[None, :] - x[:, None]  # GPUs added to reach each count
        ok = (ahead > 0) & (ahead <= left) & (steps[None, :] <= cap[:, None]) & (x[:, None] > 0)
        if not ok.any():
            break
        with np.errstate(divide="ignore", invalid="ignore"):
            gain = np.where(ok, (cur[:, None] - cost) / np.maximum(ahead, 1), -np.inf)
        row, col = (int(k) for k in np.unravel_index(int(np.argmax(gain)), gain.shape))
        if gain[row, col] <= 1e-12:
            break
        left -= col - int(x[row])
        x[row] = col
    return x


def genetic_search(
    problem: CountProblem,
    seed: int | list[int],
    population: int = 50,
    generations: int = 40,
    mutation_rate: float = 0.1,
    patience: int | None = None,
) -> IntArray:
    """The best allocation found; deterministic for the same problem and seed.

    The first population holds the current allocation, the greedy seed and mutants of both;
    each generation makes ``population`` children (tournament parents, single-point crossover
    over the job axis, mutation, repair) and keeps the best ``population`` of parents and
    children together (elitist, so the result is never worse than the seeds). With
    ``patience``, it stops early after that many generations in a row without a better best.
    """
    import numpy as np

    rng = np.random.default_rng(seed)
    jobs = len(problem.cap)
    if jobs == 0:
        return np.zeros(0, dtype=np.int64)
    seeds = problem.repair(np.stack([problem.base, greedy_seed(problem)]))
    pop = problem.repair(_mutate(problem, seeds[rng.integers(0, 2, population)], rng, 0.3))
    pop[: len(seeds)] = seeds
    score = problem.evaluate(pop)
    best_score, stale = float(score.min()), 0
    for _ in range(generations):
        a, b = rng.integers(0, population, (2, population))
        first = np.where(score[a] <= score[b], a, b)
        c, d = rng.integers(0, population, (2, population))
        second = np.where(score[c] <= score[d], c, d)
        point = rng.integers(0, jobs + 1, (population, 1))
        mask = np.arange(jobs)[None, :] < point
        children = np.where(mask, pop[first], pop[second])
        children = problem.repair(_mutate(problem, children, rng, mutation_rate))
        both = np.concatenate([pop, children])
        scores = np.concatenate([score, problem.evaluate(children)])
        keep = np.argsort(scores, kind="stable")[:population]
        pop, score = both[keep], scores[keep]
        if float(score[0]) < best_score - 1e-12:
            best_score, stale = float(score[0]), 0
        else:
            stale += 1
            if patience is not None and stale >= patience:
                break
    best: IntArray = pop[int(np.argmin(score))]
    return best


def _mutate(
    problem: CountProblem, pop: IntArray, rng: np.random.Generator, rate: float
) -> IntArray:
    """The artifact's three mutations, each on a ``rate`` fraction of the (row, job) cells:
    back to the current allocation, to zero, or to a random count up to the job's cap."""
    import numpy as np

    cells = pop.shape
    pop = np.where(rng.random(cells) < rate, problem.base, pop)
    pop = np.where(rng.random(cells) < rate * rate, 0, pop)
    raise_ = rng.random(cells) < rate
    high = np.maximum(problem.cap, pop) + 1
    drawn = rng.integers(np.minimum(pop, high - 1), high)
    out: IntArray = np.where(raise_, drawn, pop)
    return out
