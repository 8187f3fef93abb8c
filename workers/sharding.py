"""Data parallelism over the ranks (DDP or FSDP) and the full, world-size-independent state.

With ``sharding: ddp`` each rank holds the whole model in DistributedDataParallel; with ``fsdp``
parameters, gradients and optimizer state are sharded over the ranks. The FSDP API is FSDP2,
``torch.distributed.fsdp.fully_shard``: in torch 2.13 it runs on CPU with the Gloo backend (the
tests train with it in two CPU processes) as well as on CUDA with NCCL, it keeps the model's own
class and parameter names (parameters become DTensors sharded on dim 0), and it is the API
PyTorch develops; ``FullyShardedDataParallel`` (FSDP1) is deprecated.

Precision stays the harness's ``torch.autocast``, not an FSDP ``MixedPrecisionPolicy``: parameters,
gradients and their reduce-scatter stay fp32 as under DDP, so DDP and FSDP runs of one config train
to the same weights. A ``torch.amp.GradScaler`` works unchanged: DTensor reduces its inf/NaN check
over the ranks, so every rank skips (or takes) the same steps.

Checkpoints hold each rank's own state (:func:`state_dicts`, through
``torch.distributed.checkpoint.state_dict``): FSDP shards as DTensors, optimizer state keyed by
parameter name. ``torch.distributed.checkpoint`` writes the shards of every rank in parallel and
reshards them on load, so a job resumes with DDP or FSDP on any number of ranks
(:mod:`workers.checkpoint`).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from typing import Any

import torch
import torch.distributed as dist
from torch.distributed.checkpoint.state_dict import (
    get_model_state_dict,
    get_state_dict,
    set_model_state_dict,
    set_state_dict,
)
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import FSDPModule, fully_shard
from torch.distributed.tensor import DTensor
from torch.nn.parallel import DistributedDataParallel

__all__ = [
    "full_parameters",
    "grad_sync",
    "load_state_dicts",
    "parallelize",
    "param_fingerprint",
    "shard",
    "state_dicts",
]

StateDict = dict[str, Any]


def parallelize(
    model: torch.nn.Module, blocks: Sequence[torch.nn.Module], device: torch.device, mode: str
) -> torch.nn.Module:
    """The module the training loop calls, spread over the process group's ranks.

    ``ddp``: a DistributedDataParallel wrapper of ``model``. ``fsdp``: ``model`` itself, sharded
    in place (see :func:`shard`). Build the optimizer afterwards.
    """
    if mode == "fsdp":
        shard(model, blocks, device)
        return model
    device_ids = [device.index] if device.type == "cuda" else None
    return DistributedDataParallel(model, device_ids=device_ids)


def shard(model: torch.nn.Module, blocks: Sequence[torch.nn.Module], device: torch.device) -> None:
    """Shard ``model`` in place over the process group's ranks (FSDP2).

    Each of the workload's ``blocks`` becomes its own FSDP unit, so only one block's parameters
    are gathered at a time; the root unit holds what no block owns (embeddings, heads). Without
    blocks the whole model is one unit. Parameters are replaced by DTensors: build the optimizer
    afterwards.
    """
    # An explicit mesh on the harness's device: the default would pick CUDA whenever it is
    # present, even for a run placed on the CPU with Gloo.
    mesh = init_device_mesh(device.type, (dist.get_world_size(),))
    for block in blocks:
        fully_shard(block, mesh=mesh)
    fully_shard(model, mesh=mesh)


@contextlib.contextmanager
def grad_sync(module: torch.nn.Module, enabled: bool) -> Iterator[None]:
    """Backward passes inside sync gradients over the ranks only when ``enabled``.

    Disabled, gradients accumulate locally: DDP's ``no_sync``, or for an FSDP module
    ``set_requires_gradient_sync(False)`` (the next synced backward reduce-scatters the
    accumulated gradient). A no-op for an unwrapped model.
    """
    if enabled:
        yield
    elif isinstance(module, DistributedDataParallel):
        with module.no_sync():
            yield
    elif isinstance(module, FSDPModule):
        module.set_requires_gradient_sync(False)
        try:
            yield
        finally:
            module.set_requires_gradient_sync(True)
    else:
        yield


def full_parameters(model: torch.nn.Module) -> Iterator[torch.Tensor]:
    """The model's parameters, unsharded (a collective over the ranks for an FSDP model)."""
    for p in model.parameters():
        yield p.full_tensor() if isinstance(p, DTensor) else p


def param_fingerprint(model: torch.nn.Module) -> float:
    """Sum of absolute values of the full parameters, in float64 (the same on every rank)."""
    with torch.no_grad():
        return sum(float(p.double().abs().sum()) for p in full_parameters(model))


def state_dicts(model: torch.nn.Module, optimizer: torch.optim.Optimizer | None) -> StateDict:
    """This rank's model and optimizer state, ``{"model": ..., "optimizer": ...}`` (no
    ``optimizer`` without one), to save or to load into with ``torch.distributed.checkpoint``.

    Under FSDP the model's tensors are DTensors holding this rank's shards (nothing is gathered:
    each rank saves its own); the optimizer state is keyed by parameter name, so it maps onto
    any sharding. A fresh optimizer's state is created (zero-filled) so a load has a place to
    go. ``model`` is the unwrapped module (not DDP).
    """
    if optimizer is None:
        return {"model": get_model_state_dict(model)}
    model_sd, optimizer_sd = get_state_dict(model, optimizer)
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
        model, optimizer, model_state_dict=state["model"], optim_state_dict=state["optimizer"]
    )
