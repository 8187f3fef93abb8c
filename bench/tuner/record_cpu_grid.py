"""Record the CPU grid: every config of the built-in training workloads, measured for real.

Each config is one profiling run through the tuner's own evaluator (the worker harness,
in-process, one CPU thread = one virtual GPU slot): 3 warm-up steps excluded, 10 measured.
One GPU (no data parallelism on a 2-core machine), no torch.compile (a C++ toolchain and tens of
seconds per config); micro-batch 1..128, precision fp32/bf16, activation checkpointing off/on,
gradient accumulation 1/2. Its cost is the run's wall time. Before each workload's grid one
run is made and discarded: the first run in a process pays one-time costs (lazy imports,
allocator and kernel warm-up) that belong to no config, and would otherwise be charged to
whichever config the grid measures first. The grid is measured ``--repeats`` times (3), in
whole passes so that machine drift spreads over every config, and each config keeps the
median of its runs (metric by metric) with the min-max of its throughput: a single 10-step run
on a shared VM varies by several percent, more than the 1-3 % the benchmark judges regret by.

    .venv/bin/python -m bench.tuner.record_cpu_grid        # writes data/cpu_grid.json
"""

from __future__ import annotations

import argparse
import datetime
import json
import platform
import statistics
import sys
import time
from pathlib import Path

from orchestrator.tuner.evaluators import HarnessEvaluator
from orchestrator.tuner.objective import Measurement
from orchestrator.tuner.space import Config, DeviceCaps, SearchSpace, power_ladder

OUT = Path(__file__).parent / "data" / "cpu_grid.json"
WORKLOADS = ("mlp", "cnn", "gpt")


def main(argv: list[str] | None = None) -> int:
    """Measure the grid and write it."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", type=Path, default=OUT)
    p.add_argument("--max-micro-batch", type=int, default=128)
    p.add_argument("--repeats", type=int, default=3, help="passes over the grid (median kept)")
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
            "discarded_first_run": True,
            "repeats": args.repeats,
            "statistic": "median of the repeats, metric by metric",
            "command": "python -m bench.tuner.record_cpu_grid",
        },
        "workloads": [],
    }
    for name in WORKLOADS:
        ev = HarnessEvaluator(name, {}, caps=caps, warmup_steps=3, measured_steps=10)
        ev.evaluate(next(space.configs()))  # discarded: one-time process costs
        runs: dict[Config, list[Measurement]] = {c: [] for c in space.configs()}
        t0 = time.perf_counter()
        for rep in range(args.repeats):
            for c in space.configs():
                m = ev.evaluate(c)
                runs[c].append(m)
                print(
                    f"{name} [{rep + 1}/{args.repeats}] {c.describe():45s} "
                    f"{m.samples_per_s or 0:10.1f}/s p95 {m.p95_ms or 0:.1f} ms",
                    flush=True,
                )
        rows = []
        for c, ms in runs.items():
            rates = [m.samples_per_s or 0.0 for m in ms]
            rows.append(
                {
                    "config": c.to_dict(),
                    "measurement": _median(ms).to_dict(),
                    "samples_per_s_min_max": [min(rates), max(rates)],
                }
            )
        took = time.perf_counter() - t0
        print(f"{name}: {len(rows)} configs x {args.repeats} in {took:.0f} s", file=sys.stderr)
        out["workloads"].append({"name": name, "space": space.to_dict(), "rows": rows})
    args.out.write_text(json.dumps(out, indent=1))
    return 0


def _median(ms: list[Measurement]) -> Measurement:
    """The median run, metric by metric (a run that failed wins: its config does not run)."""
    failed = [m for m in ms if not m.ok]
    if failed:
        return failed[0]

    def med(name: str) -> float | None:
        values = [getattr(m, name) for m in ms if getattr(m, name) is not None]
        return statistics.median(values) if values else None

    return Measurement(
        "ok",
        p50_ms=med("p50_ms"),
        p95_ms=med("p95_ms"),
        p99_ms=med("p99_ms"),
        samples_per_s=med("samples_per_s"),
        tokens_per_s=med("tokens_per_s"),
        peak_mem_mb=med("peak_mem_mb"),
        cost_s=statistics.median(m.cost_s for m in ms),
    )


if __name__ == "__main__":
    raise SystemExit(main())
