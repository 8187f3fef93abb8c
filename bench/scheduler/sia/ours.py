"""The project's simulator on Sia's heterogeneous cluster and workloads (issue 40), beside the
artifact's own Sia and Gavel runs.

    .venv/bin/python bench/scheduler/sia/ours.py --artifact /tmp/sia           # all 18 workloads
    .venv/bin/python bench/scheduler/sia/ours.py --artifact /tmp/sia --traces philly --workloads 1

A first approximation, not a reproduction of Sia (the project has no Sia or Gavel policy):

* each job of a Sia workload (``workloads/{philly,saturn}/workload-N.csv``) becomes a
  :class:`~orchestrator.sim.TraceJob` as the Pollux runs make them adaptive
  (:func:`~orchestrator.sim.pollux_workload`): ``app`` its application (every Sia application,
  cifar10, deepspeech2, bert, yolov3, imagenet, has a Pollux profile, so no job uses
  ``duration``), elastic from 1 GPU to what its largest batch can use, the batch adapted (0);
  the workload's tuned ``num_replicas`` and ``batch_size`` (Gavel's TunedJobs) are not used;
* the cluster is Sia's (``simulator_config.py``: T4 6 x 4, A100 2 x 8, RTX 3 x 8), each node
  with its kind, each 8-GPU node shown as two 4-GPU nodes (16 nodes of 4, the shape of Pollux's
  testbed, as Sia's own heterogeneity-unaware runs show it): the Pollux profiles hold 4-GPU
  nodes only, and :class:`~orchestrator.sim.profiles.ProfileJobModel` refuses a placement
  outside them (``cifar10: no measurement near 3 nodes, 16 GPUs``); the unit is T4 (speed
  1.0): Pollux's profiles are T4 measurements (its
  ``placements.csv`` equals Sia's ``placements-aws.csv``, byte for byte, for all five
  applications);
* each job's ``kind_speed`` is its application's 1-GPU throughput on the kind over that on T4,
  the ratio Sia bootstraps unseen kinds with (:attr:`workload.KindProfile.one_gpu_throughput`);
  a node kind's own ``speed`` (the fallback no job here uses) is the geometric mean of those
  ratios over the five applications.

So a job's speedup curve on every kind is its T4 curve scaled by one factor, whereas Sia's
ground truth has a measured curve per kind (A100's NVLink scales differently from T4's PCIe);
and the batch limits per kind (RTX's 11 GB) are not modelled. Policies: ``shared`` (the default:
each gang on the one kind where the job is fastest) and ``pollux`` (the registered reproduction
of Pollux, heterogeneity-unaware: it may span kinds, and then steps at the slowest kind held;
it sees the true speedup, not the fitted view ``bench/scheduler/pollux.py`` gives it). Settings
as the Pollux runs: :class:`~orchestrator.sim.SimConfig` defaults (60 s rounds, 30 s restart).

Metrics as the artifact's ``print_run_stats.py`` (and ``artifact.py``): mean JCT, p99 JCT
``sorted(jcts)[int(0.99 n)]``, makespan (first submission to last completion); per trace, JCTs
pooled over the workloads and makespans averaged. Writes ``results/ours.json``.
"""

from __future__ import annotations

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

from orchestrator.sim import SimConfig, Simulator, TraceJob
from orchestrator.sim.kind_models import FixedBatchKindModel, load_kind_apps
from orchestrator.sim.models import JobModel
from orchestrator.sim.profiles import load_app

HERE = Path(__file__).resolve().parent
RESULTS = HERE / "results"
UNIT = "aws"
"""The unit kind (speed 1.0): T4, on which Pollux's profiles were measured."""
NAMES = {"aws": "T4", "dgx-ext": "A100", "rtx": "RTX"}
TRACES = {"philly": 8, "saturn": 10}
POLICIES = ("shared", "pollux")
GAVEL_ROUND_S = 360.0
"""Gavel's round in Sia's runs (``run_experiment.sh``: ``--interval=360``)."""
NODE_GPUS = 4
"""GPUs per (virtual) node: Pollux's profiles were measured on 4-GPU nodes."""


def kind_speeds(apps: dict[str, sia.Application]) -> dict[str, dict[str, float]]:
    """Per application, per kind (project name), its 1-GPU throughput over that on T4."""
    return {
        name: {
            NAMES[k]: p.one_gpu_throughput / app.profiles[UNIT].one_gpu_throughput
            for k, p in app.profiles.items()
        }
        for name, app in apps.items()
    }


def build(
    jobs: list[sia.SiaJob], cluster: sia.Cluster, apps: dict[str, sia.Application]
) -> tuple[list[TraceJob], list[tuple[str, int]], dict[str, tuple[str, float]]]:
    """The project's trace, nodes and node kinds for one Sia workload."""
    speeds = kind_speeds(apps)
    nodes: list[tuple[str, int]] = []
    kinds: dict[str, tuple[str, float]] = {}
    for k, count in cluster.nodes.items():
        name = NAMES[k]
        mean = math.exp(sum(math.log(s[name]) for s in speeds.values()) / len(speeds))
        halves = cluster.gpus_per_node[k] // NODE_GPUS
        for i in range(count * halves):
            node = f"{name.lower()}-{i // halves}" + (f"{'ab'[i % halves]}" if halves > 1 else "")
            nodes.append((node, NODE_GPUS))
            kinds[node] = (name, mean)
    trace = []
    for j in jobs:
        profile = load_app(j.application)
        hi = min(64, profile.max_batch_size // profile.min_local_bsz)
        trace.append(
            TraceJob(
                name=j.name,
                submit_time=j.submit_s,
                team="sia",
                gpus=1,
                min_gpus=1,
                max_gpus=hi,
                app=j.application,
                batch_size=0,
                kind_speed=" ".join(f"{k}:{s:.4f}" for k, s in speeds[j.application].items()),
            )
        )
    return sorted(trace, key=lambda t: t.submit_time), nodes, kinds


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
        result = sim.run()
    else:
        trace_jobs, nodes, kinds = build(jobs, cluster, apps)
        result = Simulator(trace_jobs, variants.create(policy), nodes, kinds=kinds).run()
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
