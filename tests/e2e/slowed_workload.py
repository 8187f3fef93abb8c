"""The MLP workload, slowed on purpose after a number of micro-batches, for the SLA guard.

The cost is added to each micro-batch's forward (its ``loss``), inside the timed step: the
harness makes the data before the step's clock starts, so a slow ``make_batch`` would show as
data wait, not as a slower step.

Arguments (beside the MLP's own): ``slow_after`` micro-batches run in one process (or
``slow_after_s`` seconds after the workload was built, if set), after which every micro-batch
costs ``slow_ms`` more; ``flag``: a file created at that moment (if set), and
once it exists every process of the job is slowed from its first micro-batch, so the tuner's
profiling trials of a re-tune measure the slowed workload too (as a real slowdown, a degraded
node or a changed input, would be measured). A fixed cost per micro-batch is what a larger
micro-batch amortises: the re-tune has a better config to find.

``hold``: a file; if set, a micro-batch is slowed only while that file exists (``slow_after``
and ``flag`` do not apply): a test keeps a run going as long as it needs to see a decision
(a grow, a shrink, a preemption), then removes the file and the rest runs at full speed. The
file's folder must be searchable by the job's own uid (a team's code runs sandboxed).
"""

from __future__ import annotations

import os
import time
from typing import Any

from workers.workloads.base import Workload
from workers.workloads.mlp import build as build_mlp


def build(args: dict[str, Any], seed: int) -> Workload:
    """The MLP of ``args`` (without this module's own arguments), slowed as the module says."""
    own = {
        k: args[k] for k in ("slow_after", "slow_after_s", "slow_ms", "flag", "hold") if k in args
    }
    workload = build_mlp({k: v for k, v in args.items() if k not in own}, seed)
    after, ms, flag = int(own.get("slow_after", 0)), float(own.get("slow_ms", 0)), own.get("flag")
    made = 0
    loss = workload.loss
    at = time.monotonic() + float(own["slow_after_s"]) if "slow_after_s" in own else None
    hold = own.get("hold")

    def slowed(model: Any, batch: Any) -> Any:
        nonlocal made
        made += 1
        if hold is not None:
            if os.path.exists(hold):
                time.sleep(ms / 1000.0)
            return loss(model, batch)
        late = made > after if at is None else time.monotonic() >= at
        flagged = flag is not None and os.path.exists(flag)
        if late and flag is not None and not flagged:
            with open(flag, "a"):
                pass
        slow = late or flagged
        if slow:
            time.sleep(ms / 1000.0)
        return loss(model, batch)

    workload.loss = slowed
    return workload
