"""A team's own servable model: a small ranker scoring a request's feature vector.

Served by ``job.yaml`` as ``workload: {entry: ranker:build}`` (see the user guide, "Serving
your own model"). A servable model is an ordinary workload (``workers/workloads/README.md``)
whose ``build(args, seed)`` returns a :class:`~workers.workloads.base.Workload` with:

* ``model``: the ``nn.Module`` to serve (the harness moves it to the device, applies the
  precision, ``torch.compile`` and int8 quantization of its ``nn.Linear`` layers);
* ``make_batch(first, count)``: the inputs of requests ``first .. first+count-1``, each a
  function of ``(seed, index)`` only (the load test and the service make their requests'
  inputs with it; the int8 accuracy check compares outputs on 64 of them);
* ``loss(model, batch)``: the forward pass, returning the model's output as one tensor (it
  calls ``model(...)``: the harness may hand in a quantized or compiled copy);
* ``train=False``: forward-only. This flag, not the workload's name, is what makes it servable.

The module imports nothing of the orchestrator but the workload protocol, and runs only in the
job's sandboxed worker process.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn
from torch.nn import functional as F

from workers.workloads.base import Batch, Workload, WorkloadError
from workers.workloads.data import sample_generator

DEFAULTS: dict[str, int] = {"features": 32, "hidden": 128, "n_layer": 2, "outputs": 4}


class Ranker(nn.Module):
    """Input projection, ``n_layer`` residual blocks (norm, linear, GELU), a scoring head."""

    def __init__(self, features: int, hidden: int, n_layer: int, outputs: int) -> None:
        super().__init__()
        self.inp = nn.Linear(features, hidden)
        self.blocks = nn.ModuleList(
            nn.Sequential(nn.LayerNorm(hidden), nn.Linear(hidden, hidden), nn.GELU())
            for _ in range(n_layer)
        )
        self.head = nn.Linear(hidden, outputs)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Scores of a batch of feature vectors."""
        h = F.gelu(self.inp(x))
        for block in self.blocks:
            h = h + block(h)
        return self.head(h)


def build(args: dict[str, Any], seed: int) -> Workload:
    """The servable ranker (arguments: features, hidden, n_layer, outputs)."""
    unknown = sorted(set(args) - set(DEFAULTS))
    if unknown:
        raise WorkloadError(f"ranker does not take {unknown}; its arguments: {sorted(DEFAULTS)}")
    a = {**DEFAULTS, **{k: int(v) for k, v in args.items()}}
    if min(a.values()) < 1:
        raise WorkloadError(f"ranker: every argument must be >= 1, got {a}")
    model = Ranker(a["features"], a["hidden"], a["n_layer"], a["outputs"]).eval()

    def make_batch(first: int, count: int) -> Batch:
        # request i's features depend on (seed, i) only, whatever batch it lands in
        rows = [
            torch.randn(a["features"], generator=sample_generator(seed, i))
            for i in range(first, first + count)
        ]
        return torch.stack(rows)

    def forward(m: nn.Module, batch: Batch) -> torch.Tensor:
        return m(batch)

    return Workload(
        model=model, loss=forward, make_batch=make_batch, train=False, blocks=list(model.blocks)
    )
