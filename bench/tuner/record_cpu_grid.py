"""Record the CPU grid: every config of the built-in training workloads, measured for real.

Each config is one profiling run through the tuner's own evaluator (the worker harness,
in-process, one CPU thread = one virtual GPU slot): 3 warm-up steps excluded, 10 measured.
One GPU (no data parallelism on a 2-core machine), no torch.compile (a C++ toolchain and tens of
seconds per config); micro-batch 1..128, precision fp32/bf16, activation checkpointing off/on,
gradient accumulation 1/2. Its cost is the run's wall time.

    .venv/bin/python -m bench.tuner.record_cpu_grid        # writes data/cpu_grid.json
"""

from __future__ import annotations

import argparse
import datetime
import json
import platform
import sys
import time
from pathlib import Path

from orchestrator.tuner.evaluators import HarnessEvaluator
from orchestrator.tuner.space import DeviceCaps, SearchSpace, power_ladder

OUT = Path(__file__).parent / "data" / "cpu_grid.json"
WORKLOADS = ("mlp", "cnn", "gpt")


def main(argv: list[str] | None = None) -> int:
    """Measure the grid and write it."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", type=Path, default=OUT)
    p.add_argument("--max-micro-batch", type=int, default=128)
    args = p.parse_args(argv)
    import torch

    caps = DeviceCaps()
    space = SearchSpace(
        micro_batches=power_ladder(1, args.max_micro_batch),
        grad_accums=(1, 2),
        precisions=("fp32", "bf16"),
        activation_checkpointing=(False, True),
        gpus_per_node=1,
    )
    out = {
        "meta": {
            "date": datetime.date.today().isoformat(),
            "machine": f"{platform.processor() or platform.machine()}, 2-core CPU, no GPU",
            "torch": torch.__version__,
            "python": platform.python_version(),
            "threads": 1,
            "warmup_steps": 3,
            "measured_steps": 10,
            "command": "python -m bench.tuner.record_cpu_grid",
        },
        "workloads": [],
    }
    for name in WORKLOADS:
        ev = HarnessEvaluator(name, {}, caps=caps, warmup_steps=3, measured_steps=10)
        rows = []
        t0 = time.perf_counter()
        for c in space.configs():
            m = ev.evaluate(c)
            rows.append({"config": c.to_dict(), "measurement": m.to_dict()})
            print(
                f"{name} {c.describe():45s} {m.samples_per_s or 0:10.1f}/s p95 {m.p95_ms:.1f} ms",
                flush=True,
            )
        print(f"{name}: {len(rows)} configs in {time.perf_counter() - t0:.0f} s", file=sys.stderr)
        out["workloads"].append({"name": name, "space": space.to_dict(), "rows": rows})
    args.out.write_text(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
