"""Our strategy: model-guided search under the SLA, with hard monotone pruning.

Each step fits a performance model (``perfmodel``: Pollux's step-time model, linear in six
coefficients) to the trials of each family of settings (precision, checkpointing, compile,
sharding; gradient accumulation and GPU count are inside the model), predicts every config not
measured yet, and profiles the one predicted best under the SLA. It stops when no config is
predicted to beat the best measured one by more than ``min_gain``. What the data cannot tell
apart is settled on the fast side (sync before any multi-GPU run, accumulation before one is
measured; see ``perfmodel``), so the search measures such regimes before ruling them out
(optimism in the face of uncertainty). A family measured at one config borrows the best
family's model, scaled through that point.

Hard rules, which no prediction overrides (hand-written: Optuna's samplers know nothing of
them):

- Memory: micro-batches grow by galloping from the largest known fit, and after an OOM by
  bisection between the largest fit and the smallest OOM; nothing at or above a known OOM is
  tried, and under bf16 or fp16 nothing at or above twice fp32's OOM (autocast at best halves the
  activations; weights and optimizer state stay fp32). With DDP memory does not depend on
  the GPU count, but a fit is only *certain* at fewer GPUs than where it was seen, and an
  OOM at more (the Pollux tables cap the global batch).
  FSDP shards the model, so its memory per GPU falls as GPUs are added: there a fit is
  certain at more GPUs and an OOM at fewer. A sharded family's walk starts on two GPUs (on one
  GPU every sharding is the same run).
- Latency: step time does not fall when the micro-batch or the accumulation grows, so a
  ceiling missed at micro-batch ``b`` is missed at ``2b`` with the same other settings.
- Activation checkpointing only adds work: it is tried only at micro-batches that do not fit
  without it.

Verdict: an SLA is reported infeasible only after each family's extreme config for the missed
constraint and the closest config's untried neighbours have been measured and missed, so one
bad prediction cannot hide a feasible config next to the closest.
"""

from __future__ import annotations

import dataclasses
import math
from collections import defaultdict
from collections.abc import Callable

from orchestrator.tuner.history import History
from orchestrator.tuner.perfmodel import Sample, StepModel, fit_step_model
from orchestrator.tuner.space import Config
from orchestrator.tuner.strategies.base import Ask, SearchStrategy

__all__ = ["SLASearchStrategy"]

# (sharding, precision, activation_checkpointing, compile): one step-time model, and one memory
# limit, per family (accumulation and GPU count are inside the model).
Family = tuple[str, str, bool, bool]


def _family(c: Config) -> Family:
    return (c.sharding, c.precision, c.activation_checkpointing, c.compile)


def _with_single_gpu(fam: Family, by_family: dict[Family, list[Sample]]) -> list[Sample]:
    """The samples a family's model is fitted on. A sharded family (FSDP) also takes the
    one-GPU runs of its settings, which are recorded under DDP (on one GPU they are the same
    run) and pin its per-sample compute; its own multi-GPU runs fit its sync cost."""
    own = by_family.get(fam, [])
    if fam[0] == "ddp" or not own:
        return own
    single = [s for s in by_family.get(("ddp", *fam[1:]), []) if s.gpus == 1]
    return own + single


class SLASearchStrategy(SearchStrategy):
    """Model-guided search with monotone pruning (see module doc).

    Args:
        seed: unused (the strategy is deterministic).
        min_gain: stop when nothing is predicted to beat the best by more than this fraction.
    """

    name = "sla"

    def __init__(self, seed: int = 0, min_gain: float = 0.01) -> None:
        super().__init__(seed)
        self.min_gain = min_gain

    def next_config(self, history: History) -> Config | Ask | None:
        """The config predicted best under the SLA among those the hard rules allow."""
        space, goal = history.space, history.goal
        ladder = space.micro_batches
        by_family: dict[Family, list[Sample]] = defaultdict(list)
        fits: dict[Family, list[tuple[int, int]]] = defaultdict(list)  # (gpus, index)
        ooms: dict[Family, list[tuple[int, int]]] = defaultdict(list)
        misses: list[Config] = []  # latency ceiling missed
        work_unit: list[float] = []
        for r in history.points():
            c, m = r.config, r.measurement
            idx = space.index(c.micro_batch)
            if m.status == "oom":
                ooms[_family(c)].append((c.gpus, idx))
                continue
            if not m.ok or not m.samples_per_s:
                continue
            fits[_family(c)].append((c.gpus, idx))
            step = c.gpus * c.micro_batch * c.grad_accum / m.samples_per_s
            lat = goal.latency(m)
            ratio = lat / (step * 1000.0) if lat else 1.0
            by_family[_family(c)].append(Sample(c.gpus, c.micro_batch, c.grad_accum, step, ratio))
            rate = goal.rate(m)
            if rate:
                work_unit.append(rate / m.samples_per_s)
            if goal.ceiling_ms is not None and lat is not None and lat > goal.ceiling_ms:
                misses.append(c)
        unit = sorted(work_unit)[len(work_unit) // 2] if work_unit else 1.0
        # The best config so far, else (nothing feasible yet) the fastest measured.
        ran = [r for r in history.points() if r.measurement.ok and r.measurement.samples_per_s]
        lead = history.best.config if history.best is not None else None
        if lead is None and ran:
            lead = max(ran, key=lambda r: r.measurement.samples_per_s or 0.0).config
        models = {
            f: fit_step_model(_with_single_gpu(f, by_family), space.gpus_per_node)
            for f in list(by_family)
        }
        priors = self._scaled_priors(models, by_family, history)
        models.update(priors)

        def sure_oom(f: Family, c: Config) -> int:
            """The smallest ladder index of family ``f`` certain to run out of memory at
            ``c``'s GPU count: an OOM seen at fewer GPUs under DDP (memory does not fall with
            more), at more GPUs under FSDP (its shards shrink as GPUs are added)."""
            return min(
                (i for g, i in ooms[f] if (g <= c.gpus if c.sharding == "ddp" else g >= c.gpus)),
                default=len(ladder),
            )

        def bracket(c: Config) -> tuple[int, int, int, int]:
            """For the memory settings of ``c``: the largest index sure to fit, the largest
            seen to fit, the smallest sure OOM, the smallest seen OOM (a fit is certain at
            fewer GPUs than where it was seen, an OOM at more; under FSDP, whose shards shrink
            as GPUs are added, the other way round)."""
            f = _family(c)
            sure = max(
                (i for g, i in fits[f] if (g >= c.gpus if c.sharding == "ddp" else g <= c.gpus)),
                default=-1,
            )
            oom = sure_oom(f, c)
            seen = max((i for _, i in fits[f]), default=-1)
            oom_seen = min((i for _, i in ooms[f]), default=len(ladder))
            return sure, seen, oom, oom_seen

        def cap(c: Config) -> int:
            """The largest ladder index the memory rules allow: below a known OOM, and no
            more than a gallop (index 2i + 2) above the largest known fit; under bf16/fp16
            below twice fp32's OOM. A family with no fit yet starts at the largest micro-batch
            a family with its memory settings fitted, or at the leading config's if that is
            smaller (its first run is compared with theirs where it matters; an OOM there is
            bisected)."""
            sure, seen, oom, _ = bracket(c)
            known = max(sure, seen)
            if known >= 0:
                reach = 2 * known + 2
            else:
                # Same sharding and checkpointing (memory differs across them); under FSDP
                # only fits at as many GPUs or fewer (its shards shrink with more GPUs).
                reach = max(
                    (
                        i
                        for f, seen_fits in fits.items()
                        if f[0] == c.sharding and f[2] == c.activation_checkpointing
                        for g, i in seen_fits
                        if c.sharding == "ddp" or g <= c.gpus
                    ),
                    default=0,
                )
                # No higher than the leading config's micro-batch when it has the same memory
                # settings: the comparison that matters is there, and a larger micro-batch
                # past the throughput peak is the costlier trial.
                if lead is not None and (lead.sharding, lead.activation_checkpointing) == (
                    c.sharding,
                    c.activation_checkpointing,
                ):
                    reach = min(reach, space.index(lead.micro_batch))
            return min(oom - 1, reach, half_precision_cap(c), len(ladder) - 1)

        def half_precision_cap(c: Config) -> int:
            """Under autocast to bf16 or fp16 the weights, gradients and optimizer state stay
            fp32 and at best the activations halve, so a micro-batch twice fp32's certain OOM
            (same other settings) runs out of memory too: the largest index below it."""
            if c.precision == "fp32":
                return len(ladder) - 1
            oom = sure_oom((c.sharding, "fp32", c.activation_checkpointing, c.compile), c)
            if oom == len(ladder):
                return oom - 1
            limit = 2 * ladder[oom]
            return max(i for i, m in enumerate(ladder) if m < limit)  # ladder[0] <= ladder[oom]

        def memory_step(c: Config) -> Config:
            """Bisection: a config above the largest sure fit, at or above an OOM seen (at
            any GPU count), is replaced by the midpoint of that bracket on its line until the
            boundary is found."""
            sure, _, _, oom = bracket(c)
            idx = space.index(c.micro_batch)
            mid = (sure + oom) // 2
            if oom < len(ladder) and sure < idx and mid < idx:
                probe = dataclasses.replace(c, micro_batch=ladder[max(mid, 0)])
                if history.untried(probe):
                    return probe
            return c

        def missed(c: Config) -> bool:
            return any(
                _family(p) == _family(c)
                and p.gpus == c.gpus
                and p.micro_batch <= c.micro_batch
                and p.grad_accum <= c.grad_accum
                for p in misses
            )

        def needs_ckpt(c: Config) -> bool:
            """Checkpointing only where the same settings without it ran out of memory."""
            base = (c.sharding, c.precision, False, c.compile)
            return sure_oom(base, c) <= space.index(c.micro_batch)

        best = history.best

        def promising(fam: Family) -> bool:
            """Whether the family's model, fitted on its first points, predicts any of its
            configs below a known OOM to beat the best by more than ``min_gain``, or, with
            nothing feasible yet, to come closer to the SLA than the closest measured (no
            model, or nothing measured: yes). A family with one point is judged by another
            family's model scaled to that point."""
            model = models.get(fam)
            closest = history.closest
            if model is None or (len(by_family[fam]) < 2 and fam not in priors):
                return True
            if best is None and closest is None:
                return True
            for c in space.configs():
                if _family(c) != fam or missed(c) or space.index(c.micro_batch) >= bracket(c)[2]:
                    continue
                ok, value, violation = self._predict(model, c, unit, history)
                if best is not None:
                    if ok and goal.better(value, best.verdict.value, self.min_gain):
                        return True
                elif ok or (
                    closest is not None and violation < closest.verdict.violation - self.min_gain
                ):
                    return True
            return False

        # First, per family, the walk up the smallest line (fewest GPUs, least accumulation):
        # galloping then bisection to the largest micro-batch that fits (or to the first
        # latency miss), which also spreads the samples the model is fitted on. Once a family
        # has two points, its walk goes on only while its model sees something to gain there:
        # a family slower everywhere (bf16 on a CPU) is not walked to its memory limit.
        for fam in sorted(
            {_family(c) for c in space.configs()},
            key=lambda f: (f[2], f[3], space.precisions.index(f[1]), f[0]),
        ):
            # A sharded family shows only on more than one GPU (one GPU is the same run under
            # any sharding), so its line starts at the fewest GPUs above one.
            g0 = min((g for g in space.gpus if g > 1 or fam[0] == "ddp"), default=0)
            if g0 == 0:
                continue
            first = Config(ladder[0], min(space.grad_accums), g0, *fam)
            if not space.contains(first) or (fam[2] and not needs_ckpt(first)):
                continue
            top = cap(first)
            if top < 0:
                continue  # the smallest micro-batch does not fit: nothing of this family runs
            walk = memory_step(dataclasses.replace(first, micro_batch=ladder[top]))
            if history.untried(walk) and not missed(walk) and promising(fam):
                return walk

        scored: list[tuple[bool, float, float, Config]] = []
        for c in space.configs():
            if not history.untried(c) or space.index(c.micro_batch) > cap(c):
                continue
            if missed(c) or (c.activation_checkpointing and not needs_ckpt(c)):
                continue
            model = models.get(_family(c))
            if model is None:
                continue
            ok, value, violation = self._predict(model, c, unit, history)
            scored.append((ok, value, violation, c))

        feasible = [s for s in scored if s[0]]
        if feasible:
            top_value = feasible[0][1]
            for s in feasible[1:]:
                if goal.better(s[1], top_value):
                    top_value = s[1]
            # Among configs predicted as good as the top (within a tenth of min_gain: before
            # the first multi-GPU run sync reads as zero, so every GPU count ties), the fewest
            # GPUs and the least accumulation: the cheaper trial, and sync only adds cost.
            pick = min(
                (s for s in feasible if not goal.better(top_value, s[1], self.min_gain / 10)),
                key=lambda s: (s[3].gpus, s[3].grad_accum),
            )
            if best is None or goal.better(top_value, best.verdict.value, self.min_gain):
                return memory_step(pick[3])
        if best is not None:
            # The model sees nothing better: check the best config's untried neighbours (one
            # GPU more or fewer, the next micro-batch up or down) -- the model is smooth and
            # real clusters are not, so the last steps are local search (hill climbing).
            return self._neighbour(best.config, scored, history)
        if not scored:
            return None
        # Nothing predicted feasible: measure the config predicted closest to the SLA while
        # it is predicted closer than the closest measured. Then, before the verdict: the
        # extreme config of each family for the missed constraint (most GPUs at the largest
        # micro-batch that may fit for a floor, the smallest micro-batch on the fewest GPUs
        # for a ceiling), and the closest config's untried neighbours (as for the best
        # above): a model fitted on a few points must not be what declares an SLA infeasible.
        pick = min(scored, key=lambda s: s[2])
        closest = history.closest
        if closest is None or pick[2] < closest.verdict.violation - self.min_gain:
            return memory_step(pick[3])
        for fam in models:
            probe = self._extreme(fam, history, cap)
            if probe is not None and history.untried(probe) and not missed(probe):
                return memory_step(probe)
        return self._neighbour(closest.config, scored, history, by_violation=True)

    @staticmethod
    def _scaled_priors(
        models: dict[Family, StepModel | None],
        by_family: dict[Family, list[Sample]],
        history: History,
    ) -> dict[Family, StepModel]:
        """For each family measured at a single config: the reference family's model
        (the best config's, else the most measured) scaled through that point. A least-squares
        fit to one point is arbitrary; this prior says "same shape, this much faster or
        slower", so one run of bf16 at the micro-batch that matters is enough to drop it."""

        def points(f: Family) -> int:
            # Its own configs: a sharded family's borrowed one-GPU runs do not shape it.
            return len({(x.gpus, x.micro_batch, x.grad_accum) for x in by_family[f]})

        best = history.best
        ref: Family | None = None
        if best is not None and points(_family(best.config)) >= 2:
            ref = _family(best.config)
        else:
            shaped = [f for f in by_family if points(f) >= 2]
            ref = max(shaped, key=lambda f: (len(by_family[f]), f), default=None)
        model = models.get(ref) if ref is not None else None
        if model is None:
            return {}
        return {
            f: model.scaled_to(by_family[f][0]) for f in by_family if f != ref and points(f) == 1
        }

    @staticmethod
    def _neighbour(
        c: Config,
        scored: list[tuple[bool, float, float, Config]],
        history: History,
        *,
        by_violation: bool = False,
    ) -> Config | None:
        space, goal = history.space, history.goal
        idx = space.index(c.micro_batch)
        near = {
            dataclasses.replace(c, gpus=c.gpus - 1),
            dataclasses.replace(c, gpus=c.gpus + 1),
        }
        if idx > 0:
            near.add(dataclasses.replace(c, micro_batch=space.micro_batches[idx - 1]))
        if idx + 1 < len(space.micro_batches):
            near.add(dataclasses.replace(c, micro_batch=space.micro_batches[idx + 1]))
        # The same samples per step split another way (micro-batch 64 x 2 for 128 x 1): the
        # model says accumulation only adds overhead, but a smaller micro-batch can run faster
        # per sample when it fits in a cache.
        work = c.micro_batch * c.grad_accum
        for a in space.grad_accums:
            if a != c.grad_accum and work % a == 0 and work // a in space.micro_batches:
                near.add(dataclasses.replace(c, micro_batch=work // a, grad_accum=a))
        allowed = [s for s in scored if s[3] in near]
        if not allowed:
            return None
        if by_violation:
            return min(allowed, key=lambda s: s[2])[3]
        pick = allowed[0]
        for s in allowed[1:]:
            if (s[0], 0.0) > (pick[0], 0.0) or (s[0] == pick[0] and goal.better(s[1], pick[1])):
                pick = s
        return pick[3]

    @staticmethod
    def _extreme(fam: Family, history: History, cap: Callable[[Config], int]) -> Config | None:
        space, goal = history.space, history.goal
        sharding, precision, ckpt, comp = fam
        if goal.ceiling_ms is not None:
            c = Config(
                space.micro_batches[0],
                min(space.grad_accums),
                min(space.gpus),
                sharding,
                precision,
                ckpt,
                comp,
            )
        else:
            g = max(space.gpus)
            c = Config(
                space.micro_batches[0], max(space.grad_accums), g, sharding, precision, ckpt, comp
            )
            top = cap(c)
            if top < 0:
                return None
            c = dataclasses.replace(c, micro_batch=space.micro_batches[top])
        return c if space.contains(c) else None

    @staticmethod
    def _predict(
        model: StepModel, c: Config, unit: float, history: History
    ) -> tuple[bool, float, float]:
        """(feasible, objective value, total violation) as the model predicts them."""
        goal = history.goal
        rate = model.samples_per_s(c.gpus, c.micro_batch, c.grad_accum) * unit
        lat = model.latency_ms(c.gpus, c.micro_batch, c.grad_accum)
        violation = 0.0
        if goal.floor is not None and rate < goal.floor:
            violation += (goal.floor - rate) / goal.floor
        if goal.ceiling_ms is not None and lat > goal.ceiling_ms:
            violation += (lat - goal.ceiling_ms) / goal.ceiling_ms
        value = goal.value_of(c.gpus, rate) if math.isfinite(rate) else goal.worst
        if not math.isfinite(rate):
            value = 0.0 if goal.direction == "minimize" else math.inf
        return violation == 0.0, value, violation
