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

from orchestrator.sim.errors import TraceError
from orchestrator.sim.models import JobModel
from orchestrator.sim.profiles import AppProfile, canonical_placement, read_profile

__all__ = ["FixedBatchKindModel", "KindApp", "load_kind_apps"]


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
        self._placement: tuple[int, ...] = ()
        self._same = False
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
        return (self.epoch_progress[-1] - self.progress) / self.goodput(self.kind, placement)

    @property
    def fraction_done(self) -> float:
        """See :attr:`JobModel.fraction_done`."""
        return self.progress / self.epoch_progress[-1]
