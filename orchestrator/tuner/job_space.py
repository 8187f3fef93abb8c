"""The search space of a job: what :class:`~orchestrator.tuner.space.SearchSpace` a spec is
searched over on a device (:func:`space_for`), from its bounds, its global batch and the
device's capabilities. Kept apart from the space's own type (``tuner/space.py``): this is the
part that reads a job (its workload, plan, command settings); a service's space is
``tuner/serving.py``'s.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from orchestrator.errors import TuneError
from orchestrator.tuner.space import (
    DeviceCaps,
    SearchSpace,
    layout_key,
    layouts_of,
    power_ladder,
)

if TYPE_CHECKING:
    from orchestrator.spec import JobSpec

__all__ = ["allowed", "global_batches_for", "space_for"]


def allowed(
    dim: str, wanted: Sequence[Any] | None, default: Sequence[Any], supported: Sequence[Any]
) -> tuple[Any, ...]:
    values = tuple(wanted) if wanted is not None else tuple(default)
    kept = tuple(v for v in values if v in supported)
    if not kept:
        raise TuneError(
            f"tuning.bounds.{dim}: none of {list(values)} is supported here "
            f"(supported: {list(supported)})"
        )
    return tuple(dict.fromkeys(kept))


def global_batches_for(spec: JobSpec) -> tuple[int, ...]:
    """The global batches a training job may be tuned to: its own (micro-batch x
    accumulation x GPUs as submitted), or with ``tuning.bounds.global_batch`` the powers of two
    in that range, both ends and its own (when within)."""
    from orchestrator.elastic import global_batch

    own = global_batch(spec)
    gb = spec.tuning.bounds.global_batch
    if gb is None:
        return (own,)
    values = set(power_ladder(gb.min, gb.max))
    if gb.min <= own <= gb.max:
        values.add(own)
    return tuple(sorted(values))


def space_for(spec: JobSpec, caps: DeviceCaps, *, forward_only: bool = False) -> SearchSpace:
    """The search space of ``spec`` on a device with ``caps``.

    Defaults for a dimension the spec leaves open: micro-batches from 1 to
    ``caps.max_micro_batch``; gradient accumulation 1 to 4 (or the job's own, if more);
    GPUs ``resources.gpus``; every precision the device supports; checkpointing on and off;
    compile on and off where ``caps.compile``. A training job keeps its global batch (see the
    module doc): only the splits of it within those ranges are points. A forward-only
    workload (``forward_only``, as the evaluator's probe found it) has accumulation 1 and the
    powers of two as micro-batches.

    Raises:
        TuneError: the bounds leave no value for a dimension (e.g. only fp16 on a CPU), no
            split of the global batch fits them, or they ask a forward-only workload for
            accumulation or a global batch.
    """
    b = spec.tuning.bounds
    lo, hi = spec.tuning_gpus()
    hi = min(hi, caps.max_gpus)
    if lo > hi:
        raise TuneError(
            f"no GPU count fits: resources.gpus/tuning.bounds.gpus ask for at least {lo}, "
            f"but at most {hi} can be profiled here"
        )
    if spec.workload.command is not None:
        return _command_space(spec, caps, range(lo, hi + 1))
    shardings = allowed("sharding", b.sharding, ("ddp", "fsdp"), caps.shardings)
    plans: tuple[tuple[int, int, int], ...] | None = None
    excluded: frozenset[tuple[int, int, int, int]] = frozenset()
    dropped: tuple[str, ...] = ()
    if forward_only:
        _plans(spec, forward_only)  # refused for a forward-only workload
        batch = _forward_only_batch(spec, caps, range(lo, hi + 1))
    else:
        plans, excluded, dropped = _runnable(spec, caps, range(lo, hi + 1), shardings)
        batch = _training_batch(spec, caps, range(lo, hi + 1), plans, shardings, excluded)
    return SearchSpace(
        **batch,
        plans=plans,
        excluded=excluded,
        dropped=dropped,
        shardings=shardings,
        precisions=allowed("precision", b.precision, caps.precisions, caps.precisions),
        activation_checkpointing=allowed(  # any share of the blocks is one (the spec's rule)
            "activation_checkpointing",
            b.activation_checkpointing,
            (False, True),
            (False, True, *(b.activation_checkpointing or ())),
        ),
        compile=allowed(
            "compile", b.compile, (False, True) if caps.compile else (False,), (False, True)
        ),
        loaders=(spec.run.loader.token(),),  # the job's own; see tuner.loader_stage
        gpus_per_node=caps.gpus_per_node,
    )


def _command_space(spec: JobSpec, caps: DeviceCaps, gpus: range) -> SearchSpace:
    """A command job's space: the run settings its script reads from the job context
    (micro-batch and accumulation within its global batch, GPU count, precision) and its own
    declared settings (:mod:`orchestrator.tuner.script_space`). Sharding, activation
    checkpointing and compile reach a script that calls ``job.prepare``, which applies them:
    they are searched only where the job's bounds name them (a script that does not call it
    would not feel them), else they stay off; plans are the harness's alone (the spec refuses
    them). The loader's knobs are the job's own (``ctx.dataloader_kwargs``), searched by the
    loader stage as for a built-in when the script's waits in ``job.loader`` are material
    (``tuner.loader_stage``)."""
    from orchestrator.tuner.script_space import script_dimensions

    b = spec.tuning.bounds
    ckpt = b.activation_checkpointing
    return SearchSpace(
        **_training_batch(spec, caps, gpus),
        shardings=allowed("sharding", b.sharding, ("ddp",), caps.shardings),
        precisions=allowed("precision", b.precision, caps.precisions, caps.precisions),
        activation_checkpointing=allowed(
            "activation_checkpointing", ckpt, (False,), (False, True, *(ckpt or ()))
        ),
        compile=allowed("compile", b.compile, (False,), (False, True)),
        loaders=(spec.run.loader.token(),),
        gpus_per_node=caps.gpus_per_node,
        settings=script_dimensions(spec),
    )


def _plans(spec: JobSpec, forward_only: bool) -> tuple[tuple[int, int, int], ...] | None:
    """The ``(tp, pp, zero)`` choices of ``tuning.bounds.plan`` (``None`` without one)."""
    pb = spec.tuning.bounds.plan
    if pb is None:
        return None
    if forward_only:
        raise TuneError("tuning.bounds.plan applies to training; this workload is forward-only")
    return tuple(itertools.product(sorted(set(pb.tp)), sorted(set(pb.pp)), sorted(set(pb.zero))))


def _runnable(
    spec: JobSpec, caps: DeviceCaps, gpus: range, shardings: Sequence[str]
) -> tuple[
    tuple[tuple[int, int, int], ...] | None, frozenset[tuple[int, int, int, int]], tuple[str, ...]
]:
    """The plans of the bounds the model can split, the layouts whose model state does not fit
    the GPU, and why each was left out (:mod:`orchestrator.tuner.plan_space`).

    Raises:
        TuneError: no layout on any GPU count fits the GPU.
    """
    from orchestrator.tuner.plan_space import too_big, unsplittable  # it imports tuner.space

    plans = _plans(spec, forward_only=False)
    split = unsplittable(spec, plans or ())
    if plans is not None:
        plans = tuple(p for p in plans if p not in split)
    shape = spec.model_shape()
    layouts = [c for g in gpus for c in layouts_of(g, plans, shardings)]
    big = too_big(layouts, shape.params if shape else None, caps.memory_bytes)
    dropped = (*split.values(), *big.values())
    if layouts and all(layout_key(c) in big for c in layouts):
        raise TuneError(
            "no GPU layout of the job fits the GPU's memory: " + "; ".join(big.values())
        )
    return plans, frozenset(big), dropped


def _forward_only_batch(spec: JobSpec, caps: DeviceCaps, gpus: range) -> dict[str, Any]:
    """The batch dimensions of a forward-only workload: any micro-batch, no accumulation."""
    b = spec.tuning.bounds
    if b.grad_accum is not None and (b.grad_accum.min, b.grad_accum.max) != (1, 1):
        raise TuneError(
            "tuning.bounds.grad_accum must be 1 for a forward-only (inference) workload"
        )
    if b.global_batch is not None:
        raise TuneError(
            "tuning.bounds.global_batch applies to training; this workload is forward-only "
            "(it learns nothing, so its batch is free)"
        )
    mb = b.micro_batch
    micro = power_ladder(mb.min, mb.max) if mb else power_ladder(1, caps.max_micro_batch)
    return {"micro_batches": micro, "grad_accums": (1,), "gpus": tuple(gpus)}


def _training_batch(
    spec: JobSpec,
    caps: DeviceCaps,
    gpus: range,
    plans: tuple[tuple[int, int, int], ...] | None = None,
    shardings: Sequence[str] = ("ddp",),
    excluded: frozenset[tuple[int, int, int, int]] = frozenset(),
) -> dict[str, Any]:
    """The batch dimensions of a training job: every split ``m x a x r`` of one of its global
    batches over ``r`` replicas of ``g`` GPUs (every GPU a replica, or with ``plans`` ``g``
    over each plan's ``tp x pp``; layouts ``excluded`` make none), with ``m``, ``a`` and ``g``
    within their bounds (so the ladder holds divisors of the batch, not only powers of two: a
    batch of 24 splits as 24, 12 x 2, 8 x 3, 6 x 4)."""
    b = spec.tuning.bounds
    m_lo, m_hi = (
        (b.micro_batch.min, b.micro_batch.max) if b.micro_batch else (1, caps.max_micro_batch)
    )
    a_lo, a_hi = (
        (b.grad_accum.min, b.grad_accum.max) if b.grad_accum else (1, max(4, spec.run.grad_accum))
    )
    batches = global_batches_for(spec)
    replicas = {g: {c.replicas for c in layouts_of(g, plans, shardings, excluded)} for g in gpus}
    points = [
        (batch // (a * r), a, g)
        for batch in batches
        for g in gpus
        for r in replicas[g]
        for a in range(a_lo, a_hi + 1)
        if batch % (a * r) == 0 and m_lo <= batch // (a * r) <= m_hi
    ]
    if not points:
        raise TuneError(
            f"no split of the global batch {' or '.join(map(str, batches))} fits: micro-batch "
            f"within [{m_lo}, {m_hi}], accumulation within [{a_lo}, {a_hi}], GPUs within "
            f"[{gpus.start}, {gpus.stop - 1}] (widen tuning.bounds, or allow a range with "
            "tuning.bounds.global_batch)"
        )
    return {
        "micro_batches": tuple(sorted({m for m, _, _ in points})),
        "grad_accums": tuple(sorted({a for _, a, _ in points})),
        "gpus": tuple(sorted({g for _, _, g in points})),
        "global_batches": batches,
    }
