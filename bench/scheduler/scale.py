"""Benchmark (c): simulator throughput at 100,000 jobs, and decision time vs queue length.

    .venv/bin/python bench/scheduler/scale.py            # the full run
    .venv/bin/python bench/scheduler/scale.py --smoke    # a small run (the test suite's)

Two measurements, on one machine, in one run:

1. **Simulation**: ``--jobs`` (100,000) consecutive Philly jobs (:func:`philly_jobs`, seed 0,
   wrapping around the 82k-job extract; elastic half to twice their GPUs) on 250 nodes x 8
   GPUs = 2,000 GPUs, arrivals sped up ``--speed`` times (default 4: the offered bulk work is
   about 90% of the pool), rounds every 60 s with idle rounds skipped, under each policy in
   ``--sim-policies``; the wall and CPU time of the whole simulation.
2. **Decision time**: for each policy and 100, 1,000 and 10,000 queued jobs, the wall time of
   ``policy.decide`` on a snapshot of the 2,000-GPU pool whose GPUs are all held by running
   Philly jobs (plus the queue: Philly jobs, one in ten an interactive session), ``--reps``
   calls each after one warm-up call: p50 and p99 (nearest rank) of the process's CPU time
   (``time.process_time``), which other load on a shared machine does not inflate; what the
   process held before the snapshot is frozen out of the cyclic collector's reach
   (``gc.freeze``), as the live loop does once started.

``--kinds K`` (issue 40) splits the nodes into ``K`` GPU kinds (``A`` speed 1, ``B`` 2, ``C``
0.5 ...), in blocks of consecutive nodes, for both measurements; one job in three has its own
measured speed on each kind (random, around the kind's), the rest the kinds' own: every gang
then takes one kind, chosen per job (``policies.eligibility``).

Prints the tables, writes ``bench/scheduler/results/scale[-smoke].json`` (or ``--out NAME``:
``NAME.json``) and, when matplotlib is installed, ``scale-decision.png`` (``NAME-decision.png``;
decision time vs queue length, log-log) beside it.
"""

from __future__ import annotations

import argparse
import gc
import json
import platform
import random
import sys
import time
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import variants

from orchestrator.sim import SimConfig, Simulator, philly_jobs, uniform_pool
from orchestrator.sim.metrics import percentile
from orchestrator.sim.models import amdahl
from policies import SCHEDULING_POLICIES, NodeView, QueuedJob, RunningJob, Snapshot
from policies.scheduling import SchedulingPolicy
from policies.snapshot import TeamView

RESULTS = Path(__file__).parent / "results"
POLICIES = ("fifo", "static-partition", "strict-priority", "tiresias", "pollux", "shared")


def make_policy(name: str) -> SchedulingPolicy:
    """The policy under its benchmark name (``fifo`` is ``gang`` with a plain FIFO queue)."""
    if name == "fifo":
        return SCHEDULING_POLICIES.create("gang", queue="fifo")
    return variants.create(name)  # a registered policy, or a variant of one


KIND_SPEEDS = (1.0, 2.0, 0.5, 1.5, 0.75)


def node_kinds(nodes: int, kinds: int) -> dict[str, tuple[str, float]]:
    """Node ``n{i}``'s kind and speed: ``kinds`` blocks of consecutive nodes (none: one kind)."""
    if kinds <= 1:
        return {}
    return {
        f"n{i}": (chr(ord("A") + i * kinds // nodes), KIND_SPEEDS[i * kinds // nodes])
        for i in range(nodes)
    }


def own_speeds(rng: random.Random, kinds: int) -> tuple[tuple[str, float], ...]:
    """One job in three: its own speed on each kind (0.5 to 1.5 times the kind's); else none."""
    if kinds <= 1 or rng.random() >= 1 / 3:
        return ()
    return tuple((chr(ord("A") + k), KIND_SPEEDS[k] * rng.uniform(0.5, 1.5)) for k in range(kinds))


def simulate(
    name: str, jobs: int, nodes: int, speed: float, deadlines: bool = False, kinds: int = 1
) -> dict[str, float | str]:
    """Simulate ``jobs`` Philly jobs under one policy; return wall time and counters
    (``deadlines``: each due 1.2 times its run time after submission, issue 26; ``kinds``:
    GPU kinds, see the module doc)."""
    trace = philly_jobs(jobs, seed=0)
    if kinds > 1:
        rng = random.Random(1)
        trace = [
            replace(j, kind_speed=" ".join(f"{k}:{v:.3f}" for k, v in own_speeds(rng, kinds)))
            for j in trace
        ]
    if speed != 1.0 or deadlines:
        trace = [
            replace(
                j,
                submit_time=j.submit_time / speed,
                deadline=1.2 * j.duration if deadlines else j.deadline,
            )
            for j in trace
        ]
    t0, c0 = time.perf_counter(), time.process_time()
    sim = Simulator(
        trace,
        make_policy(name),
        uniform_pool(nodes, 8),
        config=SimConfig(every_round=False),
        kinds=node_kinds(nodes, kinds),
    )
    result = sim.run()
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    s = result.summary()
    return {
        "policy": name,
        "jobs": jobs,
        "gpus": nodes * 8,
        "wall_s": wall,
        "cpu_s": cpu,
        "rounds": result.rounds,
        "simulated_days": result.end_time / 86400,
        "bulk_mean_jct": s["bulk_mean_jct"],
        "utilisation": s["utilisation"],
        "kinds": kinds,
    }


def decision_snapshot(
    queued: int, nodes: int, seed: int = 0, deadlines: bool = False, kinds: int = 1
) -> Snapshot:
    """A full pool of running Philly jobs plus ``queued`` waiting ones (1 in 10 interactive);
    ``deadlines``: every bulk job has its remaining work and a deadline of 1.2 times it from
    now (issue 26: the deadline class in every decision)."""
    rng = random.Random(seed)
    trace = philly_jobs(queued + 4 * nodes * 8, seed=seed)
    teams = sorted({j.team for j in trace})
    free = {f"n{i}": 8 for i in range(nodes)}
    order = list(free)
    running: list[RunningJob] = []
    it = iter(trace)
    seq = 0
    for job in it:
        if sum(free.values()) == 0:
            break
        gpus = min(job.gpus, sum(free.values()))
        held: list[str] = []
        for n in order:
            take = min(free[n], gpus - len(held))
            held += [n] * take
            free[n] -= take
            if len(held) == gpus:
                break
        running.append(
            RunningJob(
                job.name,
                "bulk",
                job.team,
                tuple(held),
                seq=seq,
                started_at=-rng.uniform(0, 7200),
                min_gpus=max(1, gpus // 2),
                max_gpus=min(64, 2 * gpus),
                attained_service=rng.uniform(0, 5e4),
                speedup=tuple(amdahl(n, 0.05) for n in range(1, min(64, 2 * gpus) + 1)),
                deadline=1.2 * job.duration if deadlines else None,
                remaining_work=job.duration if deadlines else None,
                checkpoint_at=-rng.uniform(0, 1800),
                kind_speed=own_speeds(rng, kinds),
            )
        )
        seq += 1
    queue: list[QueuedJob] = []
    for job in it:
        if len(queue) == queued:
            break
        inter = rng.random() < 0.1
        gpus = rng.choice((1, 1, 2, 4, 8)) if inter else job.gpus
        queue.append(
            QueuedJob(
                job.name,
                "interactive" if inter else "bulk",
                job.team,
                gpus,
                seq,
                -rng.uniform(0, 50) if inter else -rng.uniform(0, 7200),
                min_gpus=gpus if inter else job.lo,
                max_gpus=gpus if inter else job.hi,
                attained_service=0.0 if inter else rng.choice((0.0, 0.0, 1e4)),
                speedup=() if inter else tuple(amdahl(n, 0.05) for n in range(1, job.hi + 1)),
                deadline=1.2 * job.duration if deadlines and not inter else None,
                remaining_work=job.duration if deadlines and not inter else None,
                kind_speed=own_speeds(rng, kinds),
            )
        )
        seq += 1
    share = nodes * 8 // (2 * len(teams))
    views = tuple(TeamView(t, 1.0, share) for t in teams)
    of = node_kinds(nodes, kinds)
    return Snapshot(
        tuple(NodeView(n, 8, free[n], None, *of.get(n, ("", 1.0))) for n in order),
        tuple(queue),
        tuple(running),
        now=0.0,
        teams=views,
    )


def decision_times(
    name: str, queued: int, nodes: int, reps: int, deadlines: bool = False, kinds: int = 1
) -> dict[str, float | str]:
    """p50/p99 CPU time of one ``decide`` call at ``queued`` waiting jobs.

    As in the live loop (``ControlLoop.start`` calls ``gc.freeze()`` once started), what the
    process holds before the round (modules, the benchmark's earlier state) is out of the
    cyclic collector's reach; the round's snapshot is not. Without it, a full collection
    falling in a call (over the whole process) made p99 about 2.5 times p50.
    """
    gc.collect()
    gc.freeze()
    try:
        snap = decision_snapshot(queued, nodes, deadlines=deadlines, kinds=kinds)
        policy = make_policy(name)
        policy.decide(snap)  # warm-up (caches, imports)
        times = []
        for _ in range(reps):  # CPU time of this process: robust to other load on the machine
            # a fresh snapshot each call, as each live round has: nothing a call worked out
            # about the pool (its kinds, capacities) is kept for the next; what the process
            # keeps across rounds live, it keeps here too (the jobs' kind order: an LRU)
            fresh = replace(snap)
            t0 = time.process_time()
            policy.decide(fresh)
            times.append(time.process_time() - t0)
    finally:
        gc.unfreeze()
    return {
        "policy": name,
        "queued": queued,
        "running": len(snap.running),
        "reps": reps,
        "p50_ms": 1e3 * percentile(times, 50),
        "p99_ms": 1e3 * percentile(times, 99),
        "kinds": kinds,
    }


def plot(rows: list[dict[str, float | str]], path: Path) -> bool:
    """Decision time vs queue length, log-log, one line per policy; False without matplotlib."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    fig, ax = plt.subplots(figsize=(6.4, 4.2))
    for name in dict.fromkeys(str(r["policy"]) for r in rows):
        mine = [r for r in rows if r["policy"] == name]
        xs = [float(r["queued"]) for r in mine]
        ax.plot(xs, [float(r["p50_ms"]) for r in mine], marker="o", label=f"{name} p50")
        ax.plot(xs, [float(r["p99_ms"]) for r in mine], ls=":", color=ax.lines[-1].get_color())
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("queued jobs")
    ax.set_ylabel("decision time per round (ms); dotted: p99")
    ax.set_title("Scheduling round on 2,000 busy GPUs")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return True


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark; print the tables; write the results file and plot."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--smoke", action="store_true", help="a small run (for the test suite)")
    ap.add_argument("--jobs", type=int, default=100_000)
    ap.add_argument("--nodes", type=int, default=250)
    ap.add_argument("--speed", type=float, default=4.0)
    ap.add_argument("--sim-policies", default="fifo,shared")
    ap.add_argument("--policies", default=",".join(POLICIES))
    ap.add_argument("--queues", default="100,1000,10000")
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument(
        "--deadlines",
        action="store_true",
        help="every bulk job due 1.2x its run time after submission (issue 26)",
    )
    ap.add_argument("--kinds", type=int, default=1, help="GPU kinds in the pool (issue 40)")
    ap.add_argument("--out", default="", help="results file name under results/, no .json")
    args = ap.parse_args(argv)
    if args.smoke:
        args.jobs, args.nodes, args.queues, args.reps = 1000, 25, "10,100", 3
    sims = [
        simulate(p, args.jobs, args.nodes, args.speed, args.deadlines, args.kinds)
        for p in args.sim_policies.split(",")
        if p
    ]
    print(
        f"{'policy':<17} {'jobs':>7} {'GPUs':>5} {'rounds':>7} {'sim days':>8} {'wall s':>7} "
        f"{'CPU s':>7}"
    )
    for r in sims:
        print(
            f"{r['policy']:<17} {r['jobs']:>7} {r['gpus']:>5} {r['rounds']:>7} "
            f"{r['simulated_days']:>8.1f} {r['wall_s']:>7.1f} {r['cpu_s']:>7.1f}"
        )
    queues = [int(q) for q in args.queues.split(",")]
    print(f"\n{'policy':<17} {'queued':>7} {'running':>7} {'p50 ms':>8} {'p99 ms':>8}")
    rows = []
    for p in args.policies.split(","):
        for q in queues:
            r = decision_times(p, q, args.nodes, args.reps, args.deadlines, args.kinds)
            rows.append(r)
            print(
                f"{r['policy']:<17} {r['queued']:>7} {r['running']:>7} {r['p50_ms']:>8.2f} "
                f"{r['p99_ms']:>8.2f}",
                flush=True,
            )
    RESULTS.mkdir(exist_ok=True)
    stem = args.out or ("scale-smoke" if args.smoke else "scale")
    png = RESULTS / f"{stem}-decision.png"
    print(f"wrote {png}" if plot(rows, png) else "matplotlib not installed: no plot")
    meta = {
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "machine": f"{platform.machine()}, {platform.processor() or 'cpu'}, no GPU",
        "python": platform.python_version(),
        "args": vars(args),
    }
    out = RESULTS / f"{stem}.json"
    out.write_text(json.dumps({"meta": meta, "simulation": sims, "decision": rows}, indent=1))
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
