"""The project's simulator on Sia's heterogeneous cluster and workloads (issue 40, item 4):
the artifact's Sia and Gavel reproduced, and the project's policies beside them.

    .venv/bin/python bench/scheduler/sia/ours.py --artifact /tmp/sia   # all 18: sia, gavel, shared
    .venv/bin/python bench/scheduler/sia/ours.py --traces philly --workloads 1 --policies gavel

The jobs run the artifact's own job model, per GPU kind, in the project's engine
(:mod:`orchestrator.sim.kind_models`: the per-kind profiles of ``traces/<app>/``, the training
curves, the calibration slowdowns and checkpoint-restore times), on the cluster's real node
shapes (T4 6 x 4, A100 2 x 8, RTX 3 x 8, under the artifact's kind names ``aws``, ``dgx-ext``,
``rtx``):

* ``gavel``: each job rigid at its row's GPU count and batch
  (:class:`~orchestrator.sim.kind_models.FixedBatchKindModel`), under :mod:`gavel` (the
  artifact's Gavel, 360 s rounds);
* ``sia``: each job adaptive, its batch its own fitted model's choice
  (:class:`~orchestrator.sim.kind_models.AdaptiveKindModel`), under :mod:`sia_policy` (the
  artifact's Sia, 60 s rounds);
* any other name (``shared``, the default, or a registered policy or a :mod:`variants` name):
  the same adaptive jobs, 1 GPU to what the largest batch can use, under that policy as it
  runs live (60 s rounds, decisions applied one after another). Each job shows the policy
  what Sia's bootstrap knows: its fitted goodput curve on the first kind it has run on
  (``speedup``) and its application's one-GPU throughput per kind over that on T4
  (``kind_speed``).

Gavel and Sia run with the simulator's ``atomic_moves`` (the artifact moves GPU ids at once).
Metrics as the artifact's ``print_run_stats.py`` (and ``artifact.py``): mean JCT, p99 JCT
``sorted(jcts)[int(0.99 n)]``, makespan (first submission to last completion); per trace, JCTs
pooled over the workloads and makespans averaged. Writes ``results/<--out>.json``.
"""

from __future__ import annotations

import os

# one BLAS thread: the throughput-model fits are small, and OpenBLAS's threads make each one
# several times slower on a few cores (README.md, "Speed"); set before numpy loads
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
os.environ.setdefault("OMP_NUM_THREADS", "1")

import argparse
import json
import math
import platform
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import variants
import workload as sia
from gavel import GavelPolicy
from sia_policy import SiaPolicy

from orchestrator.sim import SimConfig, Simulator, TraceJob
from orchestrator.sim.kind_models import AdaptiveKindModel, FixedBatchKindModel, load_kind_apps
from orchestrator.sim.models import JobModel
from policies.scheduling.base import SchedulingPolicy

HERE = Path(__file__).resolve().parent
RESULTS = HERE / "results"
UNIT = "aws"
"""The unit kind of ``kind_speed`` (1.0): T4."""
TRACES = {"philly": 8, "saturn": 10}
POLICIES = ("sia", "gavel", "shared")
SIA_ROUND_S = 60.0
"""Sia's round (``run_experiment.sh``: ``--interval=60``)."""
GAVEL_ROUND_S = 360.0
"""Gavel's round in Sia's runs (``run_experiment.sh``: ``--interval=360``)."""


def build_rigid(
    jobs: list[sia.SiaJob], cluster: sia.Cluster, sim_dir: Path
) -> tuple[
    list[TraceJob], list[tuple[str, int]], dict[str, tuple[str, float]], dict[str, JobModel]
]:
    """Gavel's view of one Sia workload (``--policies gavel``): each job rigid at its row's
    GPU count and batch, run by :class:`~orchestrator.sim.kind_models.FixedBatchKindModel` on
    the artifact's per-kind profiles; the cluster's real node shapes (T4 6 x 4, A100 2 x 8,
    RTX 3 x 8) under the artifact's kind names, whose order Gavel's bookkeeping follows. A
    job's ``kind_speed`` and speedup give Gavel its steps per second on each kind."""
    shapes = tuple((k, cluster.gpus_per_node[k]) for k in cluster.nodes)
    size = {k: cluster.gpus_per_node[k] * n for k, n in cluster.nodes.items()}
    slowdowns = sia.read_slowdowns(sim_dir)
    nodes = [
        (f"{k}-{i}", cluster.gpus_per_node[k]) for k, n in cluster.nodes.items() for i in range(n)
    ]
    kinds = {node: (node.rsplit("-", 1)[0], 1.0) for node, _ in nodes}
    trace, models = [], {}
    for j in jobs:
        apps = load_kind_apps(str(sim_dir / "traces"), j.application, shapes)
        model = FixedBatchKindModel(
            apps, j.batch_size, slowdowns[j.application], sia.RESCALE_S[j.application]
        )
        unit = model.iteration_rate(shapes[0][0], j.num_replicas)
        speeds = {
            k: model.iteration_rate(k, j.num_replicas) / unit
            for k, _ in shapes
            if size[k] >= j.num_replicas
        }
        models[j.name] = model
        trace.append(
            TraceJob(
                name=j.name,
                submit_time=j.submit_s,
                team="sia",
                gpus=j.num_replicas,
                app=j.application,
                batch_size=j.batch_size,
                kind_speed=" ".join(f"{k}:{s!r}" for k, s in speeds.items()),
            )
        )
    return sorted(trace, key=lambda t: t.submit_time), nodes, kinds, models


def build_adaptive(
    jobs: list[sia.SiaJob], cluster: sia.Cluster, sim_dir: Path, apps: dict[str, sia.Application]
) -> tuple[
    list[TraceJob],
    list[tuple[str, int]],
    dict[str, tuple[str, float]],
    dict[str, JobModel],
    SiaPolicy,
]:
    """The adaptive jobs of one workload (Sia's, and the project's policies'): each from 1 GPU
    to what its largest batch can use (at most 64), run by
    :class:`~orchestrator.sim.kind_models.AdaptiveKindModel` on the artifact's per-kind
    profiles, ``kind_speed`` its application's one-GPU throughput per kind over T4's; the
    cluster's real node shapes (a kind's own ``speed``, which no job here falls back on, the
    geometric mean over the applications); and the Sia policy reading those models."""
    shapes = tuple((k, cluster.gpus_per_node[k]) for k in cluster.nodes)
    slowdowns = sia.read_slowdowns(sim_dir)
    one_gpu = {
        name: {k: prof.one_gpu_throughput for k, prof in app.profiles.items()}
        for name, app in apps.items()
    }
    ratio = {name: {k: v / by[UNIT] for k, v in by.items()} for name, by in one_gpu.items()}
    nodes = [
        (f"{k}-{i}", cluster.gpus_per_node[k]) for k, n in cluster.nodes.items() for i in range(n)
    ]
    mean = {
        k: math.exp(sum(math.log(r[k]) for r in ratio.values()) / len(ratio)) for k in cluster.nodes
    }
    kinds = {node: (node.rsplit("-", 1)[0], mean[node.rsplit("-", 1)[0]]) for node, _ in nodes}
    trace, models = [], {}
    for j in jobs:
        kind_apps = load_kind_apps(str(sim_dir / "traces"), j.application, shapes)
        models[j.name] = AdaptiveKindModel(
            kind_apps, j.batch_size, slowdowns[j.application], sia.RESCALE_S[j.application]
        )
        hi = min(
            64,
            max(a.profile.max_batch_size // a.profile.min_local_bsz for a in kind_apps.values()),
        )
        trace.append(
            TraceJob(
                name=j.name,
                submit_time=j.submit_s,
                team="sia",
                gpus=1,
                min_gpus=1,
                max_gpus=hi,
                app=j.application,
                batch_size=j.batch_size,
                kind_speed=" ".join(f"{k}:{v!r}" for k, v in ratio[j.application].items()),
            )
        )
    policy = SiaPolicy(
        models,
        tuple((k, n, cluster.gpus_per_node[k]) for k, n in cluster.nodes.items()),
        one_gpu,
    )
    ordered = sorted(trace, key=lambda t: t.submit_time)
    return ordered, nodes, kinds, dict(models), policy


def run_one(artifact: str, trace: str, n: int, policy: str) -> dict[str, Any]:
    """Simulate one workload under one policy; its JCTs, mean, p99 and makespan (s)."""
    sim_dir = Path(artifact) / "sia-simulator"
    jobs, cluster, apps = sia.read_trace(
        sim_dir, sim_dir / "workloads" / trace / f"workload-{n}.csv"
    )
    t0 = time.perf_counter()
    if policy == "gavel":
        trace_jobs, nodes, kinds, models = build_rigid(jobs, cluster, sim_dir)
        gavel = GavelPolicy(interval_s=GAVEL_ROUND_S)
        config = SimConfig(interval_s=GAVEL_ROUND_S, atomic_moves=True)
        sim = Simulator(trace_jobs, gavel, nodes, config=config, kinds=kinds, models=models)
    else:
        trace_jobs, nodes, kinds, models, sia_policy = build_adaptive(jobs, cluster, sim_dir, apps)
        if policy == "sia":
            config = SimConfig(interval_s=SIA_ROUND_S, atomic_moves=True)
            chosen: SchedulingPolicy = sia_policy
        else:
            config = SimConfig(interval_s=SIA_ROUND_S)
            chosen = variants.create(policy)
        sim = Simulator(trace_jobs, chosen, nodes, config=config, kinds=kinds, models=models)
    result = sim.run()
    wall = time.perf_counter() - t0
    done = [r for r in result.records if r.completed_at is not None]
    jcts = sorted(r.completed_at - r.submit_time for r in done)  # type: ignore[operator]
    return {
        "trace": trace,
        "policy": policy,
        "workload": n,
        "jobs": len(trace_jobs),
        "completed": len(done),
        "mean_jct_s": sum(jcts) / len(jcts),
        "p99_jct_s": jcts[int(0.99 * len(jcts))],
        "makespan_s": max(r.completed_at for r in done)  # type: ignore[type-var]
        - min(r.submit_time for r in result.records),
        "preemptions": sum(r.preemptions for r in result.records),
        # placements the kind's profile could not time, timed as packed (KindApp.timed)
        "unmeasured": sum(getattr(m, "unmeasured", 0) for m in models.values()),
        "resizes": sum(r.resizes for r in result.records),
        "wall_s": round(wall, 1),
        "jcts_s": jcts,
    }


def pooled(rows: list[dict[str, Any]]) -> tuple[float, float, float]:
    """Mean and p99 of the pooled JCTs, and the mean makespan, in hours."""
    jcts = sorted(j for r in rows for j in r["jcts_s"])
    span = sum(r["makespan_s"] for r in rows) / len(rows)
    return sum(jcts) / len(jcts) / 3600, jcts[int(0.99 * len(jcts))] / 3600, span / 3600


def print_tables(rows: list[dict[str, Any]], reference: list[dict[str, Any]]) -> None:
    """Per workload, then per trace: ours and the artifact's runs, in hours; then, for each
    policy both ran, ours over the artifact's per workload (the reproduction gate)."""
    ref = {(r["trace"], r["policy"], r["workload"]): r for r in reference if r["rc"] == 0}
    mine = {(r["trace"], r["policy"], r["workload"]): r for r in rows}
    ours_p = list(dict.fromkeys(r["policy"] for r in rows))
    cols = [("ours", p, mine) for p in ours_p] + [("artifact", p, ref) for p in ("sia", "gavel")]
    head = " | ".join(f"{w} {p} mean / p99 / span" for w, p, _ in cols)
    print(f"| trace | wl | {head} |")
    print("| --- | --- |" + " --- |" * len(cols))
    keys = sorted({(r["trace"], r["workload"]) for r in rows})
    for trace, n in keys:
        cells = []
        for _, p, src in cols:
            r = src.get((trace, p, n))
            cells.append(
                f"{r['mean_jct_s'] / 3600:.2f} / {r['p99_jct_s'] / 3600:.1f} / "
                f"{r['makespan_s'] / 3600:.1f}"
                if r
                else "-"
            )
        print(f"| {trace} | {n} | " + " | ".join(cells) + " |")
    print()
    print("| trace | policy | workloads | mean JCT (h) | p99 JCT (h) | makespan (h) |")
    print("| --- | --- | --- | --- | --- | --- |")
    for trace in sorted({t for t, _ in keys}):
        wls = sorted(n for t, n in keys if t == trace)
        for who, p, src in cols:
            got = [r for r in (src.get((trace, p, n)) for n in wls) if r]
            if got:
                m, p99, span = pooled(got)
                print(f"| {trace} | {who} {p} | {len(got)} | {m:.2f} | {p99:.1f} | {span:.1f} |")
    both = [p for p in ours_p if any((t, p, n) in ref for t, n in keys)]
    for p in both:
        print(f"\nours {p} over the artifact's {p}, per workload (mean JCT, p99 JCT, makespan):")
        print("| trace | wl | mean | p99 | makespan |")
        print("| --- | --- | --- | --- | --- |")
        for trace, n in keys:
            a, b = mine.get((trace, p, n)), ref.get((trace, p, n))
            if a and b:
                ratios = [a[f] / b[f] for f in ("mean_jct_s", "p99_jct_s", "makespan_s")]
                print(f"| {trace} | {n} | " + " | ".join(f"{x:.3f}" for x in ratios) + " |")


def main(argv: list[str] | None = None) -> int:
    """Run the workloads; print the tables; write ``results/ours.json``."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--artifact", default="/tmp/sia", help="a checkout of siasosp23/artifacts")
    ap.add_argument("--traces", nargs="+", default=list(TRACES), choices=list(TRACES))
    ap.add_argument("--workloads", default="", help="comma-separated numbers (default: all)")
    ap.add_argument("--policies", default=",".join(POLICIES), help="comma-separated names")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--out", default="ours", help="results file name under results/, no .json")
    args = ap.parse_args(argv)
    tasks = [
        (args.artifact, t, n, p)
        for t in args.traces
        for n in (
            [int(x) for x in args.workloads.split(",")]
            if args.workloads
            else range(1, TRACES[t] + 1)
        )
        for p in args.policies.split(",")
    ]
    t0 = time.perf_counter()
    with ProcessPoolExecutor(max_workers=args.workers) as pool:
        rows = list(pool.map(run_one, *zip(*tasks, strict=True)))
    total = time.perf_counter() - t0
    for r in rows:
        print(
            f"{r['trace']:<7} wl {r['workload']:>2} {r['policy']:<7} {r['completed']}/{r['jobs']}"
            f" done, {r['wall_s']:.1f} s"
        )
    reference = json.loads((RESULTS / "artifact-runs.json").read_text())
    print_tables(rows, reference)
    print(f"\n{len(rows)} runs in {total:.0f} s with {args.workers} workers")
    meta = {
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "machine": f"{platform.machine()}, {platform.processor() or 'cpu'}, no GPU",
        "python": platform.python_version(),
        "wall_s": round(total, 1),
    }
    RESULTS.mkdir(exist_ok=True)
    out = RESULTS / f"{args.out}.json"
    out.write_text(json.dumps({"meta": meta, "rows": rows}, indent=1))
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
