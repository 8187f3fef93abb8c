"""Sia's policy as its artifact runs it, on the project's simulator (issue 40, item 4).

Sia (Jayaram Subramanya et al., SOSP'23; `siasosp23/artifacts`, `sia-simulator/sia.py`, with
`run_experiment.sh`'s settings: p = -0.5, lambda_n = 1.1, 60 s rounds, throughputs projected
across kinds, the most GPUs shared by the kinds), re-derived. Each round:

1. Configurations per kind: on 4-GPU nodes 1, 2, 4 GPUs on one node then whole nodes; on
   8-GPU nodes 1, 2, 4, 8 then whole nodes; never more nodes than the kind has.
2. A job's goodput on each configuration of each kind is its fitted model's on that kind
   (:class:`~orchestrator.sim.kind_models.AdaptiveKindModel`: Pollux's model fitted to what
   it ran there, its latest gradient statistics, the best batch up to its workload batch);
   on a kind it has not run on, the first fitted kind's goodput for the same GPU count
   (packed on that kind's nodes) times the ratio of the two kinds' one-GPU throughputs for
   the application; before any fit, 1 for one GPU of every kind. Configurations above the
   job's most GPUs (twice the most it has run on, on any kind; at most 64 and what its
   largest batch can use) are worth ``1e-4``. The row is divided by its smallest valid entry.
3. Every entry but the job's current configuration is multiplied by its re-allocation factor
   ``max(age - restarts x S, 0) / (age + S)`` (S per application; 1 while age < S), raised to
   ``p = -0.5``, rounded to 2 decimals and clipped at 3000; an integer programme picks at
   most one configuration per job, minimising ``sum(A x X) + 1.1 x (jobs - allocated)``
   within each kind's GPUs, a job still in its checkpoint-restore held at its configuration.
4. Within a kind, jobs are packed node by node, largest first, whole nodes for the
   multi-node ones (``alloc_to_placement_fast``).

Why this is not in ``policies/``: it reads each job's fitted models from the benchmark's job
models (as the artifact's cluster hands its policy each job's speedup functions) and keeps
each job's previous configuration between rounds; the project's policies keep no state. It
runs only under the simulator's ``atomic_moves`` (its placements are re-packed every round).

The integer programme is solved by scipy's HiGHS (the artifact: CBC through cvxpy, 8
threads, 0.01% gap, the same gap here). Where several allocations are optimal (identical jobs
that have not run yet have identical rows), the two solvers may pick different ones.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np
from scipy.optimize import Bounds, LinearConstraint, milp

from orchestrator.sim.kind_models import AdaptiveKindModel
from policies.decisions import Decision, DecisionKind
from policies.scheduling.base import SchedulingPolicy
from policies.scheduling.pollux_fit import best_goodput
from policies.snapshot import QueuedJob, RunningJob, Snapshot

__all__ = ["SiaPolicy"]

CONFIGS_4GPU = ((1, 1, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16),
                (1, 2, 4, 8, 12, 16, 20, 24, 28, 32, 36, 40, 44, 48, 52, 56, 60, 64))  # fmt: skip
CONFIGS_8GPU = ((1, 1, 1, 1, 2, 3, 4, 5, 6, 7, 8), (1, 2, 4, 8, 16, 24, 32, 40, 48, 56, 64))
ZERO_ALLOC_GAIN = 1e-4
CLIP = 3000.0
RESTART_PENALTY_S = {"deepspeech2": 25, "imagenet": 250, "cifar10": 30, "bert": 120, "yolov3": 45}


@dataclass
class SiaPolicy(SchedulingPolicy):
    """Sia's allocation (see the module docstring).

    Args:
        models: each job's model, by job id (what its fitted views are read from).
        kinds: ``(kind, nodes, GPUs per node)`` in the artifact's cluster order.
        one_gpu: per application, per kind, its one-GPU throughput (the projection's ratios).
        p: the fairness exponent.
        lambda_n: the cost of leaving a job without GPUs.
    """

    models: Mapping[str, AdaptiveKindModel]
    kinds: tuple[tuple[str, int, int], ...]
    one_gpu: Mapping[str, Mapping[str, float]]
    p: float = -0.5
    lambda_n: float = 1.1
    prev: dict[str, int | None] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.configs: list[tuple[str, int, int]] = []  # (kind, nodes, GPUs), kinds in order
        for kind, nodes, per_node in self.kinds:
            table = CONFIGS_4GPU if per_node == 4 else CONFIGS_8GPU
            self.configs += [(kind, n, g) for n, g in zip(*table, strict=True) if n <= nodes]
        self.total = {kind: nodes * per_node for kind, nodes, per_node in self.kinds}
        self.per_node = {kind: per_node for kind, _, per_node in self.kinds}

    def decide(self, snapshot: Snapshot) -> list[Decision]:
        """One round (see the module docstring)."""
        jobs: list[QueuedJob | RunningJob] = sorted(
            (*snapshot.queue, *snapshot.running), key=lambda j: j.seq
        )
        if not jobs:
            return []
        now = snapshot.now
        restoring = {  # its checkpoint-restore is under way: it keeps its configuration
            r.job_id
            for r in snapshot.running
            if r.first_step_at is not None and r.first_step_at > now
        }
        rows = np.vstack([self._row(job, now) for job in jobs])
        fixed = {i: self.prev[job.job_id] for i, job in enumerate(jobs) if job.job_id in restoring}
        chosen = self._solve(rows, fixed)
        active = {job.job_id for job in jobs}
        self.prev = {k: v for k, v in self.prev.items() if k in active}
        allocs: dict[str, dict[str, tuple[int, int]]] = {}
        for i, job in enumerate(jobs):
            c = chosen.get(i)
            self.prev[job.job_id] = c
            if c is not None:
                kind, nodes, gpus = self.configs[c]
                allocs.setdefault(kind, {})[job.job_id] = (nodes, gpus)
        placed: dict[str, tuple[str, ...]] = {}
        for kind, count, per_node in self.kinds:
            for job_id, ids in _pack(allocs.get(kind, {}), [per_node] * count).items():
                placed[job_id] = tuple(f"{kind}-{n}" for n in ids)
        return _decisions(snapshot, jobs, placed)

    # ---- the goodput row ---------------------------------------------------------------------

    def _row(self, job: QueuedJob | RunningJob, now: float) -> np.ndarray:
        """The job's row over every configuration: normalised goodputs, re-allocation factor
        applied, raised to ``p``, rounded and clipped."""
        model = self.models[job.job_id]
        name = model.apps[self.kinds[0][0]].profile.name
        most = max(self._max_replicas(model, k) for k, _, _ in self.kinds)
        fitted = [k for k, _, _ in self.kinds if model.perf[k] is not None]
        row = np.full(len(self.configs), ZERO_ALLOC_GAIN, dtype=np.float32)
        unknown: set[str] = set()
        for kind, _, _ in self.kinds:
            idx = [i for i, (k, _, g) in enumerate(self.configs) if k == kind and g <= most]
            if model.grad is None or not fitted:
                unknown.add(kind)
                continue
            nodes = np.array([self.configs[i][1] for i in idx], dtype=np.float32)
            gpus = np.array([self.configs[i][2] for i in idx], dtype=np.float32)
            if model.perf[kind] is not None:
                row[idx] = self._goodput(model, kind, nodes, gpus)
            else:  # projected from the first kind with a model
                src = fitted[0]
                ratio = self.one_gpu[name][kind] / self.one_gpu[name][src]
                src_nodes = np.ceil(gpus / self.per_node[src]).astype(np.float32)
                row[idx] = self._goodput(model, src, src_nodes, gpus) * np.float32(ratio)
        valid = row > ZERO_ALLOC_GAIN
        least = float(np.min(row[valid])) if valid.any() else 1.0
        row *= np.float32(1.0 / least)
        for kind in unknown:  # one GPU of the kind is worth 1
            row[self.configs.index((kind, 1, 1))] = 1.0
        row[row <= ZERO_ALLOC_GAIN] = ZERO_ALLOC_GAIN
        penalty = RESTART_PENALTY_S.get(name, 30)
        age = now - job.submitted_at
        restarts = model.restarts or 0
        factor = max(age - restarts * penalty, 0) / (age + penalty)
        if age < penalty:
            factor = 1.0
        prev = self.prev.get(job.job_id)
        if prev is not None:
            keep = row[prev]
            row *= np.float32(factor)
            row[prev] = keep
        out = np.round(np.power(row, np.float32(self.p)), 2)
        out[out > CLIP] = CLIP
        return out

    def _max_replicas(self, model: AdaptiveKindModel, kind: str) -> int:
        prof = model.apps[kind].profile
        return min(
            max(2 * model.max_profiled(kind), 1), 64, prof.max_batch_size // prof.min_local_bsz
        )

    def _goodput(
        self, model: AdaptiveKindModel, kind: str, nodes: np.ndarray, gpus: np.ndarray
    ) -> np.ndarray:
        """The fitted goodput on ``kind`` (``UncachedSpeedupFunction.get_goodput``: the best
        batch up to the workload's, with accumulation), in float32 as there."""
        perf, grad = model.perf[kind], model.grad
        assert perf is not None and grad is not None
        prof = model.apps[kind].profile
        good = best_goodput(
            perf,
            grad,
            nodes.astype(np.float64),
            gpus.astype(np.float64),
            (prof.init_batch_size, model.batch_size),
            (prof.min_local_bsz, model.max_local(kind)),
        )
        return good.astype(np.float32)

    # ---- the integer programme ---------------------------------------------------------------

    def _solve(self, rows: np.ndarray, fixed: dict[int, int | None]) -> dict[int, int]:
        """At most one configuration per job within each kind's GPUs, minimising
        ``sum(A x X) + lambda_n x (jobs - allocated)``; returns job row -> configuration."""
        jobs, n_cfg = rows.shape
        cost = (rows.astype(np.float64) - self.lambda_n).ravel()
        one = np.zeros((jobs, jobs * n_cfg))
        for j in range(jobs):
            one[j, j * n_cfg : (j + 1) * n_cfg] = 1.0
        kinds = [k for k, _, _ in self.kinds]
        cap = np.zeros((len(kinds), jobs * n_cfg))
        for c, (kind, _, gpus) in enumerate(self.configs):
            cap[kinds.index(kind), c::n_cfg] = gpus
        lower = np.zeros(jobs * n_cfg)
        for j, c in fixed.items():
            if c is not None:
                lower[j * n_cfg + c] = 1.0
        res = milp(
            cost,
            integrality=np.ones(jobs * n_cfg),
            bounds=Bounds(lower, np.ones(jobs * n_cfg)),
            constraints=[
                LinearConstraint(one, 0, 1),
                LinearConstraint(cap, 0, [self.total[k] for k in kinds]),
            ],
            options={"mip_rel_gap": 1e-4},
        )
        if res.x is None:
            raise RuntimeError(f"Sia's integer programme failed: {res.message}")
        x = np.round(res.x).reshape(jobs, n_cfg)
        return {j: int(np.argmax(x[j])) for j in range(jobs) if x[j].sum() > 0}


def _pack(allocs: dict[str, tuple[int, int]], free: list[int]) -> dict[str, list[int]]:
    """``alloc_to_placement_fast``: jobs by GPUs, most first; a job of several nodes takes
    whole free nodes from a pointer that goes round, then any GPUs left from there."""
    count = len(free)
    per_node = max(free)
    ptr = 0
    out: dict[str, list[int]] = {}
    for job_id, (_, gpus) in sorted(allocs.items(), key=lambda x: x[1][1], reverse=True):
        node = ptr
        full = gpus // per_node
        mine: list[int] = []
        checked = 0
        while full > 0 and checked < count:
            if free[node] == per_node:
                free[node] = 0
                gpus -= per_node
                mine += [node] * per_node
                full -= 1
            node = (node + 1) % count
            checked += 1
        while gpus > 0:
            if free[node]:
                take = min(gpus, free[node])
                gpus -= take
                free[node] -= take
                mine += [node] * take
            node = (node + 1) % count
        out[job_id] = mine
        ptr = node
    return out


def _decisions(
    snapshot: Snapshot, jobs: list[QueuedJob | RunningJob], placed: dict[str, tuple[str, ...]]
) -> list[Decision]:
    """Preemptions, moves (applied at once: ``atomic_moves``), then starts."""
    running = {r.job_id: r.nodes for r in snapshot.running}
    stops, moves, starts = [], [], []
    for job in jobs:
        nodes = placed.get(job.job_id, ())
        held = running.get(job.job_id)
        if held is None:
            if nodes:
                starts.append(Decision(DecisionKind.START, job.job_id, nodes, reason="sia"))
        elif not nodes:
            stops.append(Decision(DecisionKind.PREEMPT, job.job_id, reason="sia"))
        elif nodes != held:
            moves.append(Decision(DecisionKind.RESIZE, job.job_id, nodes, reason="sia"))
    return stops + moves + starts
