"""A served model whose answer costs a set time per request, for the live scaling test.

The ``infer`` MLP (tiny), with ``request_ms`` of sleep per request added to each batch's
forward pass: a replica's busy share is then the offered load times that cost, whatever the
CPU does beside it (on the 2-core test machine a compute-bound model's time moves with every
other test), so a load that doubles doubles it.

Arguments: ``request_ms`` (the rest go to ``infer``'s MLP).
"""

from __future__ import annotations

import time
from typing import Any

from workers.workloads.base import Workload
from workers.workloads.infer import build as build_infer


def build(args: dict[str, Any], seed: int) -> Workload:
    """The paced ``infer`` MLP of ``args`` (see the module doc)."""
    cost = float(args.get("request_ms", 10.0)) / 1000.0
    workload = build_infer(
        {"model": "mlp", **{k: v for k, v in args.items() if k != "request_ms"}}, seed
    )
    forward = workload.loss

    def paced(model: Any, batch: Any) -> Any:
        time.sleep(cost * len(batch[0]))
        return forward(model, batch)

    workload.loss = paced
    return workload
