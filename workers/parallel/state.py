"""What a plan's ranks save and load, and what they hold: checkpoint state dicts, parameter
fingerprints and model-state memory per rank.

Checkpoints hold each rank's own state through ``torch.distributed.checkpoint.state_dict``:
sharded tensors (FSDP, tensor parallelism) as DTensors, a pipeline stage only its own
parameters, and the optimizer state flattened to one entry per parameter name and field
(``state.<name>.<field>``, ``param_groups.<name>.<field>``). Named per parameter, every plan's
state maps onto every other's: ``torch.distributed.checkpoint`` writes each rank's part in
parallel (a replicated tensor once) and reshards on load, so a job saved under one plan
resumes under any other, on any number of ranks. Under ZeRO-1 each rank saves the state of
its own share of the parameters (the ``ZeroRedundancyOptimizer``'s inner optimizer), never a
consolidated copy.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import torch
import torch.distributed as dist
from torch.distributed.checkpoint.state_dict import (
    StateDictOptions,
    get_model_state_dict,
    get_state_dict,
    set_model_state_dict,
    set_state_dict,
)
from torch.distributed.optim import ZeroRedundancyOptimizer
from torch.distributed.tensor import DTensor

__all__ = [
    "full_parameters",
    "load_state_dicts",
    "model_state_bytes",
    "param_fingerprint",
    "state_dicts",
]

StateDict = dict[str, Any]
_OPTIONS = StateDictOptions(flatten_optimizer_state_dict=True)


def _local_optimizer(optimizer: torch.optim.Optimizer) -> torch.optim.Optimizer:
    """The optimizer holding this rank's state: ZeRO-1's inner one, or the optimizer itself."""
    return optimizer.optim if isinstance(optimizer, ZeroRedundancyOptimizer) else optimizer


def state_dicts(model: torch.nn.Module, optimizer: torch.optim.Optimizer | None) -> StateDict:
    """This rank's model and optimizer state, ``{"model": ..., "optimizer": ...}`` (no
    ``optimizer`` without one), to save or to load into with ``torch.distributed.checkpoint``.

    Nothing is gathered: each rank gives its own shards. A fresh optimizer's state is created
    (zero-filled) so a load has a place to go. ``model`` is the unwrapped module (not DDP).
    """
    if optimizer is None:
        return {"model": get_model_state_dict(model)}
    model_sd, optimizer_sd = get_state_dict(model, _local_optimizer(optimizer), options=_OPTIONS)
    return {"model": model_sd, "optimizer": optimizer_sd}


def load_state_dicts(
    model: torch.nn.Module, optimizer: torch.optim.Optimizer | None, state: StateDict
) -> None:
    """Load a :func:`state_dicts` value (filled in by ``torch.distributed.checkpoint.load``)
    into ``model`` and ``optimizer``."""
    if optimizer is None or "optimizer" not in state:
        set_model_state_dict(model, state["model"])
        return
    set_state_dict(
        model,
        _local_optimizer(optimizer),
        model_state_dict=state["model"],
        optim_state_dict=state["optimizer"],
        options=_OPTIONS,
    )


def full_parameters(model: torch.nn.Module) -> Iterator[torch.Tensor]:
    """This rank's parameters, unsharded (a collective over the ranks for DTensors)."""
    for p in model.parameters():
        yield p.full_tensor() if isinstance(p, DTensor) else p


def param_fingerprint(model: torch.nn.Module, stages: dist.ProcessGroup | None = None) -> float:
    """Sum of absolute values of the full parameters, in float64 (the same on every rank).

    Args:
        stages: the pipeline group, when ``model`` is one stage: the stages' sums are added.
    """
    with torch.no_grad():
        total = sum(float(p.double().abs().sum()) for p in full_parameters(model))
    if stages is None:
        return total
    t = torch.tensor([total], dtype=torch.float64)
    dist.all_reduce(t, group=stages)
    return float(t.item())


def _bytes(t: torch.Tensor) -> int:
    local = t.to_local() if isinstance(t, DTensor) else t
    return local.numel() * local.element_size()


def model_state_bytes(
    model: torch.nn.Module, optimizer: torch.optim.Optimizer | None = None
) -> dict[str, int]:
    """Bytes of model state this rank holds now: ``params`` (the parameters registered on the
    model at this moment: whole while FSDP has them gathered, else the local shard), ``grads``
    and ``optimizer`` (its state tensors: under ZeRO-1 this rank's share only)."""
    out = {"params": 0, "grads": 0, "optimizer": 0}
    for p in model.parameters():
        out["params"] += _bytes(p)
        if p.grad is not None:
            out["grads"] += _bytes(p.grad)
    if optimizer is not None:
        for state in _local_optimizer(optimizer).state.values():
            out["optimizer"] += sum(_bytes(v) for v in state.values() if torch.is_tensor(v))
    return out
