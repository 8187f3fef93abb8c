"""Benchmark (a): fidelity on the Pollux workloads, then our policy against the published figures.

    .venv/bin/python bench/scheduler/pollux.py            # all 8 workloads, loads 1.0 and 0.5
    .venv/bin/python bench/scheduler/pollux.py --smoke    # one small run (the test suite's)

Reads the Pollux data from ``$ORCH_POLLUX_TRACES`` or ``../shared/traces/pollux`` (see
``orchestrator/sim/profiles.py``). Tiresias runs each job at its hand-tuned GPUs and batch, as
published; ``shared`` (ours) sees each job as elastic (1 GPU up to what its largest batch can
use) with its measured profile, and adapts the batch per epoch. Prints a table and writes
``bench/scheduler/results/pollux[-smoke].json``.
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from datetime import UTC, datetime
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from orchestrator.sim import Simulator, pollux_workload, uniform_pool
from policies import SCHEDULING_POLICIES

RESULTS = Path(__file__).parent / "results"
PUBLISHED = {
    ("tiresias", 1.0): [2474, 5145, 3876, 3280, 3501, 3470, 5480, 5080],
    ("tiresias", 0.5): [1451, 2333, 1870, 1947, 1425, 1827, 3979, 1900],
    ("pollux", 1.0): [2089, 3323, 2188, 2721, 2674, 2446, 3616, 2952],
    ("pollux", 0.5): [1060, 1826, 1311, 1498, 977, 1288, 2881, 1432],
}
"""Mean JCT (s) per workload, from the artifact's result files (see the traces README)."""


def run_one(policy: str, load: float, workload: int, limit: int | None) -> dict[str, float]:
    """Simulate one workload under one policy; return its mean JCT and counters."""
    jobs = pollux_workload(f"workload-{workload}", load, adaptive=policy == "shared")
    if limit:
        jobs = jobs[:limit]
    t0 = time.perf_counter()
    result = Simulator(jobs, SCHEDULING_POLICIES.create(policy), uniform_pool(16, 4)).run()
    s = result.summary()
    return {
        "policy": policy,
        "load": load,
        "workload": workload,
        "jobs": len(jobs),
        "mean_jct": s["bulk_mean_jct"],
        "preemptions": s["preemptions"],
        "resizes": s["resizes"],
        "wall_s": time.perf_counter() - t0,
    }


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark; print the table; write the results file."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--smoke", action="store_true", help="one small run (for the test suite)")
    ap.add_argument("--workers", type=int, default=2)
    args = ap.parse_args(argv)
    if args.smoke:
        tasks = [("tiresias", 0.5, 3, None), ("shared", 0.5, 3, 30)]
    else:
        tasks = [
            (p, load, w, None)
            for load in (1.0, 0.5)
            for p in ("tiresias", "shared")
            for w in range(1, 9)
        ]
    with ProcessPoolExecutor(max_workers=args.workers) as pool:
        rows = list(pool.map(run_one, *zip(*tasks, strict=True)))
    print(
        f"{'policy':<9} {'load':>4} {'wl':>3} {'jobs':>5} {'mean JCT':>9} {'published':>9} "
        f"{'ratio':>6} {'Pollux':>7} {'wall s':>7}"
    )
    for r in rows:
        i = int(r["workload"]) - 1
        key = ("tiresias", r["load"])
        pub = PUBLISHED[key][i] if r["policy"] == "tiresias" and not r["jobs"] < 80 else None
        if args.smoke and r["policy"] == "shared":
            pub = None
        pol = PUBLISHED[("pollux", r["load"])][i]
        r["published_tiresias"] = PUBLISHED[key][i]
        r["published_pollux"] = pol
        ratio = f"{r['mean_jct'] / pub:6.3f}" if pub else "     -"
        print(
            f"{r['policy']:<9} {r['load']:>4} {r['workload']:>3} {r['jobs']:>5} "
            f"{r['mean_jct']:>9.0f} {pub or '-':>9} {ratio} {pol:>7} {r['wall_s']:>7.1f}"
        )
    if not args.smoke:
        for load in (1.0, 0.5):
            for p in ("tiresias", "shared"):
                ours = [r["mean_jct"] for r in rows if r["policy"] == p and r["load"] == load]
                print(f"mean over workloads, {p} at load {load}: {sum(ours) / len(ours):.0f}")
    RESULTS.mkdir(exist_ok=True)
    out = RESULTS / ("pollux-smoke.json" if args.smoke else "pollux.json")
    meta = {
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "machine": f"{platform.machine()}, {platform.processor() or 'cpu'}, no GPU",
        "python": platform.python_version(),
    }
    out.write_text(json.dumps({"meta": meta, "rows": rows}, indent=1))
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
