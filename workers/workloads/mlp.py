"""``mlp``: a small multi-layer perceptron learning a fixed random teacher's classes.

``pace_ms`` (default 0) makes each micro-batch's data arrive that many milliseconds late, as
a slow source would (the harness counts it as data wait, not step time; the data is the same):
a job that must hold its GPUs for a while (a test's or a demo's filler) then sleeps between
steps instead of computing flat out and slowing everything else on the machine.
"""

from __future__ import annotations

import time
from typing import Any

import torch
from torch import nn
from torch.nn import functional as F

from workers.workloads.base import Batch, Workload, take_args
from workers.workloads.data import dataset_generator, stack_samples
from workers.workloads.shapes import MLP_DEFAULTS, check_args

DEFAULTS: dict[str, Any] = MLP_DEFAULTS  # in shapes: the control plane reads them without torch


class MLP(nn.Module):
    """Input projection, ``n_layer`` residual-free hidden blocks, classification head."""

    def __init__(self, in_features: int, hidden: int, n_layer: int, classes: int) -> None:
        super().__init__()
        self.inp = nn.Linear(in_features, hidden)
        self.blocks = nn.ModuleList(
            nn.Sequential(nn.Linear(hidden, hidden), nn.GELU()) for _ in range(n_layer)
        )
        self.head = nn.Linear(hidden, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Logits for a batch of feature vectors."""
        h = F.gelu(self.inp(x))
        for block in self.blocks:
            h = block(h)
        return self.head(h)


def make_data(seed: int, in_features: int, classes: int, pace_ms: float = 0.0) -> Any:
    """``make_batch`` for inputs ~ N(0, 1) labelled by a fixed random linear teacher, each
    batch made ``pace_ms`` late."""
    teacher = torch.randn(in_features, classes, generator=dataset_generator(seed))

    def sample(gen: torch.Generator) -> tuple[torch.Tensor, ...]:
        x = torch.randn(in_features, generator=gen)
        return x, (x @ teacher).argmax()

    def make_batch(first: int, count: int) -> Batch:
        if pace_ms:
            time.sleep(pace_ms / 1000.0)
        return stack_samples(seed, first, count, sample)

    return make_batch


def classification_loss(model: nn.Module, batch: Batch) -> torch.Tensor:
    """Mean cross-entropy of ``model(x)`` against labels ``y``."""
    x, y = batch
    return F.cross_entropy(model(x), y)


def build(args: dict[str, Any], seed: int) -> Workload:
    """Build the ``mlp`` workload (arguments: in_features, hidden, n_layer, classes, pace_ms).

    Raises:
        WorkloadError: an unknown or mistyped argument, a size <= 0, or ``pace_ms`` outside
            0 .. ``shapes.MAX_PACE_MS`` (the checks of :func:`~workers.workloads.shapes.check_args`,
            which the control plane makes at submission).
    """
    check_args("mlp", args)
    a = take_args("mlp", args, DEFAULTS)
    model = MLP(a["in_features"], a["hidden"], a["n_layer"], a["classes"])
    return Workload(
        model=model,
        loss=classification_loss,
        make_batch=make_data(seed, a["in_features"], a["classes"], a["pace_ms"]),
        blocks=list(model.blocks),
    )
