"""Benchmark: services and bulk training in one pool, against services on dedicated GPUs (issue 24).

    .venv/bin/python bench/scheduler/mixed_pool.py            # the full run
    .venv/bin/python bench/scheduler/mixed_pool.py --smoke    # a small run (the test suite's)

Workload (fixed by the arguments and seeds; a re-run gives the same figures):

* **Pool**: ``--nodes`` x ``--gpus-per-node`` GPUs (default 16 x 8 = 128); a round every
  ``--interval`` s (default 10: services need every round, their load moves), 30 s restart
  cost for bulk starts/resizes, ``--startup`` s (default 10) for a service's start or a new
  replica's. A service is resized in place, as a service with an endpoint is live (the
  replicas that stay serve throughout, a scale-up's new ones after ``--startup``);
  ``--relaunch``: as a self-loading one (``serve.endpoint: false``), every resize relaunches
  every replica, which serve nothing meanwhile (the figures before 2026-11-29).
* **Bulk**: the Philly jobs of ``mixed.py`` (submitted in ``--days`` days from ``--start``,
  arrivals ``--speed`` times faster, durations capped at ``--max-hours``; elastic from half to
  twice their GPUs; a checkpoint every 30 minutes; deadlines 2x run time + 1 h), one team per
  Philly cluster, no team guarantees or caps.
* **Services**: ``--services`` services (team ``web``), each the measured request-latency
  curve of ``infer(gpt)`` with dynamic batching (``bench/serving/results/serving.json``,
  :class:`orchestrator.sim.services.LatencyCurve`: a replica carries 3,600 req/s at p99 60 ms)
  and a seeded diurnal offered load (:meth:`LoadProfile.diurnal`: ``--low`` to ``--peak``
  req/s over a ``--period-hours`` period, each service shifted by a seeded phase, 5% noise
  per minute), p99 ceiling 60 ms, serving ``--service-hours`` from time 0.

Two setups, the same jobs:

* **shared**: one pool of all GPUs under ``shared``; each service starts on 1 replica and is
  scaled by the SLA guard's decision (:func:`policies.replicas.scale_replicas`, the live
  guard's function and thresholds) between 1 and twice its peak size; the policy resizes it as
  interactive work (``policies.scheduling.services``) and bulk fills the rest.
* **dedicated**: each service gets a fixed replica count sized for its peak
  (:func:`orchestrator.sim.services.peak_replicas`: its peak load at the guard's 60% busy
  target) on a partition of its own; bulk runs under ``shared`` on the GPUs left.

Reported: service SLA attainment (share of service time whose modelled p99 met the ceiling,
starts and resizes counted as misses), service GPU-hours, bulk mean and p99 JCT, bulk
makespan, pool utilisation (GPU-time held by anything / pool GPU-time up to the last end).
Writes ``bench/scheduler/results/mixed-pool[-smoke].json``.
"""

from __future__ import annotations

import argparse
import json
import platform
import random
import subprocess
import sys
import time
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from orchestrator.sim import SimConfig, Simulator, TraceJob
from orchestrator.sim.services import LatencyCurve, LoadProfile, ServiceSpec, peak_replicas
from orchestrator.sim.trace import philly_window
from policies import SCHEDULING_POLICIES

RESULTS = Path(__file__).parent / "results"
CHECKPOINT_S = 1800.0
RESTART_S = 30.0
CEILING_MS = 60.0


def bulk_jobs(args: argparse.Namespace) -> list[TraceJob]:
    """The Philly bulk jobs (as ``mixed.py`` makes them, durations capped)."""
    return [
        replace(j, checkpoint=CHECKPOINT_S, deadline=2 * j.duration + 3600.0)
        for j in philly_window(
            args.start, args.days, args.speed, max_duration=args.max_hours * 3600.0
        )
    ]


def services(args: argparse.Namespace) -> dict[str, ServiceSpec]:
    """The services' specs, each with its own seeded phase and noise."""
    curve = LatencyCurve.measured("gpt")
    span = args.service_hours * 3600.0
    rnd = random.Random(args.seed)
    out = {}
    for i in range(args.services):
        load = LoadProfile.diurnal(
            args.low,
            args.peak,
            args.period_hours * 3600.0,
            span,
            seed=args.seed + i,
            phase=rnd.random(),
        )
        out[f"svc-{i}"] = ServiceSpec(
            load, curve, CEILING_MS, span, startup_s=args.startup, in_place=not args.relaunch
        )
    return out


def pool(total: int, per_node: int, prefix: str) -> list[tuple[str, int]]:
    """``total`` GPUs as nodes of ``per_node`` (the last one partial)."""
    full, rest = divmod(total, per_node)
    nodes = [(f"{prefix}{i}", per_node) for i in range(full)]
    return nodes + ([(f"{prefix}{full}", rest)] if rest else [])


def service_rows(specs: dict[str, ServiceSpec], shared: bool) -> list[TraceJob]:
    """The services' trace rows: scaled from 1 replica (shared) or fixed at peak size."""
    rows = []
    for name, s in specs.items():
        peak = peak_replicas(s)
        gpus, lo, hi = (1, 1, 2 * peak) if shared else (peak, peak, peak)
        rows.append(
            TraceJob(
                name, 0.0, "web", "interactive", gpus, lo, hi, s.duration, latency_ms=CEILING_MS
            )
        )
    return rows


def simulate(
    jobs: list[TraceJob],
    nodes: list[tuple[str, int]],
    specs: dict[str, ServiceSpec],
    interval: float,
) -> Simulator:
    """One run under ``shared``."""
    sim = Simulator(
        jobs,
        SCHEDULING_POLICIES.create("shared"),
        nodes,
        config=SimConfig(interval_s=interval, every_round=False, restart_s=RESTART_S),
        services=specs,
    )
    sim.run()
    return sim


def figures(sims: list[Simulator], gpus: int, bulk_names: set[str]) -> dict[str, float]:
    """The headline figures over one setup's simulators (one pool, or two partitions)."""
    svc = {"service_attainment": 0.0, "service_gpu_s": 0.0, "service_life_s": 0.0}
    jcts, end, held = [], 0.0, 0.0
    met = life = 0.0
    scales = 0
    for sim in sims:
        for st in sim.services.stats.values():
            met, life = met + st.met_s, life + st.life_s
            svc["service_gpu_s"] += st.gpu_s
            scales += len(st.scales)
        for job in sim.jobs:
            if job.spec.name in bulk_names and job.completed_at is not None:
                jcts.append(job.completed_at - job.spec.submit_time)
        end = max(end, sim.now)
        held += sim.usage.held_gpu_s
    jcts.sort()
    return {
        "service_attainment": met / life if life else float("nan"),
        "service_gpu_hours": svc["service_gpu_s"] / 3600.0,
        "service_scales": scales,
        "bulk_completed": len(jcts),
        "bulk_mean_jct": sum(jcts) / len(jcts) if jcts else float("nan"),
        "bulk_p99_jct": jcts[max(0, -(-99 * len(jcts) // 100) - 1)] if jcts else float("nan"),
        "bulk_makespan_h": max(
            (j.completed_at or 0.0) for s in sims for j in s.jobs if j.spec.name in bulk_names
        )
        / 3600.0,
        "utilisation": held / (gpus * end) if end else float("nan"),
        "end_h": end / 3600.0,
    }


def run(args: argparse.Namespace) -> dict[str, object]:
    """Both setups; their figures."""
    total = args.nodes * args.gpus_per_node
    bulk = bulk_jobs(args)
    names = {j.name for j in bulk}
    specs = services(args)
    t0 = time.perf_counter()
    shared = simulate(
        bulk + service_rows(specs, True), pool(total, args.gpus_per_node, "n"), specs, args.interval
    )
    t_shared = time.perf_counter() - t0
    fixed = {n: replace(s, scale=False) for n, s in specs.items()}
    dedicated = sum(peak_replicas(s) for s in specs.values())
    if dedicated >= total:
        raise SystemExit(f"the services' peak needs {dedicated} GPUs; the pool has {total}")
    t0 = time.perf_counter()
    svc_part = simulate(
        service_rows(fixed, False), pool(dedicated, args.gpus_per_node, "s"), fixed, args.interval
    )
    bulk_part = simulate(bulk, pool(total - dedicated, args.gpus_per_node, "b"), {}, args.interval)
    t_ded = time.perf_counter() - t0
    return {
        "pool_gpus": total,
        "bulk_jobs": len(bulk),
        "services": len(specs),
        "dedicated_gpus": dedicated,
        "shared": {**figures([shared], total, names), "wall_s": t_shared},
        "dedicated": {**figures([svc_part, bulk_part], total, names), "wall_s": t_ded},
    }


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark; print the table; write the results file."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--smoke", action="store_true", help="a small run (for the test suite)")
    ap.add_argument("--nodes", type=int, default=16)
    ap.add_argument("--gpus-per-node", type=int, default=8)
    ap.add_argument("--start", default="2017-10-16")
    ap.add_argument("--days", type=float, default=0.5)
    ap.add_argument("--speed", type=float, default=4.0)
    ap.add_argument("--max-hours", type=float, default=24.0, help="bulk duration cap")
    ap.add_argument("--services", type=int, default=3)
    ap.add_argument("--low", type=float, default=1500.0, help="trough load, req/s")
    ap.add_argument("--peak", type=float, default=20000.0, help="peak load, req/s")
    ap.add_argument("--period-hours", type=float, default=8.0)
    ap.add_argument("--service-hours", type=float, default=48.0)
    ap.add_argument("--startup", type=float, default=10.0, help="service start/resize, s")
    ap.add_argument(
        "--relaunch",
        action="store_true",
        help="a resize relaunches every replica (serve.endpoint: false), not in place",
    )
    ap.add_argument("--interval", type=float, default=10.0, help="seconds between rounds")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", default="", help="results file name under results/, no .json")
    args = ap.parse_args(argv)
    if args.smoke:  # 32 GPUs, 2 hours of Philly arrivals at 8x, 2 services for 6 hours
        args.nodes, args.days, args.speed, args.max_hours = 4, 1 / 12, 8.0, 4.0
        args.services, args.peak, args.period_hours, args.service_hours = 2, 8000.0, 2.0, 6.0
        args.interval = 30.0
    out = run(args)
    print(
        f"{out['pool_gpus']} GPUs, {out['bulk_jobs']} bulk jobs (Philly {args.start}, "
        f"{args.days:g} days at {args.speed:g}x), {out['services']} services "
        f"({args.low:g}-{args.peak:g} req/s, p99 <= {CEILING_MS:g} ms), dedicated partition "
        f"{out['dedicated_gpus']} GPUs, a round every {args.interval:g} s"
    )
    print(
        f"{'setup':<10} {'svc SLA':>8} {'svc GPU-h':>9} {'scales':>6} {'bulk mean JCT':>13} "
        f"{'p99 JCT':>9} {'makespan h':>10} {'util':>6} {'wall s':>6}"
    )
    for name in ("shared", "dedicated"):
        r = out[name]
        assert isinstance(r, dict)
        print(
            f"{name:<10} {r['service_attainment']:>8.2%} {r['service_gpu_hours']:>9.1f} "
            f"{r['service_scales']:>6} {r['bulk_mean_jct']:>13,.0f} {r['bulk_p99_jct']:>9,.0f} "
            f"{r['bulk_makespan_h']:>10.1f} {r['utilisation']:>6.1%} {r['wall_s']:>6.1f}"
        )
    RESULTS.mkdir(exist_ok=True)
    name = args.out or ("mixed-pool" + ("-smoke" if args.smoke else ""))
    path = RESULTS / f"{name}.json"
    commit = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, check=False
    ).stdout.strip()
    meta = {
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "machine": f"{platform.machine()}, {platform.processor() or 'cpu'}, no GPU",
        "commit": commit,
        "args": vars(args),
    }
    path.write_text(json.dumps({"meta": meta, **out}, indent=1))
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
