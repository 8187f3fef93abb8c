"""Data parallelism: process-group set-up and the collectives the harness loop needs.

The harness uses NCCL on CUDA and Gloo on CPU, and wraps the model in DistributedDataParallel.
Rank 0 picks a free port (:func:`find_free_port`) and every rank joins ``tcp://rank0-ip:port``.
"""

from __future__ import annotations

import socket
from datetime import timedelta

import torch
import torch.distributed as dist

__all__ = ["agree_any", "all_mean", "find_free_port", "init_group", "shutdown_group"]


def find_free_port() -> int:
    """A TCP port free on this host right now (the OS picks it; another process could still
    take it before the process group binds it, which is why rank 0 asks just before starting)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("", 0))
        return int(sock.getsockname()[1])


def init_group(
    device: torch.device, init_method: str, rank: int, world_size: int, timeout_s: float = 300.0
) -> None:
    """Join the job's process group: NCCL when ``device`` is CUDA, else Gloo."""
    backend = "nccl" if device.type == "cuda" else "gloo"
    dist.init_process_group(
        backend=backend,
        init_method=init_method,
        rank=rank,
        world_size=world_size,
        timeout=timedelta(seconds=timeout_s),
    )


def shutdown_group() -> None:
    """Leave the process group if this process is in one."""
    if dist.is_available() and dist.is_initialized():
        dist.destroy_process_group()


def agree_any(flags: list[bool], device: torch.device) -> list[bool]:
    """Element-wise OR of ``flags`` over all ranks (identity without a process group).

    Every rank must stop at the same step, or DDP's next all-reduce waits forever for the rank
    that left; so a stop request or an expired duration on any rank stops all of them.
    """
    if not dist.is_initialized():
        return flags
    t = torch.tensor([float(f) for f in flags], device=device)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return [bool(v) for v in t.tolist()]


def all_mean(value: float, device: torch.device) -> float:
    """Mean of ``value`` over all ranks (identity without a process group)."""
    if not dist.is_initialized():
        return value
    t = torch.tensor(
        [value], dtype=torch.float64 if device.type == "cpu" else torch.float32, device=device
    )
    dist.all_reduce(t)
    return float(t.item()) / dist.get_world_size()
