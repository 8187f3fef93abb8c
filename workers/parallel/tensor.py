"""Tensor parallelism: each block's linear layers split over the ``tp`` ranks of a replica.

``torch.distributed.tensor.parallel`` does the work: a column-wise linear holds ``1/tp`` of
its output features (its input replicated), a row-wise linear ``1/tp`` of its input features
(its partial outputs all-reduced). The workload's :class:`~workers.workloads.base.Layout`
names which layer is which; everything outside the blocks (embeddings, norms, head) stays
replicated on the tensor-parallel ranks.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch.distributed.device_mesh import DeviceMesh
from torch.distributed.tensor.parallel import (
    ColwiseParallel,
    ParallelStyle,
    RowwiseParallel,
    parallelize_module,
)

from workers.workloads.base import Layout

__all__ = ["STYLES", "apply_tensor_parallel", "tensor_parallel_problems", "widths"]

STYLES: tuple[str, ...] = ("colwise", "rowwise")


def tensor_parallel_problems(blocks: Sequence[torch.nn.Module], layout: Layout) -> list[str]:
    """Why ``layout.tensor_parallel`` does not describe ``blocks`` (empty when it does): an
    unknown style, a missing layer, or a layer that is not ``Linear``. (Whether a degree
    divides the widths is the plan rule's: :func:`workers.parallel.plan.split_problems` on
    :func:`widths`.)"""
    p: list[str] = []
    for path, style in layout.tensor_parallel.items():
        if style not in STYLES:
            p.append(f"layout.tensor_parallel[{path!r}] must be one of {STYLES}, got {style!r}")
            continue
        for block in blocks[:1]:  # the blocks repeat: the first one speaks for them
            try:
                layer = block.get_submodule(path)
            except AttributeError:
                p.append(f"layout.tensor_parallel names {path!r}, which a block does not have")
                continue
            if not isinstance(layer, torch.nn.Linear):
                p.append(
                    f"layout.tensor_parallel[{path!r}] is a {type(layer).__name__}, not Linear"
                )
    return p


def widths(blocks: Sequence[torch.nn.Module], layout: Layout) -> dict[str, int]:
    """Each tensor-parallel layer of the first block -> the features its split divides (a
    column-wise layer's outputs, a row-wise layer's inputs); layers
    :func:`tensor_parallel_problems` refuses are left out."""
    out: dict[str, int] = {}
    for path, style in layout.tensor_parallel.items():
        try:
            layer = blocks[0].get_submodule(path) if blocks else None
        except AttributeError:
            continue
        if isinstance(layer, torch.nn.Linear) and style in STYLES:
            out[path] = layer.out_features if style == "colwise" else layer.in_features
    return out


def apply_tensor_parallel(
    blocks: Sequence[torch.nn.Module], layout: Layout, mesh: DeviceMesh
) -> None:
    """Split every block's layers over ``mesh`` (1-D, the ``tp`` axis) in place."""
    for block in blocks:
        plan: dict[str, ParallelStyle] = {
            path: ColwiseParallel() if style == "colwise" else RowwiseParallel()
            for path, style in layout.tensor_parallel.items()
        }
        parallelize_module(block, mesh, plan)
