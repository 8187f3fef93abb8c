"""Benchmark (b): interactive sessions and Philly bulk jobs from many teams on 1,024 GPUs.

    .venv/bin/python bench/scheduler/mixed.py            # the full run (about 4 minutes, 2 cores)
    .venv/bin/python bench/scheduler/mixed.py --smoke    # a small run (the test suite's)
    .venv/bin/python bench/scheduler/mixed.py --tight-deadlines   # deadlines 1.2x run time
    .venv/bin/python bench/scheduler/mixed.py --interval 1   # a round every second (issue 28)

Workload (everything fixed by the arguments and seeds; a re-run gives the same figures):

* **Pool**: 128 nodes x 8 GPUs = 1,024 GPUs; a scheduling round every ``--interval`` s
  (default 60; rounds with no event are skipped), 30 s restart cost per start/resume/resize.
* **Bulk**: every Philly job submitted in ``--days`` days from ``--start`` (default: the 7 days
  from 2017-10-16, the trace's busiest week: 14,185 jobs), arrivals sped up ``--speed`` times
  (default 3: they arrive over 2.3 days and offer about 1,500 GPUs of work, 1.5x the pool, so
  a queue builds up and then drains), team = the job's virtual ``cluster``.
  Durations capped at 7 days, GPUs at 64; each job may run on half to twice its GPUs (elastic
  policies use that; the others run it at its request). Every bulk job checkpoints every
  30 minutes of run time (a preemption loses the work since), and has a deadline of twice its
  run time on the GPUs it asked for plus one hour after submission (``--tight-deadlines``:
  1.2 times its run time after submission).
* **Interactive**: sessions from :mod:`orchestrator.sim.synthetic` (seed 0) over the same span,
  holding ``--interactive-load`` (default 10%) of the pool on average, 1-8 GPUs, teams in
  proportion to their bulk job counts, SLA: start within 60 s.
* **Teams**: :func:`orchestrator.teams.teams_from_usage` on the bulk GPU-time per team: half
  the pool guaranteed in proportion to use, weight = percent of use.
* **Policies**: ``fifo`` (strict submission order, class-blind), ``static-partition`` (the p99 of
  the sessions' concurrent GPU demand reserved for them, bulk FIFO on the rest),
  ``strict-priority`` (interactive preempts bulk, newest first), ``tiresias`` (class-blind
  2-queue LAS), ``pollux`` (the reproduced Pollux: class-blind goodput reallocation),
  ``shared`` (ours, defaults), ``shared-genetic`` (ours with the settings of issue 16: the
  Pollux genetic search for bulk GPUs, LAS levels of 8 GPU-hours, no minimum run time);
  ``shared-before`` (``shared`` with the jobs' deadlines hidden from it: the policy as it was
  before issue 15 made it deadline-aware, measured in the same run; not in the default list),
  and the settings explored for issue 16 in :mod:`variants` (not in the default list).

Churn (issue 28), from the applied decisions: ``back<30s`` counts the starts of a job less than
:data:`QUICK_S` seconds after its preemption (a preemption undone at once), ``b4b`` the bulk
preemptions in rounds that start no interactive job (bulk displaced for bulk alone; a round that
starts one may displace bulk for bulk too, so this is a lower bound).

Prints one table and writes ``bench/scheduler/results/mixed[-tight][-smoke].json`` (or
``--out NAME``: ``NAME.json``).
"""

from __future__ import annotations

import argparse
import json
import math
import platform
import sys
import time
from collections import Counter
from concurrent.futures import ProcessPoolExecutor
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import variants

from orchestrator.sim import SimConfig, Simulator, TraceJob, uniform_pool
from orchestrator.sim.metrics import jain
from orchestrator.sim.models import amdahl
from orchestrator.sim.synthetic import concurrent_gpus, interactive_sessions
from orchestrator.sim.trace import philly_window
from orchestrator.teams import teams_from_usage
from policies import SCHEDULING_POLICIES, Decision, DecisionKind, Snapshot
from policies.scheduling import SchedulingPolicy

RESULTS = Path(__file__).parent / "results"
POLICIES = (
    "fifo",
    "static-partition",
    "strict-priority",
    "tiresias",
    "pollux",
    "shared",
    "shared-genetic",
)
IGNORES_SLA = ("fifo", "tiresias", "pollux")
"""Baselines that do not look at the interactive SLA (the bulk-JCT reference)."""
CHECKPOINT_S = 1800.0
RESTART_S = 30.0
QUICK_S = 30.0
"""A start this soon after the job's preemption is a quick re-placement (``back<30s``)."""


def workload(
    start: str, days: float, speed: float, load: float, pool: int, seed: int, tight: bool = False
) -> tuple[list[TraceJob], list[TraceJob]]:
    """(bulk, interactive) jobs of the benchmark (see the module docstring)."""
    bulk = [
        replace(
            j,
            checkpoint=CHECKPOINT_S,
            deadline=1.2 * j.duration if tight else 2 * j.duration + 3600.0,
        )
        for j in philly_window(start, days, speed)
    ]
    counts = Counter(j.team for j in bulk)
    span = days * 86400.0 / speed
    inter = interactive_sessions(span, load * pool, counts, seed=seed)
    return bulk, inter


def feasible(bulk: list[TraceJob], interval: float, sigma: float) -> set[str]:
    """The bulk jobs whose deadline can be met at all: alone, on their largest allowed size,
    from the first round after their submission, the restart paid (issue 26)."""
    out: set[str] = set()
    for j in bulk:
        if j.deadline is None:
            continue
        hi = j.max_gpus or j.gpus
        start = math.ceil(j.submit_time / interval - 1e-9) * interval if interval > 0 else 0.0
        run = j.duration * amdahl(j.gpus, sigma) / amdahl(hi, sigma)
        if start - j.submit_time + RESTART_S + run <= j.deadline:
            out.add(j.name)
    return out


class DeadlineBlind(SchedulingPolicy):
    """A policy that decides on snapshots with every deadline removed (\"before\" runs)."""

    def __init__(self, inner: SchedulingPolicy) -> None:
        self.inner = inner

    def decide(self, snapshot: Snapshot) -> list[Decision]:
        """The inner policy's decisions, deadlines hidden."""
        blind = replace(
            snapshot,
            queue=tuple(replace(q, deadline=None) if q.deadline else q for q in snapshot.queue),
            running=tuple(replace(r, deadline=None) if r.deadline else r for r in snapshot.running),
        )
        return self.inner.decide(blind)


def make_policy(name: str, reserve: float) -> SchedulingPolicy:
    """The policy under its benchmark name."""
    if name == "shared-before":
        return DeadlineBlind(SCHEDULING_POLICIES.create("shared"))
    if name == "fifo":
        return SCHEDULING_POLICIES.create("gang", queue="fifo")
    if name == "static-partition":
        return SCHEDULING_POLICIES.create(name, interactive_fraction=reserve)
    return variants.create(name)


def run_one(name: str, args: argparse.Namespace) -> dict[str, object]:
    """Simulate the workload under one policy; return its figures."""
    pool = args.nodes * args.gpus_per_node
    bulk, inter = workload(
        args.start, args.days, args.speed, args.interactive_load, pool, 0, args.tight_deadlines
    )
    used: Counter[str] = Counter()
    for j in bulk:
        used[j.team] += j.gpus * j.duration
    teams = teams_from_usage(used, pool).views(pool)
    reserve = math.ceil(concurrent_gpus(inter, 99)) / pool
    t0 = time.perf_counter()
    sim = Simulator(
        bulk + inter,
        make_policy(name, reserve),
        uniform_pool(args.nodes, args.gpus_per_node),
        teams,
        SimConfig(
            interval_s=args.interval, every_round=False, restart_s=RESTART_S, log_decisions=True
        ),
    )
    result = sim.run()
    wall = time.perf_counter() - t0
    can = feasible(bulk, args.interval, sim.config.sigma)
    met_feasible = sum(
        r.name in can and r.completed_at is not None and r.completed_at <= r.deadline
        for r in result.records
        if r.deadline is not None
    )
    quick, bulk_for_bulk = churn(sim.applied, {j.name for j in inter})
    s = result.summary()
    usage = result.usage
    ratios = {
        t: usage.team_held.get(t, 0.0) / e for t, e in sorted(usage.team_entitled.items()) if e
    }
    return {
        "policy": name,
        "bulk_jobs": len(bulk),
        "interactive_jobs": len(inter),
        "pool_gpus": pool,
        "reserved_gpus": round(reserve * pool) if name == "static-partition" else 0,
        "interactive_attainment": s["interactive_attainment"],
        "deadline_attainment": s["deadline_attainment"],
        "feasible_share": len(can) / len(bulk) if bulk else math.nan,
        "deadline_of_feasible": met_feasible / len(can) if can else math.nan,
        "bulk_mean_jct": s["bulk_mean_jct"],
        "bulk_p99_jct": s["bulk_p99_jct"],
        "utilisation": s["utilisation"],
        "busy_utilisation": s["busy_utilisation"],
        "busy_fraction": usage.busy_time / usage.time if usage.time else math.nan,
        "jain": jain(list(ratios.values())),
        "share_vs_entitlement": ratios,
        "preemptions": s["preemptions"],
        "resizes": s["resizes"],
        "preemption_gpu_hours_lost": s["preemption_gpu_hours_lost"],
        "all_gpu_hours_lost": s["gpu_hours_lost"],
        "quick_replacements": quick,
        "bulk_for_bulk_preemptions": bulk_for_bulk,
        "interval_s": args.interval,
        "end_time_h": result.end_time / 3600,
        "rounds": result.rounds,
        "wall_s": wall,
    }


def churn(applied: list[tuple[float, Decision]], interactive: set[str]) -> tuple[int, int]:
    """``(back<30s, b4b)`` of a run's applied decisions (see the module docstring)."""
    preempted: dict[str, float] = {}
    quick = 0
    by_round: dict[float, list[Decision]] = {}
    for t, d in applied:
        by_round.setdefault(t, []).append(d)
        if d.kind is DecisionKind.PREEMPT:
            preempted[d.job_id] = t
        elif d.kind is DecisionKind.START and d.job_id in preempted:
            quick += t - preempted.pop(d.job_id) < QUICK_S
    bulk_for_bulk = 0
    for ds in by_round.values():
        if not any(d.kind is DecisionKind.START and d.job_id in interactive for d in ds):
            bulk_for_bulk += sum(
                d.kind is DecisionKind.PREEMPT and d.job_id not in interactive for d in ds
            )
    return quick, bulk_for_bulk


OURS = ("shared", "shared-genetic")
"""The rows the targets are checked for: ``shared`` and its issue-16 setting."""


def verdict(rows: list[dict[str, object]]) -> list[str]:
    """The targets, checked for each of :data:`OURS` in ``rows``: lines to print."""
    by = {str(r["policy"]): r for r in rows}
    ref = [float(by[p]["bulk_mean_jct"]) for p in IGNORES_SLA if p in by]  # type: ignore[arg-type]
    best = min(ref) if ref else math.nan
    lines = []
    for name in (p for p in OURS if p in by):
        ours = by[name]
        att = float(ours["interactive_attainment"])  # type: ignore[arg-type]
        jct = float(ours["bulk_mean_jct"])  # type: ignore[arg-type]
        busy = float(ours["busy_utilisation"])  # type: ignore[arg-type]
        lines.append(
            f"{name}: interactive attainment {att:.2%} (target >= 99.5%): "
            + ("met" if att >= 0.995 else "MISSED")
        )
        if ref:  # the JCT target is relative to an SLA-blind baseline of the same run
            lines.append(
                f"{name}: bulk mean JCT {jct:.0f} s vs best SLA-blind baseline {best:.0f} s, "
                f"ratio {jct / best:.3f} (target <= 1.10): "
                + ("met" if jct <= 1.1 * best else "MISSED")
            )
        lines.append(
            f"{name}: utilisation while demand >= supply {busy:.1%} (target >= 90%): "
            + ("met" if busy >= 0.9 else "MISSED")
        )
    return lines


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark; print the table; write the results file."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--smoke", action="store_true", help="a small run (for the test suite)")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--start", default="2017-10-16")
    ap.add_argument("--days", type=float, default=7.0)
    ap.add_argument("--speed", type=float, default=3.0)
    ap.add_argument("--interactive-load", type=float, default=0.10)
    ap.add_argument("--nodes", type=int, default=128)
    ap.add_argument("--gpus-per-node", type=int, default=8)
    ap.add_argument("--policies", default=",".join(POLICIES))
    ap.add_argument("--interval", type=float, default=60.0, help="seconds between rounds")
    ap.add_argument(
        "--tight-deadlines",
        action="store_true",
        help="bulk deadlines at 1.2x run time after submission (default: 2x + 1 h)",
    )
    ap.add_argument("--out", default="", help="results file name under results/, no .json")
    args = ap.parse_args(argv)
    if args.smoke:  # 128 GPUs, 6 hours of Philly arrivals in 45 minutes: the same mix, small
        args.nodes, args.days, args.speed = 16, 0.25, 8.0
    names = args.policies.split(",")
    with ProcessPoolExecutor(max_workers=args.workers) as pool:
        rows = list(pool.map(run_one, names, [args] * len(names)))
    first = rows[0]
    print(
        f"{first['pool_gpus']} GPUs, {first['bulk_jobs']} bulk jobs (Philly {args.start}, "
        f"{args.days} days at {args.speed}x), {first['interactive_jobs']} interactive sessions, "
        + ("tight deadlines (1.2x run time)" if args.tight_deadlines else "deadlines 2x + 1 h")
        + f", a round every {args.interval:g} s"
    )
    print(
        f"{'policy':<23} {'inter SLA':>9} {'deadline':>8} {'of feas':>7} {'mean JCT':>9} "
        f"{'p99 JCT':>9} {'util':>6} {'busy util':>9} {'Jain':>5} {'preempt':>7} {'lost GPUh':>9} "
        f"{'back<30s':>8} {'b4b':>5} {'wall s':>6}"
    )
    for r in rows:
        print(
            f"{r['policy']:<23} {r['interactive_attainment']:>9.2%} "
            f"{r['deadline_attainment']:>8.1%} {r['deadline_of_feasible']:>7.1%} "
            f"{r['bulk_mean_jct']:>9.0f} "
            f"{r['bulk_p99_jct']:>9.0f} {r['utilisation']:>6.1%} {r['busy_utilisation']:>9.1%} "
            f"{r['jain']:>5.2f} {r['preemptions']:>7.0f} {r['preemption_gpu_hours_lost']:>9.1f} "
            f"{r['quick_replacements']:>8} {r['bulk_for_bulk_preemptions']:>5} {r['wall_s']:>6.1f}"
        )
    print(f"deadlines that can be met at all (alone, on max GPUs): {first['feasible_share']:.1%}")
    for line in verdict(rows):
        print(line)
    RESULTS.mkdir(exist_ok=True)
    name = args.out or (
        "mixed" + ("-tight" if args.tight_deadlines else "") + ("-smoke" if args.smoke else "")
    )
    out = RESULTS / f"{name}.json"
    meta = {
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "machine": f"{platform.machine()}, {platform.processor() or 'cpu'}, no GPU",
        "python": platform.python_version(),
        "args": {k: v for k, v in vars(args).items() if k != "workers"},
    }
    out.write_text(json.dumps({"meta": meta, "rows": rows}, indent=1))
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
