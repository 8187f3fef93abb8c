"""``cnn``: a small convolutional classifier on synthetic 32x32 RGB images.

Each image is noise plus a faint template of its class, so the task is learnable and the loss
falls, which makes a resumed or distributed run's divergence visible.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from workers.workloads.base import Batch, Workload, WorkloadError, require_positive, take_args
from workers.workloads.data import dataset_generator, stack_samples
from workers.workloads.mlp import classification_loss

DEFAULTS: dict[str, Any] = {"channels": 16, "n_layer": 2, "classes": 10, "image_size": 32}


class ConvNet(nn.Module):
    """``n_layer`` blocks (conv 3x3, ReLU, 2x2 max-pool), then a linear head."""

    def __init__(self, channels: int, n_layer: int, classes: int, image_size: int) -> None:
        super().__init__()
        blocks: list[nn.Module] = []
        c_in, c_out, size = 3, channels, image_size
        for _ in range(n_layer):
            blocks.append(
                nn.Sequential(nn.Conv2d(c_in, c_out, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2))
            )
            c_in, c_out, size = c_out, c_out * 2, size // 2
        self.blocks = nn.ModuleList(blocks)
        self.head = nn.Linear(c_in * size * size, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Logits for a batch of images ``(N, 3, H, W)``."""
        for block in self.blocks:
            x = block(x)
        return self.head(x.flatten(1))


def build(args: dict[str, Any], seed: int) -> Workload:
    """Build the ``cnn`` workload (arguments: channels, n_layer, classes, image_size)."""
    a = take_args("cnn", args, DEFAULTS)
    require_positive("cnn", a, ["channels", "n_layer", "classes", "image_size"])
    size, classes = a["image_size"], a["classes"]
    if size % 2 ** a["n_layer"]:
        raise WorkloadError(
            f"workload 'cnn': image_size {size} must be divisible by 2**n_layer = "
            f"{2 ** a['n_layer']}"
        )
    templates = torch.randn(classes, 3, size, size, generator=dataset_generator(seed))

    def sample(gen: torch.Generator) -> tuple[torch.Tensor, ...]:
        label = torch.randint(classes, (), generator=gen)
        image = torch.randn(3, size, size, generator=gen) + 0.5 * templates[label]
        return image, label

    def make_batch(first: int, count: int) -> Batch:
        return stack_samples(seed, first, count, sample)

    model = ConvNet(a["channels"], a["n_layer"], classes, size)
    return Workload(
        model=model,
        loss=classification_loss,
        make_batch=make_batch,
        blocks=list(model.blocks),
    )
