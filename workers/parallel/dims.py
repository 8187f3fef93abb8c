"""The device mesh of a plan and this rank's place in it (torchtitan's ``ParallelDims``)."""

from __future__ import annotations

import functools

import torch
import torch.distributed as dist
from torch.distributed.device_mesh import DeviceMesh, init_device_mesh

from workers.parallel.plan import Plan

__all__ = ["ParallelDims"]

AXES: tuple[str, ...] = ("pp", "dp", "tp")


class ParallelDims:
    """Owns the ``pp x dp x tp`` mesh of one rank's process group.

    Ranks are laid out row-major over ``(pp, dp, tp)`` (tensor-parallel peers adjacent, as
    on a GPU node, where their per-layer all-reduces are cheapest): rank
    ``(s * dp + d) * tp + t`` is stage ``s`` of replica ``d``, tensor shard ``t``. The mesh is
    built on first use, only for a plan that needs it (a DDP plan uses the whole group).

    Args:
        plan: the plan; its degrees multiply to the group's size.
        rank: this process's rank in the group.
        device: the harness's device (the mesh's device type: Gloo on CPU, NCCL on CUDA).
    """

    def __init__(self, plan: Plan, rank: int, device: torch.device) -> None:
        self.plan = plan
        self.rank = rank
        self.device = device
        self.pp_rank, rest = divmod(rank, plan.dp * plan.tp)
        self.dp_rank, self.tp_rank = divmod(rest, plan.tp)

    @property
    def first_stage(self) -> bool:
        """Whether this rank runs the first pipeline stage."""
        return self.pp_rank == 0

    @property
    def last_stage(self) -> bool:
        """Whether this rank runs the last pipeline stage."""
        return self.pp_rank == self.plan.pp - 1

    @functools.cached_property
    def mesh(self) -> DeviceMesh:
        """The 3-D mesh, axes named ``pp``, ``dp``, ``tp`` (a collective: every rank builds it)."""
        p = self.plan
        return init_device_mesh(self.device.type, (p.pp, p.dp, p.tp), mesh_dim_names=AXES)

    def group(self, axis: str) -> dist.ProcessGroup:
        """The process group of this rank's peers along ``axis``."""
        return self.mesh[axis].get_group()
