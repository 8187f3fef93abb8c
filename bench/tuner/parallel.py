"""Parallel tuning benchmark: wall-time speedup with k trials at once, at the same quality.

The tables and SLAs of ``bench.tuner.run``; each (table, SLA) is tuned with ``free_gpus`` k =
1, 2, 4, 8 through the same ``Tuner`` loop (same budget and stop rule). Trials are table lookups
with recorded trial times, so a batch's wall time is its longest trial and a run's wall time
is the sum over its batches (``TuneResult.wall_s``); at k = 1 that is the sequential profiling
time. The CPU-grid configs are one-GPU trials, so k counts GPUs; the Pollux configs span 1-64
GPUs of the cluster they were measured on, so there k counts trials at once (k gangs).

Quality is judged as in ``bench.tuner.run``: the regret of the chosen config against the
table's exhaustive optimum, and whether k chose the same config as k = 1.

    .venv/bin/python -m bench.tuner.parallel            # sla + tpe (5 seeds) -> results/
    .venv/bin/python -m bench.tuner.parallel --smoke    # one table, 2 SLAs, sla only
"""

from __future__ import annotations

import argparse
import datetime
import json
import multiprocessing
import platform
import statistics
import sys
from collections import defaultdict
from pathlib import Path
from typing import Any

from bench.tuner.run import PATIENCE, load_tables, optimum, slas
from bench.tuner.tables import Table
from orchestrator.tuner.history import History, TrialRecord
from orchestrator.tuner.strategies import STRATEGIES
from orchestrator.tuner.tuner import Tuner

RESULTS = Path(__file__).parent / "results"
KS = (1, 2, 4, 8)
WITHIN = 0.03  # "within 3 % of the optimum", as the tuner benchmark's target

_TABLES: dict[str, Table] = {}


def run_one(task: tuple[str, int, str, int, int, bool]) -> dict[str, Any]:
    """One tuning run at ``k`` trials at once; returns its metrics."""
    table_name, sla_idx, strategy, seed, k, smoke = task
    if not _TABLES:
        _TABLES.update({t.name: t for t in load_tables(smoke)})
    table = _TABLES[table_name]
    label, goal = slas(table, smoke)[sla_idx]
    opt = optimum(table, goal)
    reached: list[float] = []  # wall seconds when the best first came within WITHIN

    tuner: Tuner

    def on_trial(rec: TrialRecord, h: History) -> None:
        best = h.best
        if reached or opt is None or best is None:
            return
        if goal.gap(best.verdict.value, opt) <= WITHIN + 1e-12:
            reached.append(tuner.wall_s)

    tuner = Tuner(
        table.space,
        goal,
        table.evaluator(),
        STRATEGIES.create(strategy, seed=seed),
        max_trials=2 * table.space.size,
        patience=PATIENCE,
        prune=strategy == "sla",
        on_trial=on_trial,
        free_gpus=k,
        # Pollux configs use up to 64 GPUs of the cluster they were measured on: k trials.
        trial_gpus=(lambda c: 1) if table.name.startswith("pollux") else None,
    )
    result = tuner.run()
    final = result.best.verdict.value if result.best else None
    return {
        "table": table_name,
        "sla": label,
        "strategy": strategy,
        "seed": seed,
        "k": k,
        "feasible": opt is not None,
        "verdict_infeasible": result.status == "sla-infeasible",
        "chosen": result.chosen.config.describe() if result.chosen else None,
        "trials": result.trials,
        "cost_s": result.cost_s,
        "wall_s": result.wall_s,
        "wall_to_3": reached[0] if reached else None,
        "regret": goal.gap(final, opt) if (opt is not None and final is not None) else None,
    }


def _med(xs: list[float]) -> str:
    if not xs:
        return "-"
    return f"{statistics.median(xs):.2f}x ({min(xs):.2f}-{max(xs):.2f})"


def summarise(rows: list[dict[str, Any]]) -> str:
    """One markdown line per (strategy, k): speedups against k = 1 of the same run."""
    base = {(r["table"], r["sla"], r["strategy"], r["seed"]): r for r in rows if r["k"] == 1}
    groups: dict[tuple[str, int], list[dict[str, Any]]] = defaultdict(list)
    for r in rows:
        groups[(r["strategy"], r["k"])].append(r)
    out = (
        "| strategy | k | runs | wall speedup at stop, median (min-max) | "
        "wall speedup to within 3%, median (min-max) | profiling GPU-time vs k=1, median | "
        "trials, median | feasible SLAs within 3% at stop | same config as k=1 | "
        "wrongly infeasible |\n|---|---|---|---|---|---|---|---|---|---|\n"
    )
    for (strat, k), rs in sorted(groups.items(), key=lambda kv: (kv[0][0] != "sla", kv[0])):
        pairs = [(r, base[(r["table"], r["sla"], r["strategy"], r["seed"])]) for r in rs]
        at_stop = [b["wall_s"] / r["wall_s"] for r, b in pairs if r["wall_s"] > 0]
        to3 = [
            b["wall_to_3"] / r["wall_to_3"] for r, b in pairs if r["wall_to_3"] and b["wall_to_3"]
        ]
        gpu_time = [r["cost_s"] / b["cost_s"] for r, b in pairs if b["cost_s"] > 0]
        feas = [r for r in rs if r["feasible"]]
        good = sum(1 for r in feas if r["regret"] is not None and r["regret"] <= WITHIN)
        same = sum(1 for r, b in pairs if r["chosen"] == b["chosen"])
        wrong = sum(1 for r in feas if r["verdict_infeasible"])
        out += (
            f"| {strat} | {k} | {len(rs)} | {_med(at_stop)} | {_med(to3)} | "
            f"{statistics.median(gpu_time):.2f}x | "
            f"{statistics.median([r['trials'] for r in rs]):.0f} | {good}/{len(feas)} | "
            f"{same}/{len(rs)} | {wrong} |\n"
        )
    return out


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark; print the table; write results unless ``--smoke``."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--seeds", type=int, default=5, help="seeds of the tpe baseline")
    p.add_argument("--smoke", action="store_true", help="one table, 2 SLAs, sla only")
    p.add_argument("--workers", type=int, default=max(1, (multiprocessing.cpu_count() or 1)))
    p.add_argument("--out", type=Path, default=RESULTS)
    args = p.parse_args(argv)
    tables = load_tables(args.smoke)
    plan = [("sla", 0)] + ([] if args.smoke else [("tpe", s) for s in range(args.seeds)])
    tasks = [
        (t.name, i, strat, seed, k, args.smoke)
        for t in tables
        for i in range(len(slas(t, args.smoke)))
        for strat, seed in plan
        for k in KS
    ]
    if args.workers > 1 and not args.smoke:
        with multiprocessing.get_context("spawn").Pool(args.workers) as pool:
            rows = pool.map(run_one, tasks, chunksize=4)
    else:
        rows = [run_one(t) for t in tasks]
    text = summarise(rows)
    print(text)
    if not args.smoke:
        args.out.mkdir(parents=True, exist_ok=True)
        meta = {
            "date": datetime.date.today().isoformat(),
            "machine": f"{platform.machine()} {multiprocessing.cpu_count()} cores, no GPU",
            "python": sys.version.split()[0],
            "seeds": args.seeds,
            "command": "python -m bench.tuner.parallel"
            + (f" --seeds {args.seeds}" if args.seeds != 5 else ""),
        }
        (args.out / "parallel.md").write_text(
            f"<!-- {json.dumps(meta)} -->\n\n" + text, encoding="utf-8"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
