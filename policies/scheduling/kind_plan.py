"""Bulk GPUs per kind and count together, in a pool of several GPU kinds (issue 40, part 3).

The homogeneous search (:class:`~policies.elastic.SearchElastic`) counts GPUs as if they were
all alike; in a pool of several kinds a GPU of a fast kind is worth several of a slow one, and
worth more to one job than another. Placing its counts kind by kind afterwards (the fastest kind
with room) let the first jobs grow over the fast kind while later ones grew on the slow one,
where Sia (SOSP'23) gives most jobs a few fast GPUs: on Sia's philly workload 1, `shared` held
831 GPU-hours for a mean JCT of 0.69 h where Sia held 627 for 0.54 h (bench/scheduler/sia).

Here each admitted job chooses a kind and a count at once, under the same objective as the
search (one term per job: the power mean of its goodput over its fair share, a change of a
running job's kind or count scaled by the restart penalty, its term weighted by attained
service; the penalty as the search's for a change at the same rate, and for a faster one the
time its work left, as long again as it has run, takes after the restart: a job a minute old
does not move to a kind 4x as fast for a 90 s restart, where Pollux's ``run / (run + lost)``
would move it), with the job's speed on each kind (``speed_on``: its own measurement per kind, else
the kind's) multiplying its speedup curve. Each kind holds what its GPUs hold, so the
single-resource knapsack becomes one with a resource per kind: solved by Lagrangian relaxation
with a price per kind (each price bisected in turn until its kind's demand fits, a few sweeps),
then repaired (a kind still over: the change that frees its GPUs at the least cost per GPU, to a
smaller count or a kind with room) and filled (a kind's spare GPUs to the best cost drop per
GPU). No library solves this: Sia's integer programme (HiGHS in the bench's port) costs tens of
milliseconds a round at the artifact's sizes and grows with the jobs; a price per kind is the
search's own method, one price per kind.

Admission is the search's (:func:`~policies.elastic.base.growth_left`: floors, then minimums,
then urgent jobs); a job whose minimum no kind can hold gets nothing. A job kept by the
admission (young, say) keeps at least its GPUs, on any kind where the gain pays the restart; a
run with no step yet, one shrunk for an interactive job this round and a tuning gang stay on
their kind. A running job's restart is the longer of the pool's and its own start-up (its first
step less its start, as measured).
"""

from __future__ import annotations

import math
from collections.abc import Collection, Mapping, Sequence
from typing import TYPE_CHECKING

from policies.elastic.base import ElasticJob, growth_left
from policies.snapshot import RunningJob

if TYPE_CHECKING:
    from numpy.typing import NDArray

    from policies.elastic.search import SearchElastic
    from policies.snapshot import QueuedJob, Snapshot

__all__ = ["plan_kinds", "stuck_moves"]

EXACT_CELLS = 20_000_000
"""Largest dynamic programme (GPUs used per kind, every combination, times the cells) solved
exactly: Sia's clusters (64 GPUs of 3 kinds, 10,625 states) with up to about 2,000 cells."""
SKIP = 1e6
"""The exact programme's cost of leaving an admitted job out (only when no kind holds it)."""
SWEEPS = 4
"""Rounds of the per-kind price bisection (each kind in turn)."""
STEPS = 24
"""Bisection steps per kind and sweep."""


def plan_kinds(
    jobs: Sequence[ElasticJob],
    of: Mapping[str, QueuedJob | RunningJob],
    node_caps: Mapping[str, int],
    restart_cost_s: float,
    snapshot: Snapshot,
    search: SearchElastic,
    fixed: Collection[str] = (),
    exact_cells: int = EXACT_CELLS,
) -> tuple[dict[str, int], dict[str, str]]:
    """GPUs per job (0: none) and the kind each admitted job runs on (a job left as it is, on
    nodes the pool no longer has or across kinds, has its GPUs and no kind).

    Args:
        jobs: the bulk jobs in admission order (as ``ElasticAllocation.allocate`` takes them).
        of: each job id's snapshot job (its kinds, speeds and the nodes it holds).
        node_caps: GPUs per node the bulk jobs may hold (free, or held by a bulk job).
        restart_cost_s: what a restart costs (the penalty's).
        snapshot: the round's snapshot (kind speeds and order).
        search: the objective's parameters (``p``, the served weight, ``count_lost``).
        fixed: jobs that stay on their kind whatever it costs (besides those the admission
            keeps, and tuning gangs: their trials measure the kind they got).
        exact_cells: the largest ``states x cells`` solved exactly (``states``: every count
            of used GPUs per kind); larger problems by the prices.
    """
    import numpy as np

    from policies.eligibility import kind_order
    from policies.scheduling.pollux_search import EPSILON

    kind_of = snapshot.kind_of
    caps: dict[str, int] = {}
    for n, c in node_caps.items():
        k = kind_of(n)
        caps[k] = caps.get(k, 0) + c
    size: dict[str, int] = {}
    growth_left(jobs, sum(caps.values()), size)
    growable = {j.job_id for j in jobs if 0 < size[j.job_id] < j.hi and not j.urgent}
    kinds = [k for k in snapshot.kinds if caps.get(k, 0) > 0]
    kidx = {k: i for i, k in enumerate(kinds)}
    cap = np.array([caps[k] for k in kinds], dtype=np.int64)
    speeds = snapshot.kinds
    fair = math.ceil(sum(caps.values()) / max(1, sum(1 for v in size.values() if v)))
    out = dict.fromkeys(size, 0)
    rows: list[ElasticJob] = []
    r_, k_, n_, c_ = [], [], [], []
    for j in jobs:
        lo = size.get(j.job_id, 0)
        if lo <= 0:
            continue
        job = of[j.job_id]
        here = None
        if isinstance(job, RunningJob) and job.nodes:
            on = {kind_of(n) for n in job.nodes}
            if len(on) != 1 or not on <= speeds.keys():  # across kinds, or off the pool
                out[j.job_id] = j.current
                continue
            here = on.pop()
        hi = j.hi if j.job_id in growable else lo
        stays = isinstance(job, RunningJob) and (
            job.tuning or j.job_id in fixed or not job.stepped(snapshot.now)
        )
        allowed = (
            ((here,) if here in kidx else ())
            if stays
            else tuple(k for k in kind_order(snapshot, job) if k in kidx)
        )
        barred = snapshot.barred(job)
        limit = (
            {
                k: sum(c for n, c in node_caps.items() if kind_of(n) == k and n not in barred)
                for k in allowed
            }
            if barred
            else caps
        )
        best = max((job.speed_on(k, speeds[k]) for k in allowed), default=0.0)
        fair_rate = max(best * j.rate(min(fair, max(hi, 1))), 1e-12)
        served_w = (
            (1.0 + j.served / search.served_scale_s) ** -search.served_power
            if search.reads_served
            else 1.0
        )
        lost = max(restart_cost_s, _startup(job)) + (j.lost_s if search.reads_lost else 0.0)
        lost *= search.restart_weight
        # a change's penalty: the work it has left (as long again as its run so far, Pollux's
        # horizon) done at the cell's rate after the restart, against the time it would take
        # where it is: ``run / (run + lost)`` for a change at the same rate (the search's)
        moving = bool(j.current) and lost > 0
        horizon = j.run_s * (job.speed_on(here, speeds[here]) if here else 1.0) * j.rate(j.current)
        ri = len(rows)
        for k in allowed:
            speed = job.speed_on(k, speeds[k])
            for cnt in range(lo, min(hi, limit[k]) + 1):
                rate = speed * j.rate(cnt)
                s = rate / fair_rate
                if moving and not (k == here and cnt == j.current):
                    s *= horizon / (horizon + lost * rate) if horizon > 0 else 0.0
                r_.append(ri)
                k_.append(kidx[k])
                n_.append(cnt)
                c_.append(_cost(s + EPSILON, search.p) * served_w)
        if len(r_) and r_[-1] == ri:
            rows.append(j)
    chosen_kind: dict[str, str] = {}
    if not rows:
        return out, chosen_kind
    row = np.array(r_, dtype=np.int64)
    kk = np.array(k_, dtype=np.int64)
    nn = np.array(n_, dtype=np.int64)
    cost = np.array(c_, dtype=np.float64)
    states = int(np.prod(cap + 1))
    if states * len(cost) <= exact_cells:
        at = _exact(row, kk, nn, cost, cap, len(rows))
    else:
        at = _priced(row, kk, nn, cost, cap, len(rows))
        at = _repair(row, kk, nn, cost, cap, at)
        at = _fill(row, kk, nn, cost, cap, at)
        at = _improve(row, kk, nn, cost, cap, at)
    for i, j in enumerate(rows):
        cell = at[i]
        if cell >= 0:
            out[j.job_id] = int(nn[cell])
            chosen_kind[j.job_id] = kinds[int(kk[cell])]
    return out, chosen_kind


def stuck_moves(
    sizes: Mapping[str, int],
    kinds: Mapping[str, str],
    held: Mapping[str, tuple[str, int]],
    free: Mapping[str, int],
) -> set[str]:
    """The running jobs a plan moves to another kind that cannot get there: the round applies
    shrinks and preemptions, then moves one after another (each frees what it held), in
    passes while any fits, before grows and starts; a move that never fits (a swap of two
    jobs' kinds, or a chain that ends in one) is stuck. By each kind's GPUs, not nodes.

    Args:
        sizes, kinds: the plan.
        held: each running bulk job's kind and GPUs now.
        free: free GPUs per kind before the bulk jobs' changes.
    """
    room = dict(free)
    pending: list[tuple[str, str, int, str, int]] = []
    for job_id, (here, gpus) in held.items():
        size, there = sizes.get(job_id, 0), kinds.get(job_id)
        if size <= 0:  # preempted: frees its GPUs
            room[here] = room.get(here, 0) + gpus
        elif there is None or there == here:
            if size < gpus:  # a shrink where it is
                room[here] = room.get(here, 0) + gpus - size
        else:
            pending.append((job_id, here, gpus, there, size))
    while pending:
        stuck = []
        for job_id, here, gpus, there, size in pending:
            if room.get(there, 0) >= size:
                room[there] -= size
                room[here] = room.get(here, 0) + gpus
            else:
                stuck.append((job_id, here, gpus, there, size))
        if len(stuck) == len(pending):
            return {m[0] for m in stuck}
        pending = stuck
    return set()


def _startup(job: QueuedJob | RunningJob) -> float:
    """What the job's current run took from its start to its first step (0: queued, or no
    step yet): its own restart cost, measured, where the pool's is a guess for every job."""
    if isinstance(job, RunningJob) and job.first_step_at is not None:
        return max(0.0, job.first_step_at - job.started_at)
    return 0.0


def _cost(s: float, p: float) -> float:
    """The search's term for a normalised goodput ``s`` (lower is better)."""
    if p == 0:
        return -math.log(s)
    if p < 0:
        return float(s**p)
    return -float(s**p)


def _exact(
    row: NDArray, kk: NDArray, nn: NDArray, cost: NDArray, cap: NDArray, jobs: int
) -> NDArray:
    """The dynamic programme over every count of used GPUs per kind: ``best[u]``, the least
    cost of the jobs so far using exactly ``u[k]`` GPUs of each kind; each job's choice per
    state kept to walk back from the best. A job no state can hold is left out (``SKIP``)."""
    import numpy as np

    shape = tuple(int(c) + 1 for c in cap)
    best = np.full(shape, np.inf)
    best[(0,) * len(shape)] = 0.0
    choices = []
    starts = np.searchsorted(row, np.arange(jobs + 1))
    for i in range(jobs):
        new = best + SKIP
        choice = np.full(shape, -1, dtype=np.int64)
        for cell in range(int(starts[i]), int(starts[i + 1])):
            k, n = int(kk[cell]), int(nn[cell])
            if n >= shape[k]:
                continue
            src = [slice(None)] * len(shape)
            dst = [slice(None)] * len(shape)
            src[k] = slice(0, shape[k] - n)
            dst[k] = slice(n, shape[k])
            cand = best[tuple(src)] + cost[cell]
            view = new[tuple(dst)]
            better = cand < view
            view[better] = cand[better]
            choice[tuple(dst)][better] = cell
        best = new
        choices.append(choice)
    state = list(np.unravel_index(int(np.argmin(best)), shape))
    at = np.full(jobs, -1, dtype=np.int64)
    for i in range(jobs - 1, -1, -1):
        cell = int(choices[i][tuple(state)])
        if cell >= 0:
            at[i] = cell
            state[int(kk[cell])] -= int(nn[cell])
    return at


def _pick(
    row: NDArray, kk: NDArray, nn: NDArray, cost: NDArray, price: NDArray, jobs: int
) -> NDArray:
    """Each job's cell of least ``cost + price[kind] * count`` (its first, in cell order; a
    job's cells are contiguous, in row order)."""
    import numpy as np

    s = cost + price[kk] * nn
    starts = np.flatnonzero(np.r_[True, row[1:] != row[:-1]])
    least = np.minimum.reduceat(s, starts)
    at = np.where(s == least[row], np.arange(len(s)), len(s))
    out: NDArray = np.minimum.reduceat(at, starts)
    return out


def _demand(kk: NDArray, nn: NDArray, at: NDArray, kinds: int) -> NDArray:
    """GPUs per kind the chosen cells take."""
    import numpy as np

    taken = at[at >= 0]
    return np.bincount(kk[taken], weights=nn[taken], minlength=kinds).astype(np.int64)


def _priced(
    row: NDArray, kk: NDArray, nn: NDArray, cost: NDArray, cap: NDArray, jobs: int
) -> NDArray:
    """A price per kind, each bisected in turn to the lowest at which its kind's demand fits,
    for a few sweeps; the cells chosen at the last prices."""
    import numpy as np

    kinds = len(cap)
    price = np.zeros(kinds)
    at = _pick(row, kk, nn, cost, price, jobs)
    if (_demand(kk, nn, at, kinds) <= cap).all():
        return at
    spread = float(np.ptp(cost[np.isfinite(cost)])) + 1.0 if len(cost) else 1.0
    for _ in range(SWEEPS):
        for k in range(kinds):
            if _demand(kk, nn, at, kinds)[k] <= cap[k] and price[k] == 0.0:
                continue
            low, high = 0.0, spread
            for _ in range(STEPS):
                mid = (low + high) / 2
                price[k] = mid
                trial = _pick(row, kk, nn, cost, price, jobs)
                if _demand(kk, nn, trial, kinds)[k] <= cap[k]:
                    high = mid
                else:
                    low = mid
            price[k] = high
            at = _pick(row, kk, nn, cost, price, jobs)
        if (_demand(kk, nn, at, kinds) <= cap).all():
            break
    return at


def _repair(
    row: NDArray, kk: NDArray, nn: NDArray, cost: NDArray, cap: NDArray, at: NDArray
) -> NDArray:
    """While a kind holds more than its GPUs: the change that frees its GPUs at the least cost
    per GPU freed (a smaller count there, or a kind with room); none left: the job whose
    leaving costs least gets nothing."""
    import numpy as np

    kinds = len(cap)
    while True:
        demand = _demand(kk, nn, at, kinds)
        over = demand - cap
        if (over <= 0).all():
            return at
        k = int(np.argmax(over))
        cur = np.where(at[row] >= 0, at[row], 0)
        on_k = (at[row] >= 0) & (kk[cur] == k)
        room = cap - demand
        same = kk == k
        freed = np.where(same, nn[cur] - nn, nn[cur])
        fits = np.where(same, True, nn <= room[kk])
        ok = on_k & fits & (freed > 0)
        if ok.any():
            with np.errstate(invalid="ignore", divide="ignore"):
                score = np.where(ok, (cost - cost[cur]) / np.maximum(freed, 1), np.inf)
            cell = int(np.argmin(score))
            at[row[cell]] = cell
            continue
        # nothing frees GPUs of this kind but leaving it: the job that costs least to drop
        jobs_on = np.flatnonzero((at >= 0) & (kk[np.maximum(at, 0)] == k))
        drop = jobs_on[np.argmin(-cost[at[jobs_on]])]
        at[drop] = -1


def _fill(
    row: NDArray, kk: NDArray, nn: NDArray, cost: NDArray, cap: NDArray, at: NDArray
) -> NDArray:
    """Each kind's spare GPUs to the best cost drop per GPU added (a larger count on the same
    kind, a jump across a dip included)."""
    import numpy as np

    kinds = len(cap)
    while True:
        room = cap - _demand(kk, nn, at, kinds)
        if (room <= 0).all():
            return at
        placed = at[row] >= 0
        cur = np.where(placed, at[row], 0)
        ahead = nn - nn[cur]
        ok = placed & (kk == kk[cur]) & (ahead > 0) & (ahead <= room[kk])
        if not ok.any():
            return at
        with np.errstate(invalid="ignore"):
            gain = np.where(ok, (cost[cur] - cost) / np.maximum(ahead, 1), -np.inf)
        cell = int(np.argmax(gain))
        if gain[cell] <= 1e-12:
            return at
        at[row[cell]] = cell


def _improve(
    row: NDArray, kk: NDArray, nn: NDArray, cost: NDArray, cap: NDArray, at: NDArray
) -> NDArray:
    """Each job's best cell with the others' fixed, where it fits what they leave (a job left
    out by the repair first), for a few passes: the price jumps across a gap (a job going from
    three GPUs of a fast kind to three of a slow one where two of the fast kind were best)."""
    import numpy as np

    kinds = len(cap)
    for _ in range(3):
        demand = _demand(kk, nn, at, kinds)
        placed = at >= 0
        cur = np.where(placed, at, 0)
        own_k = np.where(placed, kk[cur], -1)
        own_n = np.where(placed, nn[cur], 0)
        room = cap[kk] - demand[kk] + np.where(own_k[row] == kk, own_n[row], 0)
        now = np.where(placed, cost[cur], np.inf)
        better = (nn <= room) & (cost < now[row] - 1e-12)
        if not better.any():
            return at
        cells = np.flatnonzero(better)
        gain = np.where(np.isinf(now[row[cells]]), np.inf, now[row[cells]] - cost[cells])
        changed = False
        used = demand.tolist()
        done: set[int] = set()
        for cell in cells[np.lexsort((cost[cells], -gain))].tolist():
            i, k, n = int(row[cell]), int(kk[cell]), int(nn[cell])
            if i in done:
                continue
            give = int(own_n[i]) if int(own_k[i]) == k else 0
            if used[k] - give + n > cap[k]:
                continue
            if own_k[i] >= 0:
                used[int(own_k[i])] -= int(own_n[i])
            used[k] += n
            at[i] = cell
            done.add(i)
            changed = True
        if not changed:
            return at
    return at
