"""The share of the timed step that was synthetic data generation, before and after issue 22.

    .venv/bin/python bench/harness/data_share.py --before /tmp/permeas-base   # about 2 minutes
    .venv/bin/python bench/harness/data_share.py --before /tmp/permeas-base --smoke

``--before`` is a checkout of the harness as it was (``git worktree add /tmp/permeas-base
40fabdc``): its step loop called the workload's ``make_batch`` inside the timed step. After, the
harness makes the step's batches before the step's clock starts and reports the time as data
wait (``data_wait_ms``, ``data_wait_share``), apart from the step (``compute_ms``, the latency
percentiles).

For each built-in workload at its built-in size (one CPU thread, fp32), each side runs
``warmup + steps`` steps in a fresh process of its own tree, alternating which side goes first,
``--repeats`` times. In the child, the workload's ``make_batch`` is wrapped in a timer (a
measuring instrument only: the data are unchanged), so both sides measure generation the same
way. Per measured step:

- ``data_ms``: time in ``make_batch``;
- ``step_ms``: the harness's timed step (mean over the measured steps, from its throughput);
- ``share``: the part of the timed step that was generation: ``data_ms / step_ms`` before
  (generation ran inside the clock), 0 after (it runs before it);
- after only, the harness's own ``data_wait_share`` (wait over wait plus step), which should match
  the "before" share: the same work, now reported apart.

Medians (min-max) over the repeats.

Each child also runs the issue's peak-memory case in its one process: ``gpt`` at micro-batch 4,
then 64, then 4 again (3 steps each), and records each run's ``peak_mem_mb``: before, the
process's peak RSS (never restarted), after, each run's own.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
RESULTS = Path(__file__).parent / "results"

# name, workload, workload args, micro-batch: the mlp and infer(mlp) at 256, the rest at
# the sizes of the harness-overhead benchmark
CASES: list[tuple[str, str, dict[str, Any], int]] = [
    ("mlp", "mlp", {}, 256),
    ("cnn", "cnn", {}, 32),
    ("gpt", "gpt", {}, 32),
    ("infer(mlp)", "infer", {"model": "mlp"}, 256),
    ("infer(gpt)", "infer", {"model": "gpt"}, 32),
]


def child(tree: Path, warmup: int, steps: int) -> dict[str, Any]:
    """Run every case with the harness of ``tree`` (this process imports only that tree)."""
    sys.path.insert(0, str(tree))
    import torch

    from workers.config import HarnessConfig
    from workers.harness import Harness

    torch.set_num_threads(1)
    # first in the process, so that "alone" is alone: then the larger run, then the small again
    peaks = {}
    for label, micro_batch in (("mb4_alone", 4), ("mb64", 64), ("mb4_after", 4)):
        config = HarnessConfig(workload="gpt", micro_batch=micro_batch, steps=3, warmup_steps=1)
        peaks[label] = Harness(config, device="cpu").run().peak_mem_mb
    rows = []
    for name, workload, args, micro_batch in CASES:
        config = HarnessConfig(
            workload=workload,
            workload_args=args,
            micro_batch=micro_batch,
            steps=warmup + steps,
            warmup_steps=warmup,
        )
        harness = Harness(config, device="cpu")
        calls: list[float] = []
        make = harness.workload.make_batch

        def timed_make(first: int, count: int, make: Any = make, calls: list[float] = calls) -> Any:
            t0 = time.perf_counter()
            batch = make(first, count)
            calls.append(time.perf_counter() - t0)
            return batch

        harness.workload.make_batch = timed_make
        result = harness.run()
        assert result.samples_per_s, f"{name}: nothing measured"
        measured_s = steps * harness.global_batch / result.samples_per_s
        inside = not hasattr(result, "data_wait_ms")  # the old harness: made in the step
        data_s = sum(calls[warmup:])  # one micro-batch per step (no accumulation)
        rows.append(
            {
                "case": name,
                "micro_batch": micro_batch,
                "data_ms": 1000 * data_s / steps,
                "step_ms": 1000 * measured_s / steps,
                "p50_ms": result.p50_ms,
                "share": data_s / measured_s if inside else 0.0,
                "reported_data_wait_share": getattr(result, "data_wait_share", None),
                "reported_data_wait_ms": getattr(result, "data_wait_ms", None),
            }
        )
    return {"rows": rows, "peaks": peaks}


def run_side(tree: Path, warmup: int, steps: int) -> dict[str, Any]:
    cmd = [sys.executable, __file__, "--child", str(tree), "--warmup", str(warmup)]
    out = subprocess.run(
        [*cmd, "--steps", str(steps)], capture_output=True, text=True, check=True, cwd=tree
    )
    got: dict[str, Any] = json.loads(out.stdout.strip().splitlines()[-1])
    return got


def span(values: list[float], scale: float = 1.0, fmt: str = ".3g") -> str:
    med, lo, hi = (scale * v for v in (statistics.median(values), min(values), max(values)))
    return f"{med:{fmt}} ({lo:{fmt}}-{hi:{fmt}})"


def commit(tree: Path) -> str:
    out = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], cwd=tree, capture_output=True, text=True
    )
    return out.stdout.strip() or "unknown"


def summarise(runs: dict[str, list[dict[str, Any]]]) -> list[dict[str, Any]]:
    table = []
    for i, (name, _, _, mb) in enumerate(CASES):
        row: dict[str, Any] = {"case": name, "micro_batch": mb}
        for side, repeats in runs.items():
            for key in ("data_ms", "step_ms", "share", "reported_data_wait_share"):
                values = [r["rows"][i][key] for r in repeats if r["rows"][i][key] is not None]
                row[f"{key}_{side}"] = values
        table.append(row)
    return table


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--before", type=Path, help="checkout of the harness before (40fabdc)")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--smoke", action="store_true", help="1 repeat of 3 steps")
    parser.add_argument("--child", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child is not None:
        print(json.dumps(child(args.child, args.warmup, args.steps)))
        return 0
    if args.before is None:
        parser.error("--before PATH is required (git worktree add /tmp/permeas-base 40fabdc)")
    repeats, steps = (1, 3) if args.smoke else (args.repeats, args.steps)
    runs: dict[str, list[dict[str, Any]]] = {"before": [], "after": []}
    trees = {"before": args.before.resolve(), "after": ROOT}
    for k in range(repeats):  # alternate which side goes first: drift hits both alike
        for side in ("before", "after") if k % 2 == 0 else ("after", "before"):
            runs[side].append(run_side(trees[side], args.warmup, steps))
    table = summarise(runs)
    print(f"Data generation in the timed step, {repeats} repeats, median (min-max), 1 CPU thread")
    head = ("case", "mb", "data ms", "step ms before", "share before", "step ms after")
    print(
        f"  {head[0]:<11s}{head[1]:>5s} {head[2]:>22s} {head[3]:>22s} {head[4]:>22s} {head[5]:>22s}"
        "  share after  reported wait share"
    )
    for r in table:
        print(
            f"  {r['case']:<11s}{r['micro_batch']:>5d} {span(r['data_ms_before']):>22s} "
            f"{span(r['step_ms_before']):>22s} {span(r['share_before'], 100):>22s} "
            f"{span(r['step_ms_after']):>22s} {span(r['share_after'], 100):>11s}  "
            f"{span(r['reported_data_wait_share_after'], 100)}"
        )
    peaks = {
        side: {k: [r["peaks"][k] for r in repeats] for k in ("mb4_alone", "mb64", "mb4_after")}
        for side, repeats in runs.items()
    }
    print("gpt peak memory (MiB) in one process: micro-batch 4, then 64, then 4 again")
    for side, p in peaks.items():
        print(f"  {side:<7s}" + "".join(f"  {k} {span(v, fmt='.0f')}" for k, v in p.items()))
    meta = {
        "date": time.strftime("%Y-%m-%d"),
        "commit_after": commit(ROOT),
        "commit_before": commit(trees["before"]),
        "cores": os.cpu_count(),
        "machine": platform.machine(),
        "python": platform.python_version(),
        "threads": 1,
        "repeats": repeats,
        "warmup_steps": args.warmup,
        "steps": steps,
    }
    RESULTS.mkdir(exist_ok=True)
    name = "data_share-smoke.json" if args.smoke else "data_share.json"
    (RESULTS / name).write_text(
        json.dumps({"meta": meta, "rows": table, "peaks": peaks}, indent=1) + "\n"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
