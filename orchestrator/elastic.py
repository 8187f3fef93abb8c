"""Elastic jobs live: the settings a job runs with on N GPUs, and what N GPUs are worth to it.

A bulk job whose ``resources.gpus`` is a range may be started, grown or shrunk anywhere in it.
Its **global batch** (micro-batch x accumulation x GPUs at its requested size) is kept whatever
the size: the micro-batch and accumulation are re-derived, never the batch the optimizer sees,
so the training (and its step count) is the same as on the requested size. Sizes on which the
global batch cannot be kept with a micro-batch no larger than the requested one (so no new
out-of-memory risk) are not used.

A service (a job with ``serve:``, issue 24) whose ``resources.gpus`` is a range is resizable
too: its GPUs are its replicas, each with its own batcher, so every size in the range is usable
and nothing is re-derived (``run.micro_batch`` is each replica's largest batch). Its size is
chosen by the SLA guard's scaling decision (``policies.replicas``), not by a speedup curve.

What a size is worth (the ``speedup`` curve the elastic policy maximises) comes from the job's
profile: the tuner's one-GPU measurement and every throughput the job has shown while running
on some number of GPUs (kept per job by ``orchestrator.store.ScalingStore``). Between known
sizes it is interpolated; beyond the largest it is extrapolated with the parallel efficiency
last seen; with nothing measured it is linear.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

from orchestrator.spec import JobSpec

__all__ = [
    "feasible_sizes",
    "global_batch",
    "gpu_range",
    "resizable",
    "resized_spec",
    "speedup_curve",
    "split_batch",
]


def global_batch(spec: JobSpec) -> int:
    """Samples per optimizer step at the job's requested size (over its replicas)."""
    return spec.run.micro_batch * spec.run.grad_accum * spec.replicas


def split_batch(batch: int, gpus: int, max_micro: int) -> tuple[int, int] | None:
    """``(micro_batch, grad_accum)`` with ``micro x accum x gpus == batch`` and the largest
    micro-batch at most ``max_micro`` (fewest accumulation steps), or ``None``."""
    if batch % gpus:
        return None
    per_gpu = batch // gpus
    for accum in range(max(1, math.ceil(per_gpu / max_micro)), per_gpu + 1):
        if per_gpu % accum == 0:
            return per_gpu // accum, accum
    return None


def resizable(spec: JobSpec) -> bool:
    """Whether the scheduler may run the job on other sizes than its requested one: a bulk
    job or a service, with a GPU range."""
    ranged = spec.resources.gpus.min != spec.resources.gpus.upper
    return ranged and (spec.job_class == "bulk" or spec.serve is not None)


def resized_spec(spec: JobSpec, gpus: int) -> JobSpec | None:
    """The job's spec for a run on ``gpus`` GPUs, keeping its global batch (a service: its
    max batch per replica); ``None`` when that size is outside its range or cannot keep the
    batch."""
    lo, hi = spec.resources.gpus.min, spec.resources.gpus.upper
    if gpus == spec.gpus:
        return spec
    if not lo <= gpus <= hi:
        return None
    if spec.serve is not None:
        # a service has no global batch: its replicas (one per GPU) follow the size, each
        # keeping its own max batch (accumulation is for training: an inference step is one
        # forward pass)
        run = spec.run.model_copy(update={"data_parallel": gpus, "grad_accum": 1})
        return spec.model_copy(update={"run": run})
    plan = spec.run.plan
    # a plan keeps its tensor and pipeline degrees: the replicas follow the size
    model_ranks = plan.tp * plan.pp if plan is not None else 1
    if gpus % model_ranks:
        return None
    split = split_batch(global_batch(spec), gpus // model_ranks, spec.run.micro_batch)
    if split is None:
        return None
    micro, accum = split
    update: dict[str, object] = {"micro_batch": micro, "grad_accum": accum, "data_parallel": gpus}
    if plan is not None:
        replicas = gpus // model_ranks
        zero = plan.zero if replicas > 1 else 0
        if zero < 2 and replicas > 1 and model_ranks > 1:
            zero = 2  # DDP spans a 1-D plan only (workers.parallel.plan): shard the gradients
        offload = plan.offload and replicas > 1 and zero == 3
        update["plan"] = plan.model_copy(update={"dp": replicas, "zero": zero, "offload": offload})
    run = spec.run.model_copy(update=update)
    return spec.model_copy(update={"run": run})


def feasible_sizes(spec: JobSpec) -> list[int]:
    """The GPU counts the job can run on, ascending."""
    lo, hi = spec.resources.gpus.min, spec.resources.gpus.upper
    return [n for n in range(lo, hi + 1) if resized_spec(spec, n) is not None]


def gpu_range(spec: JobSpec) -> tuple[int, int]:
    """Fewest and most GPUs the scheduler may give the job: a resizable job's sizes that
    keep its global batch (a service's range); exactly its size for any other."""
    if resizable(spec):
        sizes = feasible_sizes(spec)
        return sizes[0], sizes[-1]
    return spec.gpus, spec.gpus


def speedup_curve(spec: JobSpec, measured: Mapping[int, float]) -> tuple[float, ...]:
    """Goodput on 1..max GPUs (index ``n-1``), in samples/s where measured, for the policy.

    Interpolated between measured sizes, extrapolated beyond the largest at the parallel
    efficiency seen there (and linearly below the smallest); linear (``n`` on ``n`` GPUs) with
    nothing measured. Sizes the job cannot keep its batch on are interpolated too, so that a
    greedy allocator can step across them; the scheduler runs the job on the largest usable
    size within what the policy gives it.
    """
    hi = spec.resources.gpus.upper
    known = sorted((n, v) for n, v in measured.items() if 1 <= n <= hi and v > 0)

    def estimate(n: int) -> float:
        if not known:
            return float(n)
        below = [(k, v) for k, v in known if k <= n]
        above = [(k, v) for k, v in known if k >= n]
        if below and above:
            (k0, v0), (k1, v1) = below[-1], above[0]
            return v0 if k1 == k0 else v0 + (v1 - v0) * (n - k0) / (k1 - k0)
        if above:  # below the smallest measured size: linear down from it
            k1, v1 = above[0]
            return v1 * n / k1
        k0, v0 = below[-1]  # beyond the largest: at the efficiency seen there
        return v0 * n / k0

    return tuple(round(estimate(n), 6) for n in range(1, hi + 1))
