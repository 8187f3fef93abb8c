"""What a run's latency bookkeeping costs per report and per checkpoint, before and after the
sketch (issue 14), at 10^3, 10^5 and 10^6 measured steps.

    .venv/bin/python bench/harness/report_cost.py            # the figures (about a minute)
    .venv/bin/python bench/harness/report_cost.py --smoke    # 10^2, 10^3, 10^4 steps (seconds)

- before: the harness as it was, reimplemented here: every step latency in a list, and each
  report calls ``percentile`` for p50, p95 and p99 (each sorts the whole list); each checkpoint
  stores the list.
- after: :class:`workers.latency.LatencySketch` (DDSketch, 1% relative accuracy): each report
  reads three quantiles off the buckets; each checkpoint stores the bucket counts.

Latencies are the step times measured on a GPU cluster (Pollux OSDI'21 artifact, bundled in
``bench/data/pollux``: six applications, milliseconds to seconds), drawn at random with a fixed
seed. For each size the two are timed alternately, ``--repeats`` pairs: median (min-max).
"Checkpoint" is the bytes ``torch.save`` writes for the latency field alone (the model and the
optimizer, the same in both, come on top). "Record" is the cost added to every step. Also given:
the largest relative error of the sketch's p50/p95/p99 against the exact order statistics.
"""

from __future__ import annotations

import argparse
import csv
import io
import json
import math
import os
import platform
import random
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import torch

from workers.latency import RELATIVE_ACCURACY, LatencySketch
from workers.telemetry import percentile

ROOT = Path(__file__).resolve().parents[2]
APPS = ROOT / "bench" / "data" / "pollux" / "apps"
RESULTS = Path(__file__).parent / "results"
QUANTILES = (50, 95, 99)


def recorded_step_times_ms() -> list[float]:
    times = []
    for folder in sorted(p for p in APPS.iterdir() if p.is_dir()):
        with (folder / "placements.csv").open() as fh:
            times += [float(row["step_time"]) * 1000.0 for row in csv.DictReader(fh)]
    return times


def report_before(latencies: list[float]) -> list[float]:
    """The old ``_Run._metrics``: three percentiles, each sorting the whole list."""
    return [percentile(latencies, q) for q in QUANTILES]


def report_after(sketch: LatencySketch) -> list[float]:
    return [sketch.quantile(q / 100) or math.nan for q in QUANTILES]


def saved_bytes(obj: Any) -> int:
    buf = io.BytesIO()
    torch.save({"latency": obj}, buf)
    return buf.tell()


def timed(fn: Callable[[], object]) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def span(values: list[float], scale: float = 1.0, fmt: str = ".3g") -> str:
    med, lo, hi = (scale * v for v in (statistics.median(values), min(values), max(values)))
    return f"{med:{fmt}} ({lo:{fmt}}-{hi:{fmt}})"


def measure(n: int, pool: list[float], repeats: int, rng: random.Random) -> dict[str, Any]:
    latencies = [rng.choice(pool) for _ in range(n)]
    sketch = LatencySketch()
    record_after_s = timed(lambda: [sketch.add(v) for v in latencies]) / n
    kept: list[float] = []
    record_before_s = timed(lambda: [kept.append(v) for v in latencies]) / n
    before_s, after_s = [], []
    for _ in range(repeats):  # alternate, so drift on a shared machine hits both alike
        before_s.append(timed(lambda: report_before(latencies)))
        after_s.append(timed(lambda: report_after(sketch)))
    ordered = sorted(latencies)
    exact = [ordered[math.floor(q / 100 * (n - 1))] for q in QUANTILES]
    error = max(abs(e - x) / x for e, x in zip(report_after(sketch), exact, strict=True))
    return {
        "steps": n,
        "report_s_before": before_s,
        "report_s_after": after_s,
        "checkpoint_bytes_before": saved_bytes(latencies),
        "checkpoint_bytes_after": saved_bytes(sketch.state()),
        "buckets": len(sketch.state()["counts"]),
        "record_us_before": record_before_s * 1e6,
        "record_us_after": record_after_s * 1e6,
        "max_relative_error": error,
    }


def commit() -> str:
    out = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True
    )
    return out.stdout.strip() or "unknown"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--smoke", action="store_true", help="small sizes, a few seconds")
    parser.add_argument("--repeats", type=int, default=5, help="before/after pairs per size")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    sizes = [10**2, 10**3, 10**4] if args.smoke else [10**3, 10**5, 10**6]
    pool, rng = recorded_step_times_ms(), random.Random(args.seed)
    rows = [measure(n, pool, args.repeats, rng) for n in sizes]

    print(
        f"Latency bookkeeping, before (list) and after (DDSketch {RELATIVE_ACCURACY:.0%}): "
        f"{args.repeats} pairs, median (min-max)"
    )
    head = ("steps", "report ms before", "report ms after", "ckpt KB before", "ckpt KB after")
    print(f"  {head[0]:>9s} {head[1]:>28s} {head[2]:>24s} {head[3]:>15s} {head[4]:>14s}")
    for r in rows:
        print(
            f"  {r['steps']:>9,d} {span(r['report_s_before'], 1e3):>28s} "
            f"{span(r['report_s_after'], 1e3):>24s} "
            f"{r['checkpoint_bytes_before'] / 1e3:15.1f} {r['checkpoint_bytes_after'] / 1e3:14.2f}"
        )
    print("  per-step record cost (us): before list.append, after sketch.add; sketch error")
    for r in rows:
        print(
            f"  {r['steps']:>9,d} {r['record_us_before']:8.3f} {r['record_us_after']:8.3f}"
            f"   buckets {r['buckets']:4d}   max rel. error p50/p95/p99 "
            f"{r['max_relative_error']:.4f} (stated {RELATIVE_ACCURACY})"
        )
    meta = {
        "date": time.strftime("%Y-%m-%d"),
        "commit": commit(),
        "cores": os.cpu_count(),
        "machine": platform.machine(),
        "python": platform.python_version(),
        "repeats": args.repeats,
        "seed": args.seed,
        "relative_accuracy": RELATIVE_ACCURACY,
    }
    RESULTS.mkdir(exist_ok=True)
    name = "report_cost-smoke.json" if args.smoke else "report_cost.json"
    (RESULTS / name).write_text(json.dumps({"meta": meta, "rows": rows}, indent=1) + "\n")
    worst = max(r["max_relative_error"] for r in rows)
    return 0 if worst <= RELATIVE_ACCURACY * (1 + 1e-9) else 1


if __name__ == "__main__":
    sys.exit(main())
