"""A job whose throughput is measured per GPU kind (Sia's heterogeneous simulator, SOSP'23).

Sia's artifact (`siasosp23/artifacts`, `sia-simulator/`) extends the Pollux simulator to a
cluster of several GPU kinds: each application has a throughput profile per kind
(``traces/<app>/placements-<kind>.csv`` and ``scalability-<kind>.csv``) and one set of
training curves (``validation-*.csv``), the same on every kind. :class:`FixedBatchKindModel`
runs such a job at a fixed global batch (Gavel's "TunedJobs": the GPU count and batch the
workload names) with the artifact's semantics (``job.py``: ``update_local_bsz`` and ``step``;
``applications.py``: ``get_max_local_bsz``):

* the micro-batch and accumulation follow from the batch, the placement and the largest
  micro-batch measured on that placement of that kind;
* progress per second is the statistical efficiency of the batch over the step time of that
  kind, divided by the application's calibration slowdown;
* each start, resize or move costs the application's checkpoint-restore time.

Its progress depends on the kind it runs on, which the engine tells it (:meth:`placed`), so
it is not scaled by a kind's speed (``kind_bound`` is false).
"""

from __future__ import annotations

import csv
import math
from collections.abc import Mapping
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import numpy as np

from orchestrator.sim.errors import TraceError
from orchestrator.sim.models import JobModel
from orchestrator.sim.profiles import AppProfile, canonical_placement, read_profile
from policies.scheduling.pollux_fit import (
    GradParams,
    PerfParams,
    best_goodput,
    fit_perf_params,
    optimize,
)

__all__ = ["AdaptiveKindModel", "FixedBatchKindModel", "KindApp", "load_kind_apps"]


@dataclass(frozen=True)
class KindApp:
    """One application's profile on one GPU kind.

    Attributes:
        profile: step times on this kind and the training curves.
        scale_rows: ``(nodes, replicas, local_bsz)`` of each multi-node measurement.
        per_node: GPUs per node of this kind (how a GPU count is packed).
    """

    profile: AppProfile
    scale_rows: tuple[tuple[int, int, int], ...]
    per_node: int

    def max_local_bsz(self, placement: tuple[int, ...]) -> int:
        """The largest micro-batch measured on ``placement`` (its own rows, else the
        multi-node rows at least as large): the memory limit on this kind."""
        rows = self.profile.measured.get(canonical_placement(placement))
        if rows is not None:
            return int(max(r[0] for r in rows))
        nodes, replicas = len([x for x in placement if x]), sum(placement)
        sizes = [b for n, r, b in self.scale_rows if n >= nodes and r >= replicas]
        if not sizes:
            raise TraceError(
                f"{self.profile.name}: no measurement of {replicas} GPUs on {nodes} nodes"
            )
        return max(sizes)

    def micro_cap(self, replicas: int) -> int | None:
        """The largest micro-batch measured on any placement of ``replicas`` GPUs."""
        sizes = [
            int(r[0])
            for p, rows in self.profile.measured.items()
            if sum(p) == replicas
            for r in rows
        ]
        return max(sizes) if sizes else None

    def packed(self, gpus: int) -> tuple[int, ...]:
        """``gpus`` packed onto whole nodes of this kind."""
        full, rest = divmod(gpus, self.per_node)
        return (self.per_node,) * full + ((rest,) if rest else ())

    def timed(self, placement: tuple[int, ...]) -> tuple[int, ...]:
        """The placement the profile times ``placement`` as: itself where measured (or
        within the multi-node measurements), else its GPUs packed on whole nodes. The
        artifact's own policies only make measured shapes; a policy that spreads a job over
        more nodes than anything measured on the kind gets the packed shape's time, which is
        optimistic for it (counted: :attr:`FixedBatchKindModel.unmeasured`)."""
        try:
            top = self.max_local_bsz(placement)
            self.profile.step_time(placement, self.profile.min_local_bsz)
            self.profile.step_time(placement, top)
        except TraceError:
            return self.packed(sum(placement))
        return placement


@cache
def load_kind_apps(
    traces: str, name: str, kinds: tuple[tuple[str, int], ...]
) -> dict[str, KindApp]:
    """The application's profile on each kind, from Sia's ``traces/<name>/`` folder.

    Args:
        traces: the artifact's ``sia-simulator/traces`` folder.
        name: the application.
        kinds: ``(kind, GPUs per node)`` of each kind of the cluster.
    """
    base = Path(traces) / name
    out = {}
    for kind, per_node in kinds:
        profile = read_profile(base, name, suffix=f"-{kind}", root=traces)
        with (base / f"scalability-{kind}.csv").open(newline="") as f:
            rows = tuple(
                (int(r["num_nodes"]), int(r["num_replicas"]), int(r["local_bsz"]))
                for r in csv.DictReader(f)
            )
        out[kind] = KindApp(profile, rows, per_node)
    return out


class FixedBatchKindModel(JobModel):
    """A job at a fixed global batch whose step time is measured per GPU kind.

    Args:
        apps: the application's profile on each kind of the pool.
        batch_size: the global batch, kept on every placement (the micro-batch and
            accumulation steps change with the placement).
        slowdown: the application's calibration slowdown (progress per second is divided by it).
        rescale_s: seconds each start, resize or move costs.
    """

    kind_bound = False
    speedup_changes = False
    speedup_absolute = True

    def __init__(
        self, apps: Mapping[str, KindApp], batch_size: int, slowdown: float, rescale_s: float
    ) -> None:
        if not apps:
            raise TraceError("a kind model needs a profile on at least one kind")
        self.apps = dict(apps)
        self.batch_size = batch_size
        self.slowdown = slowdown
        self.rescale_s = rescale_s
        self.kind = next(iter(self.apps))
        self._placement: tuple[int, ...] = ()  # as held
        self._timed: tuple[int, ...] = ()  # as the profile times it (KindApp.timed)
        self._same = False
        self.unmeasured = 0  # placements timed as packed (KindApp.timed)
        self.progress = 0.0
        self.epoch = 0
        first = next(iter(self.apps.values())).profile
        self.epoch_progress = first.epoch_progress
        self._rates: dict[tuple[str, tuple[int, ...], int], float] = {}

    # ---- the engine's hooks ----------------------------------------------------------------

    def placed(self, kinds: tuple[str, ...], placement: tuple[int, ...], resize: bool) -> None:
        """See :meth:`JobModel.placed`: it steps at the rate of the first GPU's kind (a gang
        runs on one kind)."""
        if not kinds:
            return
        if kinds[0] not in self.apps:
            raise TraceError(f"no profile of {self._name} on kind {kinds[0]!r}")
        # the artifact compares placements, not GPU ids (cluster.py ``optimize_policy``,
        # job.py ``reallocate``): a move to other GPUs of the same kind and shape goes on
        self._same = resize and (kinds[0], placement) == (self.kind, self._placement)
        self.kind, self._placement = kinds[0], placement
        self._timed = self.apps[self.kind].timed(placement)
        self.unmeasured += self._timed != placement

    def start_s(self, default: float) -> float:
        """Seconds a start, resize or move costs: the application's checkpoint-restore, none
        for a move to the same kind and shape (as the artifact)."""
        return 0.0 if self._same else self.rescale_s

    # ---- configuration and rate ------------------------------------------------------------

    @property
    def _name(self) -> str:
        return next(iter(self.apps.values())).profile.name

    def config(self, kind: str, placement: tuple[int, ...]) -> tuple[int, int]:
        """(micro-batch, accumulation steps) on ``placement`` of ``kind`` (the artifact's
        ``Job.update_local_bsz`` with batch-size tuning off)."""
        app = self.apps[kind]
        prof = app.profile
        replicas = sum(placement)
        local = math.ceil(self.batch_size / replicas - 1e-8)
        accum = math.ceil(local / app.max_local_bsz(placement) - 1e-8) - 1
        if replicas == 1 and self.batch_size > prof.init_batch_size:
            accum = max(1, accum)
        micro = math.ceil(local / (accum + 1) - 1e-8)
        cap = app.micro_cap(replicas)  # the memory limit, where this GPU count was measured
        if cap is not None:
            micro = min(micro, cap)
        return min(micro, int(prof.max_batch_size / (replicas * (accum + 1)))), accum

    def goodput(self, kind: str, placement: tuple[int, ...]) -> float:
        """Progress per second on ``placement`` of ``kind`` in the current epoch."""
        key = (kind, placement, self.epoch)
        hit = self._rates.get(key)
        if hit is not None:
            return hit
        prof = self.apps[kind].profile
        micro, accum = self.config(kind, placement)
        step, sync = prof.step_time(placement, micro)
        batch = sum(placement) * micro * (accum + 1)
        rate = prof.gain(batch, self.epoch) / (step + (step - sync) * accum) / self.slowdown
        self._rates[key] = rate
        return rate

    def iteration_rate(self, kind: str, gpus: int) -> float:
        """Optimizer steps per second of ``gpus`` GPUs of ``kind`` packed on whole nodes, over
        the calibration slowdown: what Gavel's policy predicts (``gavel.py``'s
        ``predict_throughput``, which leaves out the memory cap per GPU count)."""
        app = self.apps[kind]
        placement = app.packed(gpus)
        local = math.ceil(self.batch_size / gpus - 1e-8)
        accum = math.ceil(local / app.max_local_bsz(placement) - 1e-8) - 1
        if gpus == 1:
            accum = max(1, accum)
        micro = math.ceil(local / (accum + 1) - 1e-8)
        micro = min(micro, int(app.profile.max_batch_size / (gpus * (accum + 1))))
        step, sync = app.profile.step_time(placement, micro)
        return 1.0 / (step + (step - sync) * accum) / self.slowdown

    # ---- JobModel --------------------------------------------------------------------------

    def advance(self, placement: tuple[int, ...], seconds: float) -> float | None:
        """See :meth:`JobModel.advance` (epoch boundaries in whole seconds, as the artifact)."""
        used = 0.0
        targets = self.epoch_progress
        placement = self._timed or placement
        while seconds > 0:
            rate = self.goodput(self.kind, placement)
            target = targets[self.epoch]
            if self.progress + rate * seconds < target:
                self.progress += rate * seconds
                return None
            delta = min(float(round((target - self.progress) / rate)), seconds)
            self.progress = target
            self.epoch += 1
            used += delta
            seconds -= delta
            if self.epoch >= len(targets):
                return used
        return None

    def state(self) -> tuple[float, int]:
        """See :meth:`JobModel.state`."""
        return (self.progress, self.epoch)

    def restore(self, state: tuple[float, int]) -> None:
        """See :meth:`JobModel.restore`."""
        self.progress, self.epoch = state

    def speedup(self, max_gpus: int) -> tuple[float, ...]:
        """Optimizer steps per second on 1..``max_gpus`` GPUs of the first kind (an absolute
        unit: a policy compares jobs by it, and the kinds by the job's ``kind_speed``); 0 where
        the profile has no measurement near a count."""
        out = []
        for n in range(1, max_gpus + 1):
            try:
                out.append(self.iteration_rate(next(iter(self.apps)), n))
            except TraceError:
                out.append(0.0)
        return tuple(out)

    def remaining_time(self, placement: tuple[int, ...]) -> float:
        """See :meth:`JobModel.remaining_time` (current epoch's goodput throughout)."""
        placement = self._timed or placement
        return (self.epoch_progress[-1] - self.progress) / self.goodput(self.kind, placement)

    @property
    def fraction_done(self) -> float:
        """See :attr:`JobModel.fraction_done`."""
        return self.progress / self.epoch_progress[-1]


class AdaptiveKindModel(FixedBatchKindModel):
    """A job that adapts its batch as Sia's jobs do, its step time measured per GPU kind.

    Sia's artifact (``job.py``, batch-size tuning on) runs each adaptive job at the batch its
    own *fitted* throughput model finds best: the job keeps, per kind, every (nodes, GPUs,
    micro-batch) it has run with its measured step and sync time, refits Pollux's model on that
    kind at each new one (:func:`~policies.scheduling.pollux_fit.fit_perf_params`, tolerance
    ``1e-5`` as there), and keeps the gradient statistics of its latest step. Before its first
    fit on the kind it runs on, its batch is ``max(B0, smallest micro-batch x GPUs)``. The
    batch is re-chosen whenever it is placed and after every step of :meth:`advance` (each
    epoch's end and each round's end). Progress, restarts and free same-shape moves are as
    :class:`FixedBatchKindModel`'s.

    What a policy reads (Sia's view of the job, ``cluster.py`` ``get_sia_multi_job_info``):
    :attr:`perf` (the fitted model per kind, ``None`` where it has not run), :attr:`grad`,
    :attr:`restarts` and :meth:`max_profiled`.

    Args:
        apps, slowdown, rescale_s: as :class:`FixedBatchKindModel`.
        batch_size: the workload's batch (the largest batch its speedup function weighs, as
            the artifact's ``get_speedup_fn`` takes it; its own batch choice ranges to the
            application's largest).
    """

    speedup_changes = True
    speedup_absolute = False

    def __init__(
        self, apps: Mapping[str, KindApp], batch_size: int, slowdown: float, rescale_s: float
    ) -> None:
        super().__init__(apps, batch_size, slowdown, rescale_s)
        self.observed: dict[str, dict[tuple[int, int, int], tuple[float, float]]] = {
            k: {} for k in self.apps
        }
        self.perf: dict[str, PerfParams | None] = dict.fromkeys(self.apps)
        self.grad: GradParams | None = None
        self.restarts: int | None = None
        self.micro = 0
        self.accum = 0

    def max_local(self, kind: str) -> int:
        """The application's largest micro-batch on ``kind`` (``applications.py``: the largest
        measured; deepspeech2 on RTX 2080Ti: 57)."""
        app = self.apps[kind]
        return (
            57 if (app.profile.name, kind) == ("deepspeech2", "rtx") else app.profile.max_local_bsz
        )

    def max_profiled(self, kind: str) -> int:
        """The most GPUs the job has run on on ``kind`` (0: none)."""
        return max((r for _, r, _ in self.observed[kind]), default=0)

    def placed(self, kinds: tuple[str, ...], placement: tuple[int, ...], resize: bool) -> None:
        """See :meth:`JobModel.placed`: a restart unless a move to the same kind and shape
        (counted as the artifact counts them), then the batch for the new placement."""
        super().placed(kinds, placement, resize)
        if not self._same:
            self.restarts = 0 if self.restarts is None else self.restarts + 1
        self._rebatch()

    def _rebatch(self) -> None:
        """The artifact's ``Job.update_local_bsz`` with batch-size tuning on."""
        app = self.apps[self.kind]
        prof = app.profile
        placement = self._timed
        nodes, replicas = len(placement), sum(placement)
        max_local = app.max_local_bsz(placement)
        perf = self.perf[self.kind]
        if self.grad is None or perf is None:
            batch = max(prof.init_batch_size, prof.min_local_bsz * replicas)
            local = math.ceil(batch / replicas - 1e-8)
            accum = math.ceil(local / max_local - 1e-8) - 1
            if replicas == 1 and batch > prof.init_batch_size:
                accum = max(1, accum)
            micro = math.ceil(local / (accum + 1) - 1e-8)
        else:
            _, m, a = optimize(
                perf,
                self.grad,
                np.array([float(nodes)]),
                np.array([float(replicas)]),
                (prof.init_batch_size, prof.max_batch_size),
                (prof.min_local_bsz, max_local),
            )
            micro, accum = int(m[0]), int(a[0])
        cap = app.micro_cap(replicas)
        if cap is not None:
            micro = min(micro, cap)
        self.micro = min(micro, int(prof.max_batch_size / (replicas * (accum + 1))))
        self.accum = accum

    def config(self, kind: str, placement: tuple[int, ...]) -> tuple[int, int]:
        """The micro-batch and accumulation it runs at now (chosen by :meth:`_rebatch`)."""
        return self.micro, self.accum

    def advance(self, placement: tuple[int, ...], seconds: float) -> float | None:
        """See :meth:`JobModel.advance`: the artifact's ``Job.step``, each step measuring
        (and fitting) before it runs, the batch re-chosen after it."""
        used = 0.0
        targets = self.epoch_progress
        prof = self.apps[self.kind].profile
        placement = self._timed or placement
        replicas = sum(placement)
        while seconds > 0:
            micro, accum = self.micro, self.accum
            batch = replicas * micro * (accum + 1)
            sqr, var = prof.grad_stats(batch, self.epoch)
            scale = batch / prof.init_batch_size
            gain = (var + sqr) / (var / scale + sqr)
            step, sync = prof.step_time(placement, micro)
            self._measured(len(placement), replicas, micro, step, sync, sqr, var)
            rate = gain / (step + (step - sync) * accum) / self.slowdown
            target = targets[self.epoch]
            if self.progress + rate * seconds < target:
                self.progress += rate * seconds
                self._rebatch()
                return None
            delta = float(round((target - self.progress) / rate))
            self.progress = target
            self.epoch += 1
            used += delta
            seconds -= delta
            if self.epoch >= len(targets):
                return used
            self._rebatch()
        return None

    def _measured(
        self,
        nodes: int,
        replicas: int,
        micro: int,
        step: float,
        sync: float,
        sqr: float,
        var: float,
    ) -> None:
        """The artifact's ``Job.update_params``: keep the gradient statistics; a new
        configuration on this kind refits the kind's model."""
        self.grad = GradParams(sqr, var)
        seen = self.observed[self.kind]
        key = (nodes, replicas, micro)
        if key in seen:
            return
        seen[key] = (step, sync)
        cols = np.array(list(seen), dtype=np.float64)
        times = np.array(list(seen.values()), dtype=np.float64)
        self.perf[self.kind] = fit_perf_params(
            cols[:, 0], cols[:, 1], cols[:, 2], times[:, 0] - times[:, 1], times[:, 0], tol=1e-5
        )

    def speedup(self, max_gpus: int) -> tuple[float, ...]:
        """What the job's own measurements say of it, as Sia bootstraps the kinds it has not
        run on: its fitted goodput on 1..``max_gpus`` GPUs packed on the nodes of the first
        kind it has a fit on (in the pool's order), relative to one GPU there, trusted up to
        twice the most GPUs it has run on (Pollux's and Sia's ramp) and flat beyond; before
        any fit, nothing beyond one GPU. A policy reads the kinds apart by the job's
        ``kind_speed`` (its application's one-GPU throughput per kind)."""
        fitted = next((k for k, p in self.perf.items() if p is not None), None)
        if fitted is None or self.grad is None:
            return (1.0,) * max_gpus
        perf = self.perf[fitted]
        assert perf is not None
        trusted = min(max_gpus, max(1, 2 * max(self.max_profiled(k) for k in self.apps)))
        prof = self.apps[fitted].profile
        gpus = np.arange(1, trusted + 1, dtype=np.float64)
        nodes = np.ceil(gpus / self.apps[fitted].per_node)
        good = best_goodput(
            perf,
            self.grad,
            nodes,
            gpus,
            (prof.init_batch_size, self.batch_size),
            (prof.min_local_bsz, self.max_local(fitted)),
        )
        base = float(good[0])
        if base <= 0:
            return (1.0,) * max_gpus
        curve = [float(v) / base for v in good]
        return tuple(curve + [curve[-1]] * (max_gpus - trusted))

    def remaining_time(self, placement: tuple[int, ...]) -> float:
        """See :meth:`JobModel.remaining_time` (the current batch's rate throughout)."""
        prof = self.apps[self.kind].profile
        placement = self._timed or placement
        replicas = sum(placement)
        batch = replicas * self.micro * (self.accum + 1)
        step, sync = prof.step_time(placement, self.micro)
        rate = prof.gain(batch, self.epoch) / (step + (step - sync) * self.accum) / self.slowdown
        return (self.epoch_progress[-1] - self.progress) / rate
