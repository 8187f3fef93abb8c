"""A user workload written the way the README tells users to: a ``build(args, seed)`` function.

Used by the registry tests as the entry point ``tests.workers.sample_workload:build``.
"""

from __future__ import annotations

import time
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


def build_scaled(args: dict[str, Any], seed: int) -> Workload:
    """The same regression with its own learning-rate rule (``lr_scaling: script``): the
    fourth root of the batch ratio, which no built-in rule gives."""
    workload = build(args, seed)
    workload.scale_lr = lambda lr, batch, base: lr * (batch / base) ** 0.25
    return workload


def build_inference(args: dict[str, Any], seed: int) -> Workload:
    """A user's forward-only workload (scoring a linear model): ``train=False``, the only thing
    that tells the tuner it cannot accumulate gradients (its name says nothing)."""
    workload = build(args, seed)
    model = workload.model

    def forward(m: nn.Module, batch: Batch) -> torch.Tensor:
        x, _ = batch
        return m(x)

    model.eval()
    return Workload(model=model, loss=forward, make_batch=workload.make_batch, train=False)


def slow_data(args: dict[str, Any], seed: int) -> Workload:
    """:func:`build` whose ``make_batch`` first sleeps ``sleep_s``: a slow loader."""
    built = build(args, seed)
    sleep_s = float(args.get("sleep_s", 0.0))
    make = built.make_batch

    def make_batch(first: int, count: int) -> Batch:
        time.sleep(sleep_s)
        return make(first, count)

    built.make_batch = make_batch
    return built


class _Difference(nn.Module):
    """``a(x) - b(x)`` of two nearly equal linear layers: the outputs are small differences of
    large numbers, which int8 weights (about 1% apart from fp32's) cannot resolve."""

    def __init__(self, features: int) -> None:
        super().__init__()
        self.a = nn.Linear(features, features)
        self.b = nn.Linear(features, features)
        with torch.no_grad():
            self.b.weight.copy_(self.a.weight + 1e-3 * torch.randn_like(self.a.weight))
            self.b.bias.copy_(self.a.bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.a(x) - self.b(x)


def build_fragile_inference(args: dict[str, Any], seed: int) -> Workload:
    """A user's forward-only model that int8 quantization ruins (its outputs are differences
    that quantization error swamps): a service must refuse to serve it quantized."""
    features = int(args.get("features", 8))
    inputs = build(args, seed).make_batch

    def forward(m: nn.Module, batch: Batch) -> torch.Tensor:
        x, _ = batch
        return m(x)

    return Workload(
        model=_Difference(features).eval(), loss=forward, make_batch=inputs, train=False
    )
