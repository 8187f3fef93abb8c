"""A user workload written the way the README tells users to: a ``build(args, seed)`` function.

Used by the registry tests as the entry point ``tests.workers.sample_workload:build``.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from workers.workloads.base import Batch, Workload
from workers.workloads.data import dataset_generator, sample_generator


def build(args: dict[str, Any], seed: int) -> Workload:
    """Linear regression onto a fixed random target, ``features`` inputs wide."""
    features = int(args.get("features", 8))
    target = torch.randn(features, generator=dataset_generator(seed))

    def make_batch(first: int, count: int) -> Batch:
        # One generator per sample index: the batch split cannot change the data.
        rows = [
            torch.randn(features, generator=sample_generator(seed, i))
            for i in range(first, first + count)
        ]
        x = torch.stack(rows)
        return x, x @ target

    def loss(model: nn.Module, batch: Batch) -> torch.Tensor:
        x, y = batch
        return nn.functional.mse_loss(model(x).squeeze(-1), y)

    return Workload(model=nn.Linear(features, 1), loss=loss, make_batch=make_batch)


def returns_wrong_type(args: dict[str, Any], seed: int) -> object:
    """A mistaken builder: building with it must fail clearly."""
    return "not a workload"


def broken(args: dict[str, Any], seed: int) -> Workload:
    """A builder that crashes: the error must name the workload."""
    raise RuntimeError("boom")


NOT_CALLABLE = 42
