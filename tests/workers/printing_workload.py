"""A user workload that talks: it prints, warns, and (``fail: true``) crashes mid-run.

Used by the log-capture tests (``tests.workers.printing_workload:build``) and the end-to-end
``orch logs`` test: what it writes must come back per rank.
"""

from __future__ import annotations

import sys
import warnings
from typing import Any

import torch
from torch import nn

from workers.workloads.base import Batch, Workload


def build(args: dict[str, Any], seed: int) -> Workload:
    """Linear regression that prints a line per batch it makes and warns once."""
    print(f"building with seed {seed}")
    warnings.warn("a warning from the workload", UserWarning, stacklevel=1)
    fail_at = args.get("fail_at")

    def make_batch(first: int, count: int) -> Batch:
        print(f"batch from sample {first}")
        if fail_at is not None and first >= int(fail_at):
            raise RuntimeError(f"the workload broke at sample {first}")
        x = torch.ones(count, 4) * first
        return x, x.sum(dim=1)

    def loss(model: nn.Module, batch: Batch) -> torch.Tensor:
        x, y = batch
        print("to stderr, mid-step", file=sys.stderr)
        return nn.functional.mse_loss(model(x).squeeze(-1), y)

    return Workload(model=nn.Linear(4, 1), loss=loss, make_batch=make_batch)
