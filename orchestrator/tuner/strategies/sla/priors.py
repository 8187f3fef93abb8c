"""Borrowed models: how a family with too few runs of its own is predicted.

A family (sharding, precision, activation checkpointing, compile) has one step-time model
(``perfmodel``). Fitted on one point a least-squares model is arbitrary, so a family measured at
a single config gets the reference family's model (the best config's, else the most measured)
scaled through that point: "same shape, this much faster or slower", so one run of bf16 at the
micro-batch that matters is enough to drop it.

A family not measured at all, which the measurements point to, enters with a prior from its
measured neighbour (issue 22 part 6), so that it is scored, measured where it is predicted to
win or to meet the SLA, and never ruled out for want of a model:

- activation checkpointing: its sibling without it, per-sample compute times
  :data:`RECOMPUTE` (checkpointing recomputes the forward pass, about a third of a training
  step's compute (Chen et al., 2016); 1.25 is the optimistic end, so the family is measured
  rather than ruled out where it may win);
- FSDP: its DDP sibling, sync times :data:`FSDP_SYNC` (ZeRO-3 moves 1.5x DDP's gradient
  volume: Rajbhandari et al., SC'20, sec. 7.2.2). DDP's model of a one-GPU family syncs for
  free, so before any multi-GPU run FSDP too is predicted at its most useful.

- a team's own declared settings (``SearchSpace.settings``, a command job's script
  settings): the family with the space's first choice of them (the default), times the ratio
  the same settings showed against their default in a family where both were measured. Such a
  setting's effect is learned once, on the families walked first, not crossed with every
  precision, sharding and GPU count: ``steps.walk`` walks those families last, and not at all
  once they have this prior.

Precision and compile get no such prior: their effect is device-specific (bf16 is slower on
many CPUs), so those families are walked and judged from their own first run.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from dataclasses import dataclass
from typing import NamedTuple

from orchestrator.tuner.perfmodel import Sample, StepModel
from orchestrator.tuner.space import Config, SearchSpace

__all__ = [
    "FSDP_SYNC",
    "RECOMPUTE",
    "Family",
    "family_of",
    "model_priors",
    "neighbour_priors",
    "scaled_priors",
    "space_index",
]

RECOMPUTE = 1.25
FSDP_SYNC = 1.5


class Family(NamedTuple):
    """Settings with one step-time model and one memory limit (accumulation and GPU count are
    inside the model): sharding, precision, activation checkpointing, compile, and the parallel
    plan's tensor and pipeline degrees and ZeRO stage (a plan changes the shape of the step
    time, with per-layer all-reduces or a pipeline bubble, and the memory per rank: configs of
    two plans are never pooled in one model). Data parallelism alone is ``tp = pp = 1``, its
    ZeRO stage 0 under DDP and 3 under FSDP. A command job's script settings
    (``Config.settings``) are part of the family: they may change the model itself."""

    sharding: str
    precision: str
    ckpt: bool | float  # a share of the blocks under selective checkpointing
    compile: bool
    tp: int = 1
    pp: int = 1
    zero: int = 0
    settings: tuple[tuple[str, str], ...] = ()

    @property
    def layout(self) -> tuple[str, int, int, int]:
        """How the family shares its GPUs (its sharding and plan): one setting, for
        ``steps.siblings``."""
        return (self.sharding, self.tp, self.pp, self.zero)


def family_of(c: Config) -> Family:
    """The family of a config."""
    return Family(
        c.sharding,
        c.precision,
        c.activation_checkpointing,
        c.compile,
        c.tp,
        c.pp,
        c.zero,
        c.settings,
    )


@dataclass(frozen=True)
class SpaceIndex:
    """A space's configs grouped once for the strategy (a space is immutable; the strategy
    reads them at every decision).

    Attributes:
        configs: every config, in the space's order.
        position: each config's place in that order (ties between predictions go by it).
        by_family: each family's configs, in that order.
        by_count: each (family, GPU count)'s configs, in that order.
    """

    configs: tuple[Config, ...]
    position: Mapping[Config, int]
    by_family: Mapping[Family, tuple[Config, ...]]
    by_count: Mapping[tuple[Family, int], tuple[Config, ...]]


@functools.lru_cache(maxsize=16)
def space_index(space: SearchSpace) -> SpaceIndex:
    """The :class:`SpaceIndex` of ``space`` (built once per space)."""
    configs = tuple(space.configs())
    by_family: dict[Family, list[Config]] = {}
    by_count: dict[tuple[Family, int], list[Config]] = {}
    for c in configs:
        f = family_of(c)
        by_family.setdefault(f, []).append(c)
        by_count.setdefault((f, c.gpus), []).append(c)
    return SpaceIndex(
        configs,
        {c: i for i, c in enumerate(configs)},
        {f: tuple(cs) for f, cs in by_family.items()},
        {k: tuple(cs) for k, cs in by_count.items()},
    )


def _points(by_family: Mapping[Family, list[Sample]], f: Family) -> int:
    """A family's own distinct configs (a sharded family's borrowed one-GPU runs do not shape
    it)."""
    return len({(x.gpus, x.micro_batch, x.grad_accum) for x in by_family.get(f, ())})


def reference(
    fitted: Mapping[Family, StepModel],
    by_family: Mapping[Family, list[Sample]],
    best: Config | None,
) -> Family | None:
    """The family whose model shapes the others': the best config's, if measured at two
    configs or more, else the most measured such family."""
    if best is not None and _points(by_family, family_of(best)) >= 2:
        return family_of(best)
    shaped = [f for f in by_family if _points(by_family, f) >= 2]
    return max(shaped, key=lambda f: (len(by_family[f]), f), default=None)


def scaled_priors(
    fitted: Mapping[Family, StepModel],
    by_family: Mapping[Family, list[Sample]],
    best: Config | None,
) -> dict[Family, StepModel]:
    """For each family measured at a single config: the reference family's model scaled
    through that point (see the module doc)."""
    ref = reference(fitted, by_family, best)
    model = fitted.get(ref) if ref is not None else None
    if model is None:
        return {}
    return {
        f: model.scaled_to(by_family[f][0])
        for f in by_family
        if f != ref and _points(by_family, f) == 1
    }


def neighbour_priors(
    models: Mapping[Family, StepModel], space: SearchSpace
) -> dict[Family, StepModel]:
    """For each family of ``space`` with no model: its measured neighbour's model changed as
    the module doc says (checkpointing from the sibling without it, FSDP from the DDP sibling;
    a family that is both takes either route, in that order)."""
    known = dict(models)
    out: dict[Family, StepModel] = {}
    default = space.setting_choices()[0]
    # neighbours first: no checkpointing before checkpointing, DDP before FSDP
    families = sorted(space_index(space).by_family, key=lambda f: (f[2], f[0] != "ddp", f))
    for f in families:
        if f in known:
            continue
        plain = known.get(f._replace(ckpt=False)) if f.ckpt else None
        ddp = known.get(f._replace(sharding="ddp", zero=0)) if f.sharding != "ddp" else None
        if plain is not None:
            out[f] = known[f] = plain.with_factors(compute=RECOMPUTE)
        elif ddp is not None:
            out[f] = known[f] = ddp.with_factors(sync=FSDP_SYNC)
        elif f.settings != default:
            base = known.get(f._replace(settings=default))
            k = _settings_ratio(models, f.settings, default, space)
            if base is not None and k is not None:
                out[f] = known[f] = base.with_factors(step=k)
    return out


def _settings_ratio(
    models: Mapping[Family, StepModel],
    settings: tuple[tuple[str, str], ...],
    default: tuple[tuple[str, str], ...],
    space: SearchSpace,
) -> float | None:
    """How much slower (> 1) or faster a step is with ``settings`` than with ``default``, as a
    family measured with both predicts it at one GPU and the ladder's middle micro-batch
    (``None``: no such family)."""
    m = space.micro_batches[len(space.micro_batches) // 2]
    for f in sorted(models):
        base = models.get(f._replace(settings=default))
        if f.settings != settings or base is None:
            continue
        t0 = base.step_s(1, m, 1)
        if t0 > 0:
            return models[f].step_s(1, m, 1) / t0
    return None


def model_priors(
    fitted: Mapping[Family, StepModel],
    by_family: Mapping[Family, list[Sample]],
    best: Config | None,
    space: SearchSpace,
) -> tuple[dict[Family, StepModel], dict[Family, StepModel]]:
    """Every borrowed model: the scaled priors of one-point families, and the neighbour
    priors of families not measured at all."""
    scaled = scaled_priors(fitted, by_family, best)
    return scaled, neighbour_priors({**fitted, **scaled}, space)
