"""The named steps of the SLA strategy: each a pure function of the :class:`Evidence`.

:meth:`SLASearchStrategy.next_config` tries them in order and takes the first proposal:

1. :func:`walk` - per family, the walk up its first line (galloping, then bisection) while the
   family's model sees something to gain there;
2. :func:`exploit` - the config predicted best under the SLA, while it is predicted to beat
   the best measured by more than ``min_gain``;
3. with something feasible: :func:`neighbour` of the best (local search);
4. with nothing feasible: :func:`approach` (the config predicted closest, while closer than
   the closest measured), then :func:`extreme` of each family for the missed constraint, then
   the closest config's neighbours on every axis (:func:`axis_neighbours`); ``None`` is the
   infeasible verdict, and it comes only once none of them is left open (the neighbour rule).
"""

from __future__ import annotations

import dataclasses
import math

from orchestrator.tuner.space import Config
from orchestrator.tuner.strategies.sla.evidence import Evidence, Prediction
from orchestrator.tuner.strategies.sla.priors import Family, family_of

__all__ = [
    "approach",
    "axis_neighbours",
    "exploit",
    "extreme",
    "first_line",
    "neighbour",
    "open_neighbours",
    "promising",
    "score",
    "siblings",
    "verdict_guard",
    "walk",
]


def first_line(ev: Evidence, fam: Family, gpus: int) -> Config | None:
    """The smallest micro-batch of a family's first line on ``gpus`` GPUs: the least
    accumulation, or with a global batch to keep the largest one (the line with the most
    micro-batches to walk)."""
    mine = ev.index.by_count.get((fam, gpus), ())
    if not mine:
        return None
    if ev.space.global_batches is None:
        return min(mine, key=lambda c: (c.grad_accum, c.micro_batch))
    return min(mine, key=lambda c: (-c.global_batch, c.micro_batch))


def _walk_line(ev: Evidence, fam: Family) -> Config | None:
    """The foot of the line a family's walk goes up: on the fewest GPUs, or for a sharded
    family the fewest above one (one GPU is the same run under any sharding) where its
    smallest micro-batch is not sure to run out of memory (FSDP's shards shrink as GPUs are
    added, so a model too large for two GPUs may fit on four)."""
    counts = [g for g in ev.space.gpus if g > 1 or fam[0] == "ddp"]
    if fam[0] == "ddp":  # the fewest GPUs the family has configs on (a plan: tp x pp at least)
        return next((f for g in counts if (f := first_line(ev, fam, g)) is not None), None)
    for g in counts:
        first = first_line(ev, fam, g)
        if first is not None and ev.space.index(first.micro_batch) < ev.bracket(first)[2]:
            return first
    return None


def promising(ev: Evidence, fam: Family, min_gain: float) -> bool:
    """Whether the family's model, fitted on its first points, predicts any of its configs
    below a known OOM to beat the best by more than ``min_gain``, or, with nothing feasible
    yet, to come closer to the SLA than the closest measured (no model, or nothing measured:
    yes). A family with one point is judged by another family's model scaled to that point."""
    model = ev.models.get(fam)
    best, closest = ev.best, ev.closest
    if model is None or (len(ev.by_family.get(fam, ())) < 2 and fam not in ev.priors):
        return True
    if best is None and closest is None:
        return True
    for c in ev.index.by_family.get(fam, ()):
        if ev.missed(c) or ev.space.index(c.micro_batch) >= ev.bracket(c)[2]:
            continue
        p = ev.predict(model, c)
        if best is not None:
            if p.ok and ev.goal.better(p.value, best.verdict.value, min_gain):
                return True
        elif p.ok or (closest is not None and p.violation < closest.verdict.violation - min_gain):
            return True
    return False


def walk(ev: Evidence, min_gain: float, *, checkpointing: bool = False) -> Config | None:
    """Per family, the walk up the smallest line (fewest GPUs, least accumulation): galloping
    then bisection to the largest micro-batch that fits (or to the first latency miss), which
    also spreads the samples the model is fitted on. Once a family has two points, its walk goes
    on only while its model sees something to gain there: a family slower everywhere (bf16 on a
    CPU) is not walked to its memory limit. ``checkpointing``: the families with activation
    checkpointing (walked where their sibling without it ran out of memory at the line's
    smallest micro-batch), else those without."""
    space = ev.space
    default = space.setting_choices()[0]
    for fam in sorted(
        (f for f in ev.index.by_family if f[2] == checkpointing),
        # by expected effect: the batch split, GPU count and plan, precision and memory savers
        # before a team's own settings (whose effect, once measured, is carried to the other
        # families by a prior: ``priors``); the family itself last, so families alike but for
        # their plan go in one order whatever the process's string hashing
        key=lambda f: (f.settings != default, f[2], f[3], space.precisions.index(f[1]), f[0], f),
    ):
        if fam.settings != default and fam in ev.entered:
            continue  # its settings' effect is learned: scored with the prior, not walked
        first = _walk_line(ev, fam)
        if first is None or (fam[2] and not ev.needs_ckpt(first)):
            continue
        start = ev.at_cap(first)
        if start is None:
            continue  # the smallest micro-batch does not fit: nothing of this family runs
        step = ev.memory_step(start)
        if ev.untried(step) and not ev.missed(step) and promising(ev, fam, min_gain):
            return step
    return None


def score(ev: Evidence) -> list[Prediction]:
    """Every untried config the hard rules allow, as its family's model predicts it."""
    out: list[Prediction] = []
    for fam, configs in ev.index.by_family.items():
        model = ev.models.get(fam)
        if model is None:
            continue
        for c in configs:
            if not ev.untried(c) or ev.space.index(c.micro_batch) > ev.cap(c):
                continue
            if ev.missed(c) or (c.activation_checkpointing and not ev.needs_ckpt(c)):
                continue
            out.append(ev.predict(model, c))
    out.sort(key=lambda p: ev.index.position[p.config])  # the space's order: ties go by it
    return out


def exploit(ev: Evidence, scored: list[Prediction], min_gain: float) -> Config | None:
    """The config predicted best under the SLA, while it beats the best measured by more than
    ``min_gain``. Among configs predicted as good as the top (within a tenth of ``min_gain``:
    before the first multi-GPU run sync reads as zero, so every GPU count ties), the fewest GPUs
    and the least accumulation: the cheaper trial, and sync only adds cost."""
    goal, best = ev.goal, ev.best
    feasible = [p for p in scored if p.ok]
    if not feasible:
        return None
    top = feasible[0].value
    for p in feasible[1:]:
        if goal.better(p.value, top):
            top = p.value
    pick = min(
        (p for p in feasible if not goal.better(top, p.value, min_gain / 10)),
        key=lambda p: (p.config.gpus, p.config.grad_accum),
    )
    if best is None or goal.better(top, best.verdict.value, min_gain):
        return ev.memory_step(pick.config)
    return None


def neighbour(
    ev: Evidence, c: Config, scored: list[Prediction], *, by_violation: bool = False
) -> Config | None:
    """The best-predicted untried neighbour of ``c`` (the next GPU count up or down, the next
    micro-batch up or down on its line, the same samples per step split another way, its
    :func:`siblings` in the other families): the
    model is smooth and real clusters are not, so the last steps are local search (hill
    climbing). ``by_violation``: the one predicted closest to the SLA."""
    space, goal = ev.space, ev.goal
    counts = space.gpus
    i = counts.index(c.gpus) if c.gpus in counts else 0
    adjacent = counts[max(i - 1, 0) : i + 2]  # the next GPU counts of the space either side
    near = {n for g in adjacent if g != c.gpus and (n := ev.on_gpus(c, g)) is not None}
    # checkpointing is scored only where it is needed: elsewhere the neighbour is without it
    near = {
        dataclasses.replace(n, activation_checkpointing=False)
        if n.activation_checkpointing and not ev.needs_ckpt(n)
        else n
        for n in near
    }
    line = space.line(c)
    if c in line:  # the next micro-batch down and up on its line (its global batch kept)
        i = line.index(c)
        near.update(line[max(i - 1, 0) : i + 2])
        near.discard(c)
    # The same samples per step split another way (micro-batch 64 x 2 for 128 x 1): the model
    # says accumulation only adds overhead, but a smaller micro-batch can run faster per sample
    # when it fits in a cache.
    work = c.micro_batch * c.grad_accum
    for a in space.grad_accums:
        if a != c.grad_accum and work % a == 0 and work // a in space.micro_batches:
            near.add(dataclasses.replace(c, micro_batch=work // a, grad_accum=a))
    near.update(siblings(ev, c))
    near.update(axis_neighbours(ev, c))
    allowed = [p for p in scored if p.config in near]
    if not allowed:
        return None
    if by_violation:
        return min(allowed, key=lambda p: p.violation).config
    pick = allowed[0]
    for p in allowed[1:]:
        if p.ok > pick.ok or (p.ok == pick.ok and goal.better(p.value, pick.value)):
            pick = p
    return pick.config


def siblings(ev: Evidence, c: Config) -> list[Config]:
    """``c`` with one family setting changed (another precision, sharding, checkpointing or
    compile), at the largest micro-batch of its line the memory rules allow there: a family
    judged by a model scaled through one run (a precision that speeds up compute but not the
    per-step overhead) is compared with the best where it matters."""
    space = ev.space
    out: list[Config] = []
    mine = family_of(c)
    for f in set(ev.index.by_family) - {mine}:
        # the sharding and plan are one setting (ZeRO 3 is FSDP's sharding)
        settings = zip(_settings(f), _settings(mine), strict=True)
        if sum(a != b for a, b in settings) != 1:
            continue
        if c.gpus == 1 and f.layout != mine.layout:
            continue  # one GPU is the same run under any sharding
        other = dataclasses.replace(
            c,
            sharding=f.sharding,
            precision=f.precision,
            activation_checkpointing=f.ckpt,
            compile=f.compile,
            tp=f.tp,
            pp=f.pp,
            zero=f.zero,
        )
        if not space.contains(other):
            continue
        top = ev.cap(other)
        snapped = other if space.index(other.micro_batch) <= top else space.snap(other, top)
        if snapped is not None:
            out.append(snapped)
    return out


def approach(ev: Evidence, scored: list[Prediction], min_gain: float) -> Config | None:
    """Nothing predicted feasible: the config predicted closest to the SLA, while it is
    predicted closer than the closest measured by more than ``min_gain``."""
    if not scored:
        return None
    pick = min(scored, key=lambda p: p.violation)
    closest = ev.closest
    if closest is None or pick.violation < closest.verdict.violation - min_gain:
        return ev.memory_step(pick.config)
    return None


def extreme(ev: Evidence, fam: Family) -> Config | None:
    """A family's extreme config for the missed constraint: for a ceiling the smallest
    micro-batch on the fewest GPUs; for a floor the most GPUs, the most accumulation (or the
    largest global batch), at the largest micro-batch that may fit."""
    mine = ev.index.by_family.get(fam, ())
    if not mine:
        return None
    if ev.goal.ceiling_ms is not None:
        return min(mine, key=lambda c: (c.gpus, c.micro_batch, c.grad_accum))
    return ev.at_cap(max(mine, key=lambda c: (c.gpus, c.global_batch, c.grad_accum)))


def verdict_guard(ev: Evidence, scored: list[Prediction]) -> Config | None:
    """Before an infeasible verdict: each modelled family's extreme config, then the closest
    config's untried neighbours, so that a model fitted on a few points is not what declares
    an SLA infeasible (``None``: nothing left, the verdict stands)."""
    for fam in ev.models:
        probe = extreme(ev, fam)
        if probe is not None and ev.untried(probe) and not ev.missed(probe):
            return ev.memory_step(probe)
    if ev.closest is None:
        return None
    near = neighbour(ev, ev.closest.config, scored, by_violation=True)
    if near is not None:
        return near
    # the neighbour rule: every axis neighbour of the closest measured before the verdict,
    # predicted or not (a family with no model yet is no reason to skip one)
    left = open_neighbours(ev, ev.closest.config)
    if not left:
        return None
    preds = {p.config: p for p in scored}
    return min(left, key=lambda n: preds[n].violation if n in preds else math.inf)


def axis_neighbours(ev: Evidence, c: Config) -> list[Config]:
    """``c``'s neighbours on every axis, as points of the space the hard rules leave open: the
    GPU counts one and two either side, doubled and halved; the micro-batch doubled and halved (the
    next ones on its line); the other precisions, checkpointing and sharding. A neighbour the
    memory rules say runs out of memory without checkpointing is taken with it (checkpointing
    only frees memory); one with checkpointing that does not need it is dropped (it only adds
    work); so is one at or above a sure OOM, or that a measured latency miss rules out."""
    space = ev.space
    g = c.gpus
    moves: list[Config] = []
    # two either side too: a ring over a count not a power of two can be slower than both
    # of its neighbours (7 GPUs slower than 6 and 8)
    for count in sorted({g - 2, g - 1, g + 1, g + 2, 2 * g, g // 2} - {g}):
        if count in space.gpus and (m := ev.on_gpus(c, count)) is not None:
            moves.append(m)
    line = space.line(c)
    if c in line:
        i = line.index(c)
        moves += line[max(i - 1, 0) : i] + line[i + 1 : i + 2]
    moves += [dataclasses.replace(c, precision=p) for p in space.precisions if p != c.precision]
    moves += [
        dataclasses.replace(c, activation_checkpointing=k)
        for k in space.activation_checkpointing
        if k != c.activation_checkpointing
    ]
    if g > 1:
        moves += [dataclasses.replace(c, sharding=h) for h in space.shardings if h != c.sharding]
    out: list[Config] = []
    for n in moves:
        if not n.activation_checkpointing and _walled(ev, n):
            n = dataclasses.replace(n, activation_checkpointing=True)
        if n == c or n in out or not space.contains(n):
            continue
        if n.activation_checkpointing and not ev.needs_ckpt(n):
            continue
        if _walled(ev, n) or ev.missed(n):
            continue
        out.append(n)
    return out


def open_neighbours(ev: Evidence, c: Config) -> list[Config]:
    """:func:`axis_neighbours` of ``c`` neither measured nor being measured."""
    return [n for n in axis_neighbours(ev, c) if ev.untried(n)]


def _walled(ev: Evidence, c: Config) -> bool:
    """Whether the memory rules say ``c`` runs out of memory (at or above a sure OOM, or
    under bf16/fp16 at twice fp32's)."""
    idx = ev.space.index(c.micro_batch)
    return idx >= ev.sure_oom(family_of(c), c) or idx > ev.half_precision_cap(c)


def _settings(f: Family) -> tuple[object, ...]:
    """A family's settings, its sharding and plan counted as one."""
    return (f.layout, f.precision, f.ckpt, f.compile)
