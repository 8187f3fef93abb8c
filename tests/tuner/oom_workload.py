"""A user workload with a memory cap: micro-batches above ``cap`` samples raise the error
CUDA's allocator raises (``torch.OutOfMemoryError``), so OOM handling is tested on a CPU;
with ``kind: memory`` Python's ``MemoryError``, and with ``kind: cpu`` torch's CPU allocator
fails for real (an allocation larger than any host's address space).

``step_ms`` makes each micro-batch take that much longer (a sleep, which needs no CPU): its
throughput then grows with the micro-batch by a margin no CPU contention undoes, so a test can
say which fitting micro-batch the tuner picks (the tiny model alone takes microseconds a step,
and a busy host made 4 samples faster than 8 now and then)."""

from __future__ import annotations

import time
from typing import Any

import torch
from torch import nn

from workers.workloads.base import Batch, Workload


def build(args: dict[str, Any], seed: int) -> Workload:
    """A tiny regression whose batches past ``args['cap']`` samples "run out of memory"."""
    cap = int(args.get("cap", 8))
    kind = str(args.get("kind", "torch"))
    step_s = float(args.get("step_ms", 0)) / 1000
    model = nn.Linear(4, 1)

    def make_batch(first: int, count: int) -> Batch:
        if count > cap:
            if kind == "memory":
                raise MemoryError(f"cannot allocate {count} samples")
            if kind == "cpu":  # "DefaultCPUAllocator: can't allocate memory: ..."
                torch.empty(1 << 50, dtype=torch.uint8)
            raise torch.OutOfMemoryError(
                f"CUDA out of memory. Tried to allocate {count} MiB (cap {cap})"
            )
        g = torch.Generator().manual_seed(seed + first)
        x = torch.randn(count, 4, generator=g)
        return x, x.sum(dim=1, keepdim=True)

    def loss(m: nn.Module, batch: Batch) -> torch.Tensor:
        x, y = batch
        if step_s:
            time.sleep(step_s)
        return nn.functional.mse_loss(m(x), y)

    return Workload(model=model, loss=loss, make_batch=make_batch)
