"""The SLA guard on measured step times: false trips on noise, and how fast a real slowdown
trips, for several hysteresis holds (issue 15).

    .venv/bin/python bench/guard/noise.py            # the figures in BENCHMARKS.md (~3 min)
    .venv/bin/python bench/guard/noise.py --smoke    # a few seconds

One real run of the worker harness in this process (the MLP workload, 1 CPU thread), reporting
once a second as a job's rank 0 does: every report carries the shipped sliding window
(``workers.window.RecentSteps``, 30 s). After ``--slow-after`` seconds every micro-batch costs
``--slow-ms`` more (``tests/e2e/slowed_workload.py``). The recorded reports are then replayed
through the shipped judgement (``orchestrator.control.guard.reading_of`` and ``assess``, as the
control loop calls them) with a throughput floor at ``--floor-frac`` of the median window rate
before the slowdown (a floor the job meets, within its noise), and a latency ceiling at
``1 / floor-frac`` of the median window p95, for each hold. Counted: trips before the slowdown
(false: noise), and the seconds from the slowdown to the first trip (detection).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from orchestrator.control.guard import GuardConfig, Reading, Targets, Watch, assess, reading_of
from workers.config import HarnessConfig
from workers.harness import Harness

RESULTS = Path(__file__).parent / "results"
SLOWED = "tests.e2e.slowed_workload:build"
HOLDS: tuple[float, ...] = (0.0, 2.0, 5.0, 10.0, 20.0)


def record(
    seconds: float,
    slow_after: float,
    slow_ms: float,
    *,
    device: str | None = None,
    workload: str = SLOWED,
    workload_args: dict[str, Any] | None = None,
    micro_batch: int = 32,
    precision: str = "fp32",
    num_threads: int | None = 1,
) -> list[dict[str, Any]]:
    """The reports of one harness run of ``seconds``, slowed after ``slow_after``.

    Args:
        device: where it runs (the harness's default: CUDA when present, else the CPU).
        workload: a workload taking ``slow_after_s`` and ``slow_ms`` besides
            ``workload_args``.
        num_threads: torch CPU threads (``None``: leave them).
    """
    reports: list[dict[str, Any]] = []
    began = time.monotonic()

    def keep(report: dict[str, Any]) -> None:
        reports.append({**report, "t": time.monotonic() - began})

    config = HarnessConfig(
        workload=workload,
        workload_args={**(workload_args or {}), "slow_after_s": slow_after, "slow_ms": slow_ms},
        micro_batch=micro_batch,
        precision=precision,
        duration_s=seconds,
        warmup_steps=5,
    )
    Harness(config, device=device, report=keep, report_every_s=1.0, num_threads=num_threads).run()
    return reports


def replay(
    reports: list[dict[str, Any]], targets: Targets, hold_s: float, slow_at: float
) -> dict[str, Any]:
    """Trips of each check before ``slow_at`` and the first trip after it."""
    cfg = GuardConfig(hold_s=hold_s)
    watch, false, first = Watch(), 0, None
    for r in reports:
        reading: Reading = reading_of(r, targets, r["t"])
        watch, found = assess(targets, reading, watch, cfg)
        for f in found:
            if not f.tripped:
                continue
            if r["t"] < slow_at:
                false += 1
            elif first is None:
                first = r["t"] - slow_at
    return {"false_trips": false, "detect_s": first}


def analyse(
    reports: list[dict[str, Any]], slow_after: float, floor_frac: float, warm: float
) -> dict[str, Any]:
    """The window's rate and p95 before the slowdown (reports after ``warm`` s), the targets
    they give, and each check's false trips and detection time at each hold of :data:`HOLDS`."""
    before = [r for r in reports if slow_after > r["t"] > warm and r.get("window_steps")]
    rate = statistics.median(r["window_samples_per_s"] for r in before)
    p95 = statistics.median(r["window_p95_ms"] for r in before)
    after = [r["window_samples_per_s"] for r in reports if r["t"] > slow_after + 31]
    checks = {
        "throughput": Targets(floor=floor_frac * rate),
        "latency": Targets(percentile=95, max_ms=p95 / floor_frac),
    }
    rows = []
    for hold in HOLDS:
        for name, targets in checks.items():
            rows.append(
                {"check": name, "hold_s": hold, **replay(reports, targets, hold, slow_after)}
            )
    return {
        "reports": len(reports),
        "rate_before": rate,
        "rate_after": statistics.median(after) if after else None,
        "p95_before_ms": p95,
        "floor": floor_frac * rate,
        "ceiling_ms": p95 / floor_frac,
        "rows": rows,
    }


def print_table(out: dict[str, Any], floor_frac: float) -> None:
    """The figures of :func:`analyse` as the benchmark prints them."""
    rate, p95 = out["rate_before"], out["p95_before_ms"]
    print(
        f"window rate before {rate:,.0f} samples/s (floor {floor_frac * rate:,.0f}), "
        f"after {out['rate_after'] or 0:,.0f}; p95 before {p95:.2f} ms"
    )
    print(f"{'check':<11} {'hold s':>6} {'false trips':>11} {'detected after s':>17}")
    for r in out["rows"]:
        d = "-" if r["detect_s"] is None else f"{r['detect_s']:.1f}"
        print(f"{r['check']:<11} {r['hold_s']:>6g} {r['false_trips']:>11} {d:>17}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=180.0)
    ap.add_argument("--slow-after", type=float, default=120.0)
    ap.add_argument("--slow-ms", type=float, default=5.0)
    ap.add_argument("--floor-frac", type=float, default=0.9)
    ap.add_argument("--smoke", action="store_true")
    args = ap.parse_args()
    if args.smoke:
        # a slowdown far above a loaded machine's noise: the smoke run checks that the pieces
        # connect (a hold of 0 sees it), not how small a slowdown the guard can see; slowed
        # for twice as long as it ran fast, so the slow steps are well over 5% of the window
        # and move its p95 however fast the fast steps were (at 4 s and 4 s, fast steps of
        # 2 ms make them under 4%: a busy CI run once saw no trip at a hold of 0)
        args.seconds, args.slow_after, args.slow_ms = 12.0, 4.0, 50.0
    reports = record(args.seconds, args.slow_after, args.slow_ms)
    # the window is full (30 s) from then on; a smoke run takes what it has
    warm = 35.0 if args.slow_after > 60 else 0.0
    figures = analyse(reports, args.slow_after, args.floor_frac, warm)
    rows = figures.pop("rows")
    out = {**figures, "args": vars(args), "rows": rows}
    print_table(out, args.floor_frac)
    if not args.smoke:
        RESULTS.mkdir(exist_ok=True)
        (RESULTS / "noise.json").write_text(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
