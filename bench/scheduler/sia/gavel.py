"""Gavel's heterogeneity-aware policy as Sia's artifact runs it, on the project's simulator.

Gavel (Narayanan et al., OSDI'20) is the heterogeneity-aware baseline of Sia's Table 3
("Gavel+TJ": each job rigid at the GPU count and batch its workload row names). This is the
artifact's `sia-simulator/gavel.py` with its default `max_sum_throughput_perf` policy
(`policies/max_sum_throughput.py`), re-derived for the project's simulator so that the
simulator can first reproduce a published figure on Sia's cluster (issue 40, item 4):

1. Each round (360 s) every active job's throughput on each kind is its optimizer steps per
   second at its GPU count packed on whole nodes of that kind, over its calibration slowdown
   (`snapshot.speedup` times `kind_speed`, which the benchmark fills from
   `FixedBatchKindModel.iteration_rate`); 0.1 on a kind with fewer GPUs than it needs.
2. A linear programme gives each job a share of time on each kind: maximise the sum of
   throughput x share, each job's shares summing to at most 1 and each kind's GPUs x shares
   to at most its GPUs (the artifact solves it with ECOS and rounds to 5 decimals).
3. A job's priority on a kind is its share over the fraction of the kind's time it has had
   (each job starts with half a round on every kind); jobs are taken by priority, highest
   first, while their GPU count fits what is left of a kind.
4. GPUs are assigned per kind, largest jobs first; a job that ran on the kind keeps its GPUs
   where none is taken yet, the others take the lowest free GPUs node by node.

Why this is not in ``policies/``: Gavel keeps time received per job and kind between rounds
(its round bookkeeping), which no snapshot carries; the project's policies keep no state. It
is a reproduction baseline, run only by ``ours.py --policies gavel``.

The linear programme is solved with scipy's HiGHS. Its optimum is often not unique: many jobs
of a workload are identical (the same application, GPU count and batch), and ECOS, an interior
point method, returns the symmetric optimum (equal shares for identical jobs) where a simplex
returns a vertex (one gets all). Identical jobs are therefore solved as one class whose share is
split equally, which is ECOS's answer without its solver.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

import numpy as np
from scipy.optimize import linprog

from policies.decisions import Decision, DecisionKind
from policies.scheduling.base import SchedulingPolicy
from policies.snapshot import QueuedJob, RunningJob, Snapshot

__all__ = ["GavelPolicy"]

Worker = tuple[str, int]  # (node id, GPU slot on it)
TOO_BIG_RATE = 0.1  # gavel.py predict_throughput: a job larger than a kind's GPUs


@dataclass
class GavelPolicy(SchedulingPolicy):
    """Gavel's max-sum-throughput policy, time-shared in rounds (see the module docstring).

    Args:
        interval_s: the round length (the simulator's ``interval_s``; the artifact's 360 s).
    """

    interval_s: float = 360.0
    job_time: dict[str, dict[str, float]] = field(default_factory=dict)
    kind_time: dict[str, float] = field(default_factory=dict)
    workers: dict[str, tuple[Worker, ...]] = field(default_factory=dict)

    def decide(self, snapshot: Snapshot) -> list[Decision]:
        """Round: shares, priorities, selection, assignment (see the module docstring)."""
        jobs: list[QueuedJob | RunningJob] = sorted(
            (*snapshot.queue, *snapshot.running), key=lambda j: j.seq
        )
        if not jobs:
            return []
        servers = _servers(snapshot)
        kinds = list(servers)
        size = {k: sum(len(s) for s in servers[k]) for k in kinds}
        for job in jobs:
            if job.job_id not in self.job_time:
                self.job_time[job.job_id] = {k: self.interval_s / 2 for k in kinds}
                for k in kinds:
                    self.kind_time[k] = self.kind_time.get(k, 0.0) + self.interval_s / 2
        rates = [[_rate(job, k, size[k]) for k in sorted(kinds)] for job in jobs]
        shares = _shares(rates, [job.lo for job in jobs], [size[k] for k in sorted(kinds)])
        share = {
            (job.job_id, k): shares[i][c]
            for i, job in enumerate(jobs)
            for c, k in enumerate(sorted(kinds))
        }
        chosen = self._select(jobs, kinds, size, share)
        assignment = self._assign(chosen, kinds, servers)
        for job_id, ws in assignment.items():
            k = snapshot.kind_of(ws[0][0])
            self.job_time[job_id][k] += self.interval_s
            self.kind_time[k] += self.interval_s
        self.workers = assignment
        return self._decisions(snapshot, jobs, assignment)

    def _select(
        self,
        jobs: list[QueuedJob | RunningJob],
        kinds: list[str],
        size: dict[str, int],
        share: dict[tuple[str, str], float],
    ) -> dict[str, list[tuple[str, int]]]:
        """Jobs by priority, highest first, while they fit: ``{kind: [(job, GPUs)]}``."""
        entries = []
        for k in kinds:
            for job in jobs:
                alloc = share[job.job_id, k]
                fraction = self.job_time[job.job_id][k] / self.kind_time[k]
                priority = 0.0 if alloc == 0.0 else alloc / fraction
                entries.append((job, k, priority, alloc))
        entries.sort(key=lambda e: (e[2], 0, e[3]), reverse=True)  # stable, as the artifact
        left = dict(size)
        done: set[str] = set()
        chosen: dict[str, list[tuple[str, int]]] = {k: [] for k in kinds}
        for job, k, _, _ in entries:
            if left[k] == 0 or job.job_id in done or job.lo > left[k]:
                continue
            left[k] -= job.lo
            done.add(job.job_id)
            chosen[k].append((job.job_id, job.lo))
        return chosen

    def _assign(
        self,
        chosen: dict[str, list[tuple[str, int]]],
        kinds: list[str],
        servers: dict[str, list[list[Worker]]],
    ) -> dict[str, tuple[Worker, ...]]:
        """GPUs per kind, largest jobs first, a job keeping its GPUs where it can."""
        kind_of_worker = {w: k for k in kinds for s in servers[k] for w in s}
        out: dict[str, tuple[Worker, ...]] = {}
        for k in kinds:
            picks = sorted(chosen[k], key=lambda x: x[1], reverse=True)
            free = [list(s) for s in servers[k]]
            taken: set[Worker] = set()
            ptr = 0
            for gpus in sorted({g for _, g in picks}, reverse=True):
                for job_id, g in picks:
                    prev = self.workers.get(job_id)
                    if g != gpus or not prev or kind_of_worker.get(prev[0]) != k:
                        continue
                    if not any(w in taken for w in prev):
                        out[job_id] = prev
                        taken.update(prev)
                for job_id, g in picks:
                    if g != gpus:
                        continue
                    mine = list(out.get(job_id, ()))
                    while len(mine) < g and ptr < len(free):
                        if not free[ptr]:
                            ptr += 1
                            continue
                        w = free[ptr].pop(0)
                        if w not in taken:
                            mine.append(w)
                            taken.add(w)
                    if len(mine) != g:
                        raise RuntimeError(f"could not assign {g} GPUs of {k} to {job_id}")
                    out[job_id] = tuple(mine)
        return out

    def _decisions(
        self,
        snapshot: Snapshot,
        jobs: list[QueuedJob | RunningJob],
        assignment: dict[str, tuple[Worker, ...]],
    ) -> list[Decision]:
        """Preemptions, moves, then starts. The moves are applied at once (the simulator's
        ``atomic_moves``): the artifact moves GPU ids at once, and its assignment swaps jobs
        between kinds in cycles no order of one move after another can make."""
        running = {r.job_id: r.nodes for r in snapshot.running}
        stops, moves, starts = [], [], []
        for job in jobs:
            ws = assignment.get(job.job_id)
            nodes = tuple(n for n, _ in ws) if ws else ()
            held = running.get(job.job_id)
            if held is None:
                if nodes:
                    starts.append(Decision(DecisionKind.START, job.job_id, nodes, reason="gavel"))
            elif not nodes:
                stops.append(Decision(DecisionKind.PREEMPT, job.job_id, reason="gavel: not now"))
            elif Counter(nodes) != Counter(held):
                moves.append(Decision(DecisionKind.RESIZE, job.job_id, nodes, reason="gavel"))
        return stops + moves + starts


def _servers(snapshot: Snapshot) -> dict[str, list[list[Worker]]]:
    """Each kind's GPUs as the artifact numbers them: kinds in name order, nodes in pool
    order, slots on a node in order."""
    out: dict[str, list[list[Worker]]] = {}
    for node in snapshot.nodes:
        out.setdefault(node.kind, []).append([(node.node_id, i) for i in range(node.total_gpus)])
    return {k: out[k] for k in sorted(out)}


def _rate(job: QueuedJob | RunningJob, kind: str, size: int) -> float:
    """Optimizer steps per second of the job at its GPU count on ``kind``."""
    if job.lo > size:
        return TOO_BIG_RATE
    speed = dict(job.kind_speed).get(kind, 0.0)
    return job.speedup[job.lo - 1] * speed


def _shares(rates: list[list[float]], gpus: list[int], size: list[int]) -> list[list[float]]:
    """Max-sum-throughput time shares per job and kind, identical jobs solved as one class
    (see the module docstring), rounded to 5 decimals as the artifact."""
    classes: dict[tuple[tuple[float, ...], int], list[int]] = {}
    for i, (row, g) in enumerate(zip(rates, gpus, strict=True)):
        classes.setdefault((tuple(row), g), []).append(i)
    keys = list(classes)
    n_k = len(size)
    m = len(keys)
    cost = -np.array([r for (row, _) in keys for r in row])
    a_ub = np.zeros((m + n_k, m * n_k))
    b_ub = np.zeros(m + n_k)
    for c, (_, g) in enumerate(keys):
        a_ub[c, c * n_k : (c + 1) * n_k] = 1.0  # a class's shares: at most one per job
        b_ub[c] = len(classes[keys[c]])
        for k in range(n_k):
            a_ub[m + k, c * n_k + k] = g  # a kind's GPUs
    b_ub[m:] = size
    res = linprog(cost, A_ub=a_ub, b_ub=b_ub, bounds=(0, None), method="highs")
    if res.status != 0:
        raise RuntimeError(f"Gavel's linear programme failed: {res.message}")
    x = res.x.reshape(m, n_k)
    out = [[0.0] * n_k for _ in rates]
    for c, key in enumerate(keys):
        members = classes[key]
        for i in members:
            out[i] = [min(max(round(v / len(members), 5), 0.0), 1.0) for v in x[c]]
    return out
