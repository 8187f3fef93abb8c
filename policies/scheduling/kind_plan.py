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
single-resource knapsack becomes one with a resource per kind, solved exactly by a dynamic
programme over the GPUs used of each kind (every combination: 10,625 states on Sia's 64-GPU
cluster of three kinds; about 20 ms a round there). A larger programme (a pool of thousands of
GPUs) is not solved here: :func:`plan_kinds` says so, and ``shared`` places the homogeneous
search's counts kind by kind and moves jobs to faster kinds with room
(:mod:`~policies.scheduling.kind_moves`), as before. A price per kind (Lagrangian, as the
search's own large tables) was tried: 88% of small problems optimal, the worst 0.72x the best,
and 200 ms a round at 1,000 queued jobs on 2,000 GPUs (the homogeneous round: about 40 ms), so
it is not shipped. No library solves this: Sia's integer programme (HiGHS in the bench's port)
is the same problem, at tens of milliseconds a round at the artifact's sizes.

Admission is the search's (:func:`~policies.elastic.base.growth_left`: floors, then minimums,
then urgent jobs); a job whose minimum no kind can hold gets nothing. A job kept by the
admission (young, say) keeps at least its GPUs, on any kind where the gain pays the restart. A
run with no step yet, one shrunk for an interactive job this round, a tuning gang and a job
across kinds (or on a node gone from the pool) stay exactly as they are, their GPUs out of what
the programme shares, so no job before them in admission order takes them. When a kind cannot
hold every job that may only use it, the latest in admission order is left out, and the rest
are planned again without it. A running job's restart is the longer of the pool's and its own
start-up (its first step less its start, as measured).
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Collection, Mapping, Sequence
from typing import TYPE_CHECKING

from policies.elastic.base import ElasticJob, growth_left
from policies.snapshot import RunningJob

if TYPE_CHECKING:
    from numpy.typing import NDArray

    from policies.elastic.search import SearchElastic
    from policies.snapshot import QueuedJob, Snapshot

__all__ = ["plan_kinds", "plan_round", "stuck_moves"]

EXACT_CELLS = 60_000_000
"""Largest dynamic programme solved (every combination of GPUs used per kind, times the cells
bounded as :func:`plan_kinds` bounds them): Sia's cluster (64 GPUs of 3 kinds, 10,625 states)
with up to about 5,600 cells, 88 jobs that may each grow to any count of any kind; at most
about 0.2 s of numpy a round on this VM."""
MAX_STATES = 50_000
"""Most combinations of GPUs used per kind (memory: a small int per state per admitted job,
and admitted jobs are at most the GPUs): Sia's cluster has 10,625, two kinds of 200 GPUs
40,401."""
SKIP = 1e6
"""The exact programme's cost of leaving out the last admitted job (only when its kinds cannot
hold it); each job before it costs twice the one after (``2**900`` at most): a kind too full
for every job it may take leaves out the latest in admission order (LAS, then submission), as
admission does, never an earlier one to fit later ones."""


def plan_round(
    snapshot: Snapshot,
    free: Mapping[str, int],
    hold: Mapping[str, Sequence[str]],
    of: Mapping[str, QueuedJob | RunningJob],
    jobs: Sequence[ElasticJob],
    late_jobs: Sequence[ElasticJob],
    search: SearchElastic,
    touched: Collection[str] = (),
) -> tuple[dict[str, int], dict[str, str]] | None:
    """A ``shared`` round's plan: GPUs and kind per bulk job (:func:`plan_kinds`), each kind
    holding its free GPUs once interactive jobs have theirs and what bulk jobs hold there;
    ``None`` for a pool too large (declined before anything is built: this runs every round).

    A move no order of moves can make (two jobs swapping kinds, :func:`stuck_moves`) would
    hold GPUs the plan gave others: the round is planned again with those jobs kept on their
    kind, until none is stuck (the kept set only grows). Late jobs (preempted recently) are
    planned last, on what the others leave, kind by kind.

    Args:
        snapshot: the round's snapshot.
        free: free GPUs per node once interactive jobs have theirs.
        hold: the GPUs each running job holds now.
        of: each bulk job id's snapshot job.
        jobs, late_jobs: the bulk jobs in admission order, and the late ones.
        search: the objective's parameters.
        touched: jobs shrunk for an interactive job this round (they stay as they are).
    """
    if math.prod(g + 1 for g in snapshot.kind_gpus.values()) > MAX_STATES:
        return None
    kind_of = snapshot.kind_of
    caps: Counter[str] = Counter({n: f for n, f in free.items() if f > 0})
    held: dict[str, tuple[str, int]] = {}
    for job_id, job in of.items():
        h = hold.get(job_id, ()) if isinstance(job, RunningJob) else ()
        caps.update(n for n in h if n in snapshot.kind_map)
        if h:
            held[job_id] = (kind_of(h[0]), len(h))
    by_kind: Counter[str] = Counter()
    for n, f in free.items():
        by_kind[kind_of(n)] += f
    restart = snapshot.restart_cost_s
    fixed = set(touched)
    while True:
        plan = plan_kinds(jobs, of, caps, restart, snapshot, search, fixed)
        if plan is None:
            return None
        sizes, kinds = plan
        stuck = stuck_moves(sizes, kinds, held, by_kind)
        if not stuck:
            break
        fixed |= stuck
    if late_jobs:
        for job_id, got in sizes.items():
            if got and job_id in kinds:
                _take(caps, snapshot.kind_nodes[kinds[job_id]], got)
            elif got:  # left as it is, across kinds: the GPUs it holds
                caps.subtract(n for n in hold.get(job_id, ()) if caps[n] > 0)
        late = plan_kinds(late_jobs, of, caps, restart, snapshot, search)
        if late is None:
            return None
        sizes.update(late[0])
        kinds.update(late[1])
    return sizes, kinds


def _take(caps: Counter[str], nodes: Sequence[str], gpus: int) -> None:
    """``gpus`` GPUs out of ``caps`` on ``nodes``, in order (what a kind's planned jobs take
    before the late jobs' plan)."""
    for n in nodes:
        got = min(caps[n], gpus)
        caps[n] -= got
        gpus -= got
        if gpus <= 0:
            return


def plan_kinds(
    jobs: Sequence[ElasticJob],
    of: Mapping[str, QueuedJob | RunningJob],
    node_caps: Mapping[str, int],
    restart_cost_s: float,
    snapshot: Snapshot,
    search: SearchElastic,
    fixed: Collection[str] = (),
    exact_cells: int = EXACT_CELLS,
) -> tuple[dict[str, int], dict[str, str]] | None:
    """GPUs per job (0: none) and the kind each admitted job runs on (a job left as it is, on
    nodes the pool no longer has or across kinds, has its GPUs and no kind); ``None`` when the
    programme would be larger than ``exact_cells``.

    Args:
        jobs: the bulk jobs in admission order (as ``ElasticAllocation.allocate`` takes them).
        of: each job id's snapshot job (its kinds, speeds and the nodes it holds).
        node_caps: GPUs per node the bulk jobs may hold (free, or held by a bulk job).
        restart_cost_s: what a restart costs (the penalty's).
        snapshot: the round's snapshot (kind speeds and order).
        search: the objective's parameters (``p``, the served weight, ``count_lost``).
        fixed: jobs that stay on their kind whatever it costs (besides those the admission
            keeps, and tuning gangs: their trials measure the kind they got).
        exact_cells: the largest ``states x cells`` solved (``states``: every count of used
            GPUs per kind).
    """
    import numpy as np

    from policies.eligibility import kind_order

    kind_of = snapshot.kind_of
    node_caps = dict(node_caps)
    size: dict[str, int] = {}
    growth_left(jobs, sum(node_caps.values()), size)
    out, chosen_kind, pinned = _pin(jobs, of, size, node_caps, snapshot, fixed)
    caps: dict[str, int] = {}
    for n, c in node_caps.items():
        k = kind_of(n)
        caps[k] = caps.get(k, 0) + c
    growable = {j.job_id for j in jobs if 0 < size[j.job_id] < j.hi and not j.urgent}
    kinds = [k for k in snapshot.kinds if caps.get(k, 0) > 0]
    kidx = {k: i for i, k in enumerate(kinds)}
    # the programme's size, bounded before any cell is built: every count of each kind's GPUs
    # used, times each admitted job's cells (a count per kind from its minimum)
    states = math.prod(caps[k] + 1 for k in kinds)
    most = max(caps.values(), default=0)
    cells = sum(
        len(kinds) * max(0, min(j.hi if j.job_id in growable else least, most) - least + 1)
        for j in jobs
        if (least := size[j.job_id]) > 0 and j.job_id not in pinned
    )
    if states > MAX_STATES or states * cells > exact_cells:
        return None
    fair = math.ceil(sum(node_caps.values()) / max(1, sum(1 for v in size.values() if v)))
    rows: list[ElasticJob] = []
    r_: list[int] = []
    k_: list[int] = []
    n_: list[int] = []
    c_: list[float] = []
    for j in jobs:
        lo = size.get(j.job_id, 0)
        if lo <= 0 or j.job_id in pinned:
            continue
        job = of[j.job_id]
        hi = j.hi if j.job_id in growable else lo
        allowed = tuple(k for k in kind_order(snapshot, job) if k in kidx)
        barred = snapshot.barred(job)
        limit = (
            {
                k: sum(c for n, c in node_caps.items() if kind_of(n) == k and n not in barred)
                for k in allowed
            }
            if barred
            else caps
        )
        options = [(k, cnt) for k in allowed for cnt in range(lo, min(hi, limit[k]) + 1)]
        if not options:
            continue
        costs = _job_costs(j, job, options, min(fair, max(hi, 1)), restart_cost_s, snapshot, search)
        r_.extend([len(rows)] * len(options))
        k_.extend(kidx[k] for k, _ in options)
        n_.extend(cnt for _, cnt in options)
        c_.extend(costs)
        rows.append(j)
    if not rows:
        return out, chosen_kind
    nn = np.array(n_, dtype=np.int64)
    kk = np.array(k_, dtype=np.int64)
    cap = np.array([caps[k] for k in kinds], dtype=np.int64)
    at = _solve(np.array(r_, dtype=np.int64), kk, nn, np.array(c_), cap, len(rows))
    for i, j in enumerate(rows):
        cell = at[i]
        if cell >= 0:
            out[j.job_id] = int(nn[cell])
            chosen_kind[j.job_id] = kinds[int(kk[cell])]
    return out, chosen_kind


def _pin(
    jobs: Sequence[ElasticJob],
    of: Mapping[str, QueuedJob | RunningJob],
    size: Mapping[str, int],
    node_caps: dict[str, int],
    snapshot: Snapshot,
    fixed: Collection[str],
) -> tuple[dict[str, int], dict[str, str], set[str]]:
    """Every job's GPUs to start from (0), and the admitted running jobs that stay exactly as
    they are: across kinds or on nodes gone from the pool (no kind), or on their kind with no
    step yet, shrunk for an interactive job, a tuning gang, or ``fixed``. Their GPUs are taken
    out of ``node_caps`` (what the programme shares). Returns sizes, kinds and those jobs."""
    kind_of = snapshot.kind_of
    out = dict.fromkeys(size, 0)
    chosen_kind: dict[str, str] = {}
    pinned: set[str] = set()
    for j in jobs:
        job = of[j.job_id]
        if size[j.job_id] <= 0 or not isinstance(job, RunningJob) or not job.nodes:
            continue
        on = {kind_of(n) for n in job.nodes}
        alone = len(on) != 1 or not on <= snapshot.kinds.keys()
        if alone or job.tuning or j.job_id in fixed or not job.stepped(snapshot.now):
            pinned.add(j.job_id)
            out[j.job_id] = j.current
            if not alone:
                chosen_kind[j.job_id] = on.pop()
            for n in job.nodes:
                if node_caps.get(n, 0) > 0:
                    node_caps[n] -= 1
    return out, chosen_kind, pinned


def _job_costs(
    j: ElasticJob,
    job: QueuedJob | RunningJob,
    options: list[tuple[str, int]],
    at_fair: int,
    restart_cost_s: float,
    snapshot: Snapshot,
    search: SearchElastic,
) -> list[float]:
    """The objective's term for one job on each ``(kind, count)`` option: the search's, its
    goodput (speed per GPU there times its speedup curve) over its best on ``at_fair`` GPUs,
    a change of a running job's kind or count scaled by the restart penalty, weighted by what
    it has attained."""
    from policies.scheduling.pollux_search import EPSILON

    speeds = snapshot.kinds
    here = snapshot.kind_of(job.nodes[0]) if isinstance(job, RunningJob) and job.nodes else None
    best = max(job.speed_on(k, speeds[k]) for k, _ in options)
    fair_rate = max(best * j.rate(at_fair), 1e-12)
    served_w = (
        (1.0 + j.served / search.served_scale_s) ** -search.served_power
        if search.reads_served
        else 1.0
    )
    lost = max(restart_cost_s, _startup(job)) + (j.lost_s if search.reads_lost else 0.0)
    lost *= search.restart_weight
    # a change's penalty: the work it has left (as long again as its run so far, Pollux's
    # horizon) done at the option's rate after the restart, against the time it would take
    # where it is: ``run / (run + lost)`` for a change at the same rate (the search's)
    moving = bool(j.current) and lost > 0
    horizon = j.run_s * (job.speed_on(here, speeds[here]) if here else 1.0) * j.rate(j.current)
    costs = []
    for k, cnt in options:
        rate = job.speed_on(k, speeds[k]) * j.rate(cnt)
        s = rate / fair_rate
        if moving and not (k == here and cnt == j.current):
            s *= horizon / (horizon + lost * rate) if horizon > 0 else 0.0
        costs.append(_cost(s + EPSILON, search.p) * served_w)
    return costs


def _solve(
    row: NDArray, kk: NDArray, nn: NDArray, cost: NDArray, cap: NDArray, jobs: int
) -> NDArray:
    """Each job's cell by the exact programme; when some are left out, the others planned
    again without them (the cost of leaving one out dwarfs the rest, which its rounding would
    otherwise lose)."""
    import numpy as np

    at = _exact(row, kk, nn, cost, cap, jobs)
    if not (at < 0).any():
        return at
    keep = at[row] >= 0
    ids = np.cumsum(at >= 0) - 1
    kept = np.flatnonzero(at >= 0)
    again = _exact(ids[row[keep]], kk[keep], nn[keep], cost[keep], cap, len(kept))
    kept_cells = np.flatnonzero(keep)
    out: NDArray = np.full(jobs, -1, dtype=np.int64)
    out[kept] = np.where(again >= 0, kept_cells[np.maximum(again, 0)], -1)
    return out


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
    state kept to walk back from the best. A job no state can hold is left out (``SKIP``, more
    for an earlier job)."""
    import numpy as np

    shape = tuple(int(c) + 1 for c in cap)
    best = np.full(shape, np.inf)
    best[(0,) * len(shape)] = 0.0
    choices = []
    starts = np.searchsorted(row, np.arange(jobs + 1))
    index = np.int16 if len(cost) < 2**15 else np.int32  # a cell per state and job, kept
    for i in range(jobs):
        new = best + SKIP * 2.0 ** min(jobs - 1 - i, 900)
        choice = np.full(shape, -1, dtype=index)
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
