"""What the trials so far say, gathered once per decision: the :class:`Evidence` the steps read.

Built from the history in one pass (:meth:`Evidence.build`): per family its samples for the
step-time model, its fits and out-of-memory runs (GPU count, ladder index), the latency misses
beyond noise, the work unit and power per GPU, the best, closest and leading configs, and the
fitted models with their priors (``priors``). Its methods are the hard memory rules of the
strategy (see the package doc); none of them reads the history again, so a step is a pure
function of the evidence.
"""

from __future__ import annotations

import dataclasses
import math
from collections import defaultdict
from collections.abc import Mapping
from dataclasses import dataclass, field

from orchestrator.tuner.history import History, TrialRecord
from orchestrator.tuner.objective import Goal
from orchestrator.tuner.perfmodel import Sample, StepModel, fit_step_model
from orchestrator.tuner.space import Config, SearchSpace
from orchestrator.tuner.strategies.sla.priors import (
    Family,
    SpaceIndex,
    family_of,
    model_priors,
    space_index,
)

__all__ = ["Evidence", "Family", "Prediction", "family_of", "fit_samples"]

TOLERANCE = 0.03
MAX_UNCERTAINTY = 0.1

Slots = Mapping[Family, list[tuple[int, int]]]  # family -> (gpus, ladder index) of runs


@dataclass(frozen=True)
class Prediction:
    """A config as a model predicts it: meets the SLA, objective value, total violation."""

    ok: bool
    value: float
    violation: float
    config: Config


@dataclass(frozen=True)
class Evidence:
    """The trial history digested for one decision (see the module doc).

    Attributes:
        configs: every config of the space (listed once per space: ``index``).
        index: the space's configs by family and GPU count.
        tried: configs measured or being measured (a step proposes none of them).
        models: each family's step-time model: fitted on its own samples, or borrowed from a
            measured family: ``priors`` names the families measured once (the reference
            model scaled through that run), ``entered`` those not measured at all (their
            neighbour's model; see ``priors``).
        misses: configs whose latency missed the ceiling by more than measurement noise.
        lead: the best config so far, else the fastest measured (``None``: nothing ran).
    """

    space: SearchSpace
    goal: Goal
    configs: tuple[Config, ...]
    tried: frozenset[Config]
    by_family: Mapping[Family, list[Sample]]
    fits: Slots
    ooms: Slots
    misses: tuple[Config, ...]
    unit: float
    watts: float | None
    best: TrialRecord | None
    closest: TrialRecord | None
    lead: Config | None
    models: Mapping[Family, StepModel]
    priors: frozenset[Family]
    entered: frozenset[Family]
    index: SpaceIndex
    _caps: dict[tuple[Family, int], int] = field(default_factory=dict, compare=False)

    @classmethod
    def build(cls, history: History) -> Evidence:
        """Everything the steps need from ``history``, in one pass over its measured trials."""
        space, goal = history.space, history.goal
        by_family: dict[Family, list[Sample]] = defaultdict(list)
        fits: dict[Family, list[tuple[int, int]]] = defaultdict(list)
        ooms: dict[Family, list[tuple[int, int]]] = defaultdict(list)
        work_unit: list[float] = []
        power: list[float] = []  # watts per GPU, where trials measured energy
        for r in history.points():
            c, m = r.config, r.measurement
            idx = space.index(c.micro_batch)
            if m.status == "oom":
                ooms[family_of(c)].append((c.gpus, idx))
                continue
            if not m.ok or not m.samples_per_s:
                continue
            fits[family_of(c)].append((c.gpus, idx))
            step = c.gpus * c.micro_batch * c.grad_accum / m.samples_per_s
            lat = goal.latency(m)
            ratio = lat / (step * 1000.0) if lat else 1.0
            by_family[family_of(c)].append(Sample(c.gpus, c.micro_batch, c.grad_accum, step, ratio))
            rate = goal.rate(m)
            if rate:
                work_unit.append(rate / m.samples_per_s)
            per_gpu = goal.watts_per_gpu(c.gpus, m)
            if per_gpu is not None:
                power.append(per_gpu)
        best = history.best
        ran = [r for r in history.points() if r.measurement.ok and r.measurement.samples_per_s]
        lead = best.config if best is not None else None
        if lead is None and ran:
            lead = max(ran, key=lambda r: r.measurement.samples_per_s or 0.0).config
        fitted = {
            f: model
            for f in list(by_family)
            if (model := fit_step_model(fit_samples(f, by_family), space.gpus_per_node))
        }
        scaled, entered = model_priors(fitted, by_family, best.config if best else None, space)
        index = space_index(space)
        return cls(
            space=space,
            goal=goal,
            configs=index.configs,
            tried=frozenset(r.config for r in history.points()) | frozenset(history.pending),
            by_family=dict(by_family),
            fits=dict(fits),
            ooms=dict(ooms),
            misses=tuple(history.latency_misses()),
            unit=_median(work_unit) or 1.0,  # rates are > 0: no median is 0
            # An energy cost is predicted as the median power per GPU times GPU-s per unit.
            watts=_median(power),
            best=best,
            closest=history.closest,
            lead=lead,
            models={**fitted, **scaled, **entered},
            priors=frozenset(scaled),
            entered=frozenset(entered),
            index=index,
        )

    # ---- the memory rules -------------------------------------------------------------------

    def untried(self, c: Config) -> bool:
        """Neither measured nor being measured."""
        return c not in self.tried

    def sure_oom(self, f: Family, c: Config) -> int:
        """The smallest ladder index of family ``f`` certain to run out of memory at ``c``'s GPU
        count: an OOM seen at fewer GPUs under DDP (memory does not fall with more), at more
        GPUs under FSDP (its shards shrink as GPUs are added)."""
        return min(
            (
                i
                for g, i in self.ooms.get(f, ())
                if (g <= c.gpus if c.sharding == "ddp" else g >= c.gpus)
            ),
            default=len(self.space.micro_batches),
        )

    def fits_of(self, f: Family) -> list[tuple[int, int]]:
        """Where family ``f`` is known to fit: its own runs, and under activation checkpointing
        its sibling's without it (checkpointing only frees memory), so that a checkpointing
        family gallops on from where its sibling ran out of memory. (The sibling's fits count
        as sure ones only, on the GPU counts the memory rules carry them to.)"""
        own = list(self.fits.get(f, ()))
        if f[2]:
            own += self.fits.get(f._replace(ckpt=False), [])
        return own

    def bracket(self, c: Config) -> tuple[int, int, int, int]:
        """For the memory settings of ``c``: the largest index sure to fit, the largest seen to
        fit, the smallest sure OOM, the smallest seen OOM (a fit is certain at fewer GPUs than
        where it was seen, an OOM at more; under FSDP, whose shards shrink as GPUs are added,
        the other way round; sure fits as :meth:`fits_of` counts them)."""
        f = family_of(c)
        mine = self.fits_of(f)
        sure = max(
            (i for g, i in mine if (g >= c.gpus if c.sharding == "ddp" else g <= c.gpus)),
            default=-1,
        )
        seen = max((i for _, i in self.fits.get(f, ())), default=-1)
        oom_seen = min((i for _, i in self.ooms.get(f, ())), default=len(self.space.micro_batches))
        return sure, seen, self.sure_oom(f, c), oom_seen

    def cap(self, c: Config) -> int:
        """The largest ladder index the memory rules allow: below a known OOM, and no more than
        a gallop (index 2i + 2) above the largest known fit; under bf16/fp16 below twice fp32's
        OOM. A family with no fit yet starts at the largest micro-batch a family with its
        memory settings fitted, or at the leading config's if that is smaller (its first run is
        compared with theirs where it matters; an OOM there is bisected)."""
        key = (family_of(c), c.gpus)  # all that the rules below read of c
        got = self._caps.get(key)
        if got is None:
            got = self._caps[key] = self._cap(c)
        return got

    def _cap(self, c: Config) -> int:
        """:meth:`cap`, computed."""
        sure, seen, oom, _ = self.bracket(c)
        known = max(sure, seen)
        if known >= 0:
            reach = 2 * known + 2
        else:
            # Same sharding and checkpointing (memory differs across them); under FSDP only
            # fits at as many GPUs or fewer (its shards shrink with more GPUs).
            reach = max(
                (
                    i
                    for f, seen_fits in self.fits.items()
                    if f[0] == c.sharding and f[2] == c.activation_checkpointing
                    for g, i in seen_fits
                    if c.sharding == "ddp" or g <= c.gpus
                ),
                default=0,
            )
            # No higher than the leading config's micro-batch when it has the same memory
            # settings: the comparison that matters is there, and a larger micro-batch past
            # the throughput peak is the costlier trial.
            lead = self.lead
            if lead is not None and (lead.sharding, lead.activation_checkpointing) == (
                c.sharding,
                c.activation_checkpointing,
            ):
                reach = min(reach, self.space.index(lead.micro_batch))
        top = len(self.space.micro_batches) - 1
        return min(oom - 1, reach, self.half_precision_cap(c), top)

    def at_cap(self, c: Config) -> Config | None:
        """The point of ``c``'s line at the largest micro-batch :meth:`cap` allows; when the
        line has none that low (a line keeping a global batch may start above the ladder's
        foot), its smallest, unless that is certain to run out of memory."""
        space = self.space
        top = self.cap(c)
        got = space.snap(c, top) if top >= 0 else None
        line = space.line(c)
        if got is None and line and space.index(line[0].micro_batch) < self.bracket(line[0])[2]:
            got = line[0]
        return got

    def half_precision_cap(self, c: Config) -> int:
        """Under autocast to bf16 or fp16 the weights, gradients and optimizer state stay fp32
        and at best the activations halve, so a micro-batch twice fp32's certain OOM (same
        other settings) runs out of memory too: the largest index below it."""
        return self._half_precision_cap(family_of(c), c)

    def _half_precision_cap(self, f: Family, c: Config) -> int:
        """:meth:`half_precision_cap` for family ``f`` at ``c``'s GPU count."""
        ladder = self.space.micro_batches
        if f.precision == "fp32":
            return len(ladder) - 1
        oom = self.sure_oom(f._replace(precision="fp32"), c)
        if oom == len(ladder):
            return oom - 1
        limit = 2 * ladder[oom]
        return max(i for i, m in enumerate(ladder) if m < limit)  # ladder[0] <= ladder[oom]

    def memory_step(self, c: Config) -> Config:
        """Bisection: a config above the largest sure fit, at or above an OOM seen (at any GPU
        count), is replaced by the midpoint of that bracket on its line until the boundary is
        found."""
        sure, _, _, oom = self.bracket(c)
        idx = self.space.index(c.micro_batch)
        mid = (sure + oom) // 2
        if oom < len(self.space.micro_batches) and sure < idx and mid < idx:
            # on c's line (its global batch kept): the largest micro-batch at or below mid
            probe = self.space.snap(c, max(mid, 0))
            if probe is not None and self.untried(probe):
                return probe
        return c

    def missed(self, c: Config) -> bool:
        """Whether a config of ``c``'s family on as many GPUs, at no larger micro-batch and
        accumulation, missed the latency ceiling beyond noise (step time does not fall as
        either grows)."""
        return any(
            family_of(p) == family_of(c)
            and p.gpus == c.gpus
            and p.micro_batch <= c.micro_batch
            and p.grad_accum <= c.grad_accum
            for p in self.misses
        )

    def needs_ckpt(self, c: Config) -> bool:
        """Checkpointing only where the same settings without it run out of memory: they did
        (a sure OOM), or under bf16/fp16 they must (twice fp32's OOM: :meth:`half_precision_cap`,
        so bf16 with checkpointing is tried where fp32's wall also caps bf16 without it)."""
        plain = family_of(c)._replace(ckpt=False)  # the rules read c's GPUs and sharding only
        wall = min(self.sure_oom(plain, c), self._half_precision_cap(plain, c) + 1)
        return wall <= self.space.index(c.micro_batch)

    # ---- predictions ------------------------------------------------------------------------

    def predict(self, model: StepModel, c: Config) -> Prediction:
        """``c`` as ``model`` predicts it against the goal. It may meet the SLA (``ok``) when
        it does within the model's uncertainty (:func:`uncertainty`): a constraint on a knife
        edge is settled by measuring, not by a model a few percent off; ``violation`` is the
        plain prediction's."""
        goal = self.goal
        rate = model.samples_per_s(c.gpus, c.micro_batch, c.grad_accum) * self.unit
        lat = model.latency_ms(c.gpus, c.micro_batch, c.grad_accum)
        u = uncertainty(model)
        violation = 0.0
        ok = True
        if goal.floor is not None:
            violation += max(goal.floor - rate, 0.0) / goal.floor
            ok = rate * (1.0 + u) >= goal.floor
        if goal.ceiling_ms is not None:
            violation += max(lat - goal.ceiling_ms, 0.0) / goal.ceiling_ms
            ok = ok and lat * (1.0 - u) <= goal.ceiling_ms
        value = goal.value_of(c.gpus, rate, self.watts) if math.isfinite(rate) else goal.worst
        if not math.isfinite(rate):
            value = 0.0 if goal.direction == "minimize" else math.inf
        return Prediction(ok, value, violation, c)

    def on_gpus(self, c: Config, gpus: int) -> Config | None:
        """``c`` on ``gpus`` GPUs: the same micro-batch and accumulation, or with a global batch
        to keep the split of it on ``gpus`` whose micro-batch is nearest ``c``'s (the memory
        per GPU that matters)."""
        space = self.space
        if space.global_batches is None:
            return dataclasses.replace(c, gpus=gpus)
        splits = space.splits(gpus, c.global_batch) if gpus >= 1 else ()
        if not splits:
            return None
        m, a = min(splits, key=lambda s: abs(math.log(s[0] / c.micro_batch)))
        return dataclasses.replace(c, micro_batch=m, grad_accum=a, gpus=gpus)


def uncertainty(model: StepModel) -> float:
    """How far off a prediction may be: the model's largest error on its own samples, at least
    :data:`TOLERANCE` (a model fitted exactly to a few points is not exact elsewhere), at most
    :data:`MAX_UNCERTAINTY` (past that the model says little, and the walks measure anyway)."""
    return min(max(model.error, TOLERANCE), MAX_UNCERTAINTY)


def fit_samples(fam: Family, by_family: Mapping[Family, list[Sample]]) -> list[Sample]:
    """The samples a family's model is fitted on. A sharded family (FSDP) of data parallelism
    alone also takes the one-GPU runs of its settings, which are recorded under DDP (on one
    GPU they are the same run) and pin its per-sample compute; its own multi-GPU runs fit its
    sync cost. (A tensor or pipeline plan is not the one-GPU run: it takes none.)"""
    own = by_family.get(fam, [])
    if fam.sharding == "ddp" or fam.tp * fam.pp > 1 or not own:
        return own
    one_gpu = fam._replace(sharding="ddp", zero=0)
    single = [s for s in by_family.get(one_gpu, []) if s.gpus == 1]
    return own + single


def _median(values: list[float]) -> float | None:
    """The upper median (``None`` for no values)."""
    return sorted(values)[len(values) // 2] if values else None
