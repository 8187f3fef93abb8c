"""``infer``: forward-only inference (online serving or batch scoring) of a small model.

One harness step is one request batch of ``micro_batch`` samples, so the reported latency
percentiles are per-request-batch latencies. ``model`` picks the network: ``gpt`` (default,
the small decoder in eval mode; tokens/s reported) or ``mlp``; the other arguments are that
workload's.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from workers.workloads import gpt, mlp
from workers.workloads.base import Batch, Workload, WorkloadError
from workers.workloads.shapes import INFER_MODELS

MODELS = INFER_MODELS


def forward_only(model: nn.Module, batch: Batch) -> torch.Tensor:
    """The model's output for the batch inputs (the targets are ignored)."""
    x, _ = batch
    return model(x)


def build(args: dict[str, Any], seed: int) -> Workload:
    """Build the ``infer`` workload (arguments: model, then that model's arguments)."""
    rest = dict(args)
    kind = rest.pop("model", "gpt")
    net: nn.Module
    if kind == "gpt":
        net, make_batch, tokens = gpt.build_parts(rest, seed, "infer")
        blocks: list[nn.Module] = list(net.blocks.values())
    elif kind == "mlp":
        built = mlp.build(rest, seed)
        net, make_batch, tokens, blocks = built.model, built.make_batch, 0, list(built.blocks)
    else:
        raise WorkloadError(
            f"workload 'infer': model must be one of {', '.join(MODELS)}, got {kind!r}"
        )
    net.eval()
    return Workload(
        model=net,
        loss=forward_only,
        make_batch=make_batch,
        tokens_per_sample=tokens,
        train=False,
        blocks=blocks,
    )
