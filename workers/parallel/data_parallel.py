"""The data axis of a plan: DDP (ZeRO 0), ZeRO-1, or FSDP2 (ZeRO 2 and 3, with offload).

FSDP is FSDP2, ``torch.distributed.fsdp.fully_shard``: in torch 2.13 it runs on CPU with the
Gloo backend as well as on CUDA with NCCL, keeps the model's own class and parameter names
(parameters become DTensors sharded on dim 0) and composes with tensor parallelism on a 2-D
mesh; ``FullyShardedDataParallel`` (FSDP1) is deprecated. Each of the workload's blocks is
its own FSDP unit, so ZeRO-3 gathers one block's parameters at a time; the root unit holds
what no block owns (embeddings, head).

Precision stays the harness's ``torch.autocast``, not an FSDP ``MixedPrecisionPolicy``:
parameters, gradients and their reduce-scatter stay fp32 as under DDP, so every plan of one
config trains to the same weights. A ``torch.amp.GradScaler`` works unchanged: DTensor reduces
its inf/NaN check over the ranks, so every rank skips (or takes) the same steps.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from typing import Any

import torch
from torch.distributed.device_mesh import DeviceMesh
from torch.distributed.fsdp import CPUOffloadPolicy, FSDPModule, OffloadPolicy, fully_shard
from torch.distributed.optim import ZeroRedundancyOptimizer
from torch.nn.parallel import DistributedDataParallel

__all__ = ["apply_ddp", "apply_fsdp", "grad_sync", "make_optimizer"]


def apply_ddp(model: torch.nn.Module, device: torch.device) -> torch.nn.Module:
    """A DistributedDataParallel wrapper of ``model`` over the whole process group."""
    device_ids = [device.index] if device.type == "cuda" else None
    return DistributedDataParallel(model, device_ids=device_ids)


def apply_fsdp(
    model: torch.nn.Module,
    blocks: Sequence[torch.nn.Module],
    mesh: DeviceMesh,
    *,
    zero: int,
    offload: bool,
) -> None:
    """Shard ``model`` in place over ``mesh`` (the ``dp`` axis): each block one unit, the root
    one more (without blocks, the whole model is one unit). ``zero`` 2 keeps the gathered
    parameters until the backward is done (``reshard_after_forward=False``), 3 frees each
    block's after its forward. Parameters become DTensors: build the optimizer afterwards.
    """
    policy = CPUOffloadPolicy() if offload else OffloadPolicy()
    for block in blocks:
        fully_shard(block, mesh=mesh, reshard_after_forward=zero == 3, offload_policy=policy)
    fully_shard(model, mesh=mesh, reshard_after_forward=zero == 3, offload_policy=policy)


def make_optimizer(
    model: torch.nn.Module, name: str, lr: float, *, zero: int
) -> torch.optim.Optimizer:
    """The job's optimizer over ``model``'s (local) parameters: AdamW or SGD (momentum 0.9);
    at ZeRO stage 1, a ``ZeroRedundancyOptimizer`` of it (each data-parallel rank keeps the
    state of its own share of the parameters and broadcasts them after its step)."""
    cls: type[torch.optim.Optimizer]
    kwargs: dict[str, Any] = {"lr": lr}
    if name == "sgd":
        cls, kwargs["momentum"] = torch.optim.SGD, 0.9
    else:
        cls = torch.optim.AdamW
    if zero == 1:
        return ZeroRedundancyOptimizer(model.parameters(), optimizer_class=cls, **kwargs)
    return cls(model.parameters(), **kwargs)


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
