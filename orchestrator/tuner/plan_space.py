"""Which layouts of a job's search space can run: its model's split, and its memory per rank.

Two filters on the plans of ``tuning.bounds.plan`` and the GPU layouts (sharding or plan, on
each GPU count), each giving the reason for what it leaves out (the space's ``dropped``, kept
in the tuning report), so that a layout that cannot run is never tried:

- the split: a plan whose ``tp`` or ``pp`` the built-in model cannot take, by the rule the
  harness refuses it by at start (:func:`workers.parallel.plan.split_problems`, on the shape
  :mod:`workers.workloads.shapes` computes from the job's arguments);
- the memory: a layout whose model state per rank (parameters, gradients and AdamW's two
  moments, fp32, sharded as its ZeRO stage says: :func:`orchestrator.tuner.planmodel.state_bytes`)
  exceeds the memory of the pool's GPUs (``DeviceCaps.memory_bytes``, as the tuning gang's probe
  read it). Activations come on top of it: the out-of-memory search finds their limit. With
  the memory or the parameter count unknown (CPU slots, a user's model) nothing is left out.
"""

from __future__ import annotations

from collections.abc import Iterable

from orchestrator.run_config import Config, layout_key
from orchestrator.spec import JobSpec
from orchestrator.tuner.planmodel import state_bytes
from workers.parallel.plan import Plan, split_problems

__all__ = ["too_big", "unsplittable"]

PlanChoice = tuple[int, int, int]


def unsplittable(spec: JobSpec, plans: Iterable[PlanChoice]) -> dict[PlanChoice, str]:
    """The plans ``(tp, pp, zero)`` whose split the job's built-in model refuses, each with
    the reason (none for a user's model: its shape is known at start only)."""
    shape = spec.model_shape()
    if shape is None:
        return {}
    out: dict[PlanChoice, str] = {}
    for tp, pp, zero in plans:
        problems = split_problems(
            Plan(tp=tp, pp=pp),
            shape,
            where="tuning.bounds.plan",
            workload=repr(spec.workload.name),
        )
        if problems:
            out[(tp, pp, zero)] = f"tp {tp} x pp {pp} left out: " + "; ".join(problems)
    return out


def too_big(
    layouts: Iterable[Config], params: int | None, memory_bytes: float | None
) -> dict[tuple[int, int, int, int], str]:
    """The layouts (by :func:`~orchestrator.tuner.space.layout_key`) whose model state per
    rank exceeds ``memory_bytes`` for a model of ``params`` parameters, each with the reason;
    none when either is unknown."""
    if params is None or not memory_bytes:
        return {}
    out: dict[tuple[int, int, int, int], str] = {}
    for c in layouts:
        need = state_bytes(c, params)
        if need > memory_bytes:
            out[layout_key(c)] = (
                f"{_describe(c)} left out: its model state ({params:,} parameters, gradients "
                f"and optimizer state) is {need / 1e9:.2f} GB per rank, over the GPU's "
                f"{memory_bytes / 1e9:.2f} GB"
            )
    return out


def _describe(c: Config) -> str:
    """A layout in words: ``tp 2 x pp 1, zero 3 on 4 GPUs``."""
    if c.gpus == 1:
        return "one GPU"
    return f"tp {c.tp} x pp {c.pp}, zero {c.zero} on {c.gpus} GPUs"
