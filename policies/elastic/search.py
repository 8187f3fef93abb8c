"""Spread bulk GPUs by an exact search over GPU counts: Pollux's objective, solved, not sampled.

The objective is :class:`~policies.elastic.GeneticElastic`'s (Pollux's power mean of speedups
over the fair share, a running job's change scaled by the restart penalty, the work since its
checkpoint counted). It is a sum of one term per job, so the best counts under the pool's GPUs
are a multiple-choice knapsack: solved exactly by dynamic programming over (job, GPUs used)
when the table is small, and by Lagrangian relaxation (a price per GPU, bisected, each job
then picking its best count alone) with a greedy fill of what the price leaves when it is not.
numpy is imported when an allocation runs (``import policies`` stays light).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING

from policies.elastic.base import ELASTIC, ElasticAllocation, ElasticJob, growth_left

if TYPE_CHECKING:
    import numpy as np
    from numpy.typing import NDArray

CURVES_CACHED = 65_536
"""Speedup curves kept as arrays; the cache is emptied when it holds this many."""
EXACT_CELLS = 400_000
"""Largest ``jobs x (GPUs + 1) x counts`` table solved exactly; larger ones by the price."""
SERVED_SCALE_S = 4 * 3600.0
"""The served weight's scale by default: a job that has run 4 GPU-hours counts 1/sqrt(2)."""


@ELASTIC.register("search")
class SearchElastic(ElasticAllocation):
    """Pollux's allocation objective (Qiao et al., OSDI'21, section 4.2), optimised exactly.

    Admission is every allocator's (floors, then minimums, in order; see the base contract),
    and urgent jobs get the spare GPUs first, as in ``goodput``. The GPUs still left are spread
    over the admitted jobs (``0..hi - admitted`` more each) to maximise the power mean of
    ``s_j``, job ``j``'s goodput over its goodput at the fair share
    ``ceil(gpus / admitted jobs)``, any count but the one a running job holds scaled by
    ``run_s / (run_s + restart_cost_s + lost_s)`` (by default its geometric mean, ``p=0``:
    ``sum(log(s_j + EPSILON))``; with ``p=-1`` the same problem as ``genetic``,
    :meth:`~policies.elastic.GeneticElastic.problem`), so what ``genetic`` buys over
    ``goodput`` is kept (no sticky step: the penalty decides whether moving a running job
    pays; jumps across a dip in a speedup curve).

    How, and why not the genetic search (issue 26, part 4): the genetic search samples the
    problem (50 allocations, 40 generations), which cost ``shared-genetic`` 9-18x ``shared``'s
    decision time. The objective is separable, so its optimum is a multiple-choice knapsack:
    a dynamic program over jobs and GPUs used (``O(jobs x gpus x counts)``, numpy over the
    last two) when that table has at most ``exact_cells`` cells, else the Lagrangian
    relaxation: bisect a price per GPU until each job's own best count under it fits the pool
    (``O(cells within the caps)`` per step), then give what is left greedily to the step with
    the best cost drop per GPU (a jump to any larger count, so dips are crossed). The price's
    answer is optimal for the GPUs it uses; the fill is not always. Deterministic.

    Args:
        p: the fairness exponent, ``< 0`` (``-1``: harmonic mean, Pollux's default and
            ``genetic``'s), ``0`` (the geometric mean: the sum of log speedups, ``goodput``'s
            ``log``; the default) or ``> 0`` (``1``: total goodput). Measured (issue 26, part
            4; bench/scheduler/README.md): on the Pollux workloads ``0`` and ``-1`` are
            within 0.002 of each other (0.878x / 0.920x against 0.877x / 0.922x the published
            Pollux mean JCT, loads 0.5 / 1.0); on the mixed benchmark ``0`` has the lower bulk
            mean JCT (tight deadlines 7,452 s against 7,561 s; default deadlines 6,716 s
            against 6,753 s), the same deadlines met.
        count_lost: count ``lost_s`` in the restart penalty (``False``: the restart alone).
        exact_cells: the largest table solved exactly (``0``: always by the price).
        restart_weight: a factor on ``restart_cost_s + lost_s`` in the restart penalty
            (measured, issue 26 part 5: 0.25-4 change no Pollux figure for the better).
        served_scale_s, served_power: each job's term weighted by ``(1 + served /
            served_scale_s) ** -served_power`` (``ElasticJob.served``: its attained
            GPU-seconds), so the jobs that have run least get more of the spare GPUs: LAS,
            softly, inside the search (the admission's LAS levels order only who is admitted,
            and on the Pollux workloads nearly every job is). ``0``: no weight. By default
            4 GPU-hours and 0.5 (issue 26, part 5: with ``shared``'s ``min_runtime_s`` at
            60 s, 0.896x / 0.856x the published Pollux mean JCT at loads 1.0 / 0.5, against
            0.920x / 0.878x unweighted at 300 s; bench/scheduler/README.md).
    """

    def __init__(
        self,
        p: float = 0.0,
        count_lost: bool = True,
        exact_cells: int = EXACT_CELLS,
        restart_weight: float = 1.0,
        served_scale_s: float = SERVED_SCALE_S,
        served_power: float = 0.5,
    ) -> None:
        if exact_cells < 0:
            raise ValueError(f"exact_cells must be >= 0, got {exact_cells}")
        if restart_weight < 0 or served_scale_s < 0:
            raise ValueError(
                f"restart_weight and served_scale_s must be >= 0, got {restart_weight}, "
                f"{served_scale_s}"
            )
        self.p = p
        self.restart_weight = restart_weight
        self.served_scale_s = served_scale_s
        self.served_power = served_power
        self.reads_served = served_scale_s > 0.0
        self.exact_cells = exact_cells
        self.reads_lost = count_lost  # the base class's flag: lost_s is read when counted
        # speedup tuple's id -> (the tuple, its array); the snapshot builders hand the same
        # tuple every round while a job's curve is unchanged, so most lookups hit
        self._curves: dict[int, tuple[tuple[float, ...], NDArray[np.float64]]] = {}

    def allocate(
        self, jobs: Sequence[ElasticJob], gpus: int, restart_cost_s: float
    ) -> dict[str, int]:
        """See :meth:`ElasticAllocation.allocate`."""
        size: dict[str, int] = {}
        left, open_, fair = growth_left(jobs, gpus, size)
        if left <= 0 or not open_:
            return size
        row, col, cost, caps = self.cells(open_, size, left, fair, restart_cost_s)
        width = int(caps.max()) + 1
        budget = min(left, (width - 1) * len(open_))
        if len(open_) * (budget + 1) * width <= self.exact_cells:
            extra = _exact(_dense(row, col, cost, (len(open_), width)), budget)
        else:  # best_counts' choice, without the dense table: the price reads only the cells
            extra = _priced(_Cells(row, col, cost), budget)
        for j, k in zip(open_, extra.tolist(), strict=True):
            size[j.job_id] += k
        return size

    def costs(
        self,
        jobs: Sequence[ElasticJob],
        size: dict[str, int],
        left: int,
        fair: int,
        restart_cost_s: float,
    ) -> NDArray[np.float64]:
        """``(jobs, counts)``: job ``i``'s term on ``size + k`` GPUs in column ``k``, ``inf``
        beyond its cap (``min(hi - size, left)``): :meth:`cells` as a table."""
        row, k, cost, caps = self.cells(jobs, size, left, fair, restart_cost_s)
        return _dense(row, k, cost, (len(jobs), max(int(caps.max()) + 1, 0)))

    def cells(
        self,
        jobs: Sequence[ElasticJob],
        size: dict[str, int],
        left: int,
        fair: int,
        restart_cost_s: float,
    ) -> tuple[NDArray, NDArray, NDArray[np.float64], NDArray]:
        """The cost table's cells within each job's cap, row after row (``row``, ``k``, the
        cost), and the caps: job ``row``'s term on ``size + k`` GPUs, ``k`` in ``0..cap``.

        Every curve is looked up once in a cache (an array per speedup tuple) and the table is
        gathered from their concatenation in one step: building it row by row from the tuples
        took most of a round's search at a thousand jobs.
        """
        import numpy as np

        from policies.scheduling.pollux_search import EPSILON

        n = len(jobs)
        cache = self._curves
        curves = [
            hit[1]
            if (hit := cache.get(id(j.speedup))) is not None and hit[0] is j.speedup
            else self._cache(j.speedup, j.hi)[1]
            for j in jobs
        ]
        lens = np.fromiter(map(len, curves), np.int64, n)
        have_ = np.fromiter((size[j.job_id] for j in jobs), np.int64, n)
        hi = np.fromiter((j.hi for j in jobs), np.int64, n)
        current_ = np.fromiter((j.current for j in jobs), np.int64, n)
        run = np.fromiter((j.run_s for j in jobs), np.float64, n)
        lost = np.full(n, float(restart_cost_s))
        if self.reads_lost:
            lost += np.fromiter((j.lost_s for j in jobs), np.float64, n)
        if self.restart_weight != 1.0:
            lost *= self.restart_weight
        offsets = np.cumsum(lens) - lens
        flat = np.concatenate(curves)
        caps = np.minimum(hi - have_, left)
        # only the cells within each job's cap, one row after another (most jobs may take one
        # or two more GPUs while a few may take dozens: a full table was mostly ``inf``)
        per = np.maximum(caps + 1, 0)
        row = np.repeat(np.arange(n), per)
        k = np.arange(int(per.sum())) - np.repeat(np.cumsum(per) - per, per)
        # beyond its curve a job runs at its last measured rate (``ElasticJob.rate``)
        at = np.minimum(have_[row] - 1 + k, lens[row] - 1)
        rates = flat[offsets[row] + at]
        fair_rate = flat[offsets + np.minimum(fair, lens) - 1]
        moving = (current_ > 0) & (lost > 0)  # a queued job pays no restart penalty
        penalty = np.ones(n)
        penalty[moving] = run[moving] / (run[moving] + lost[moving])
        held = np.where(current_ > 0, current_ - have_, -1)
        scale = np.where(k == held[row], 1.0, penalty[row])
        s = rates * (scale / np.maximum(fair_rate, 1e-12)[row])
        if self.p == -1.0:  # the default: a division, several times faster than a power
            cost = 1.0 / (s + EPSILON)
        elif self.p < 0:
            cost = (s + EPSILON) ** self.p
        elif self.p == 0:  # the power mean's limit: the geometric mean, as goodput's "log"
            cost = -np.log(s + EPSILON)
        else:
            cost = -(s**self.p)
        if self.reads_served:  # the least served count most (the LAS weight, see the class)
            served = np.fromiter((j.served for j in jobs), np.float64, n)
            weight = (1.0 + served / self.served_scale_s) ** -self.served_power
            cost = cost * weight[row]
        return row, k, cost, caps

    def _cache(
        self, speedup: tuple[float, ...], hi: int
    ) -> tuple[tuple[float, ...], NDArray[np.float64]]:
        """A curve as an array, cached by the speedup tuple's identity (the tuple is kept with
        it, so the identity is not reused while cached); no curve: linear up to ``hi``."""
        import numpy as np

        if not speedup:
            return speedup, np.arange(1, max(hi, 1) + 1, dtype=np.float64)
        if len(self._curves) >= CURVES_CACHED:
            self._curves.clear()
        hit = speedup, np.asarray(speedup, dtype=np.float64)
        self._curves[id(speedup)] = hit
        return hit


def _dense(row: NDArray, k: NDArray, cost: NDArray, shape: tuple[int, int]) -> NDArray:
    """Cells as a table, ``inf`` where there is none."""
    import numpy as np

    out: NDArray[np.float64] = np.full(shape, np.inf)
    out[row, k] = cost
    return out


def best_counts(cost: NDArray[np.float64], gpus: int, exact_cells: int = EXACT_CELLS) -> NDArray:
    """Counts ``k`` (one per row of ``cost``, ``cost[i, k]`` finite) with ``sum(k) <= gpus``
    minimising ``sum(cost[i, k])``: exactly when the table is small, else by the price."""
    jobs, width = cost.shape
    budget = min(gpus, (width - 1) * jobs)
    if jobs * (budget + 1) * width <= exact_cells:
        return _exact(cost, budget)
    return _priced(_Cells.of(cost), budget)


def _exact(cost: NDArray[np.float64], gpus: int) -> NDArray:
    """The dynamic program: ``best[b]``, the least cost of the jobs so far on exactly ``b``
    GPUs; each job's choice per ``b`` is kept to walk back from the best ``b``."""
    import numpy as np

    jobs, width = cost.shape
    used = np.arange(gpus + 1)
    before = used[:, None] - np.arange(width)[None, :]  # GPUs the earlier jobs use
    valid = before >= 0
    before = np.where(valid, before, 0)
    best = np.full(gpus + 1, np.inf)
    best[0] = 0.0
    choice = np.empty((jobs, gpus + 1), dtype=np.int64)
    for i in range(jobs):
        table = np.where(valid, best[before] + cost[i][None, :], np.inf)
        choice[i] = np.argmin(table, axis=1)
        best = table[used, choice[i]]
    out = np.zeros(jobs, dtype=np.int64)
    b = int(np.argmin(best))
    for i in range(jobs - 1, -1, -1):
        out[i] = choice[i, b]
        b -= int(out[i])
    return out


def _priced(table: _Cells, gpus: int, steps: int = 30) -> NDArray:
    """The Lagrangian relaxation: the lowest price per GPU at which every job's own best count
    fits ``gpus`` (bisected), then the GPUs left to the best cost drop per GPU."""
    import numpy as np

    if not table.jobs:
        return np.zeros(0, dtype=np.int64)
    at = table.pick(0.0)  # each row's chosen cell: its least cost
    if int(table.col[at].sum()) <= gpus:
        # no fill: from each row's least cost no step drops the cost (every gain <= 0); most
        # rounds of a 10,000-job simulation end here (3,040 of 4,410 priced)
        least: NDArray = table.col[at].astype(np.int64)
        return least
    # above ``spread`` no job gains from a GPU: every job picks 0 more
    low, high = 0.0, table.spread() + 1.0
    at = table.pick(high)
    for _ in range(steps):
        mid = (low + high) / 2
        trial = table.pick(mid)
        used = int(table.col[trial].sum())
        if used <= gpus:
            high, at = mid, trial
            if used == gpus:  # every GPU priced in: nothing better at a lower price
                break
        else:
            low = mid
    x = table.col[at]
    left = gpus - int(x.sum())
    vals, k, rowid = table.vals, table.k, table.row
    finite = np.isfinite(vals)
    while left > 0:  # the fill: any larger count, best drop per GPU added
        ahead = k - x[rowid]
        ok = (ahead > 0) & (ahead <= left) & finite
        if not ok.any():
            break
        with np.errstate(invalid="ignore"):
            gain = np.where(ok, (vals[at][rowid] - vals) / np.maximum(ahead, 1), -np.inf)
        cell = int(np.argmax(gain))  # the first best in row order, as on the table
        if gain[cell] <= 1e-12:
            break
        row, col = int(rowid[cell]), int(table.col[cell])
        left -= col - int(x[row])
        x[row], at[row] = col, cell
    out: NDArray = x.astype(np.int64)
    return out


class _Cells:
    """The price's view of a cost table: its cells row after row (``row``, column ``col``,
    ``vals``: the cost, ``inf`` for one not finite), each row's column 0 first, the columns
    rising. Every finite cell must be there (others may be): a row's first ``argmin`` of
    ``cost + price * col`` over its cells is then the table's, from the same sums (a cell not
    there is ``inf``; when a row's sums are all ``inf``, both give column 0).

    Why cells, not the table: with GPUs plentiful, the table was a median 292 x 49 with 1,583
    finite cells (10,000 simulated jobs); the price is tried ~9 times a round.
    """

    def __init__(self, row: NDArray, col: NDArray, vals: NDArray[np.float64]) -> None:
        import numpy as np

        self.row, self.col = row, col
        self.vals = np.where(np.isfinite(vals), vals, np.inf)
        self.k = col.astype(np.float64)
        self.starts = np.flatnonzero(col == 0)
        self.jobs = len(self.starts)
        self.cells = np.arange(len(col))

    @classmethod
    def of(cls, cost: NDArray[np.float64]) -> _Cells:
        """A table's finite cells and each row's column 0."""
        import numpy as np

        keep = np.isfinite(cost)
        if cost.shape[1]:
            keep[:, 0] = True
        row, col = np.nonzero(keep)
        return cls(row, col, cost[keep])

    def pick(self, price: float) -> NDArray:
        """Each row's chosen cell (its index in the cells) at ``price`` per GPU."""
        import numpy as np

        # price * col, as ``price * counts`` on the table: the same products and sums
        s = self.vals + price * self.k
        least = np.minimum.reduceat(s, self.starts)
        hit = s == least[self.row]
        if not math.isfinite(price):  # NaN sums (``inf * 0``): argmin takes a row's first NaN
            hit |= np.isnan(s)
        # the first cell at its row's least (each row has one: the cells have no NaN)
        at = np.where(hit, self.cells, len(self.cells))
        out: NDArray = np.minimum.reduceat(at, self.starts)
        return out

    def spread(self) -> float:
        """The largest drop of a row's cost from 0 GPUs to its best: above it, no job gains
        from a GPU."""
        import numpy as np

        least = np.minimum.reduceat(self.vals, self.starts)
        return float(np.max(self.vals[self.starts] - least))
