"""Tuner benchmark: strategies compared on tabular ground truth.

For every table (six Pollux GPU apps, the CPU grid when recorded), several SLAs chosen from the
table's own distribution (throughput floors at the 25th/75th/95th percentile of all configs'
throughput, 98 % of the best, and 1.25x the best = infeasible; latency ceilings at the 10th,
50th and 90th percentile of step time, and 0.8x the fastest = infeasible), and N seeds, each
strategy tunes through the same ``Tuner`` loop with the same budget (2x the grid's trials) and
stop rule (no gain > 1 % in 10 trials); the grid runs to the end. Baselines run without the
tuner's pruning (``prune=False``): plain Optuna.

    .venv/bin/python -m bench.tuner.run              # full: 20 seeds, writes results/
    .venv/bin/python -m bench.tuner.run --smoke      # seconds: one table, 2 SLAs, 2 seeds
    .venv/bin/python -m bench.tuner.run --keep-batch # each table as a job keeping its batch
    .venv/bin/python -m bench.tuner.run --generated 80 --seeds 3  # generated tables
    .venv/bin/python -m bench.tuner.run --unseen 45 --draw 1 --seeds 1  # unseen tables

With ``--keep-batch`` every table is cut to the configs of one global batch (its most common;
``tables.keep_batch``), as the tuner searches a training job that keeps its global batch: the
optimum is then the best split of that batch, not the best of every batch.

With ``--generated N`` the tables are ``N`` generated ones (``generated.py``: memory walls,
FSDP-only, overhead-dominated step times; knife-edge and impossible SLAs), exact or with
``--noise`` (the relative noise of each config's step time). With ``--unseen N`` they are
``N`` tables of the second generator (``unseen.py``: other functional forms, 1..8 GPUs, 1,440
configs), draw ``--draw``.
"""

from __future__ import annotations

import argparse
import datetime
import json
import math
import multiprocessing
import platform
import statistics
import sys
from collections import defaultdict
from pathlib import Path
from typing import Any

from bench.tuner.generated import generated_slas, generated_table, generated_tables
from bench.tuner.tables import POLLUX_APPS, Table, cpu_grid_tables, keep_batch, pollux_table
from bench.tuner.unseen import PREFIX as UNSEEN
from bench.tuner.unseen import unseen_slas, unseen_table, unseen_tables
from orchestrator.tuner.history import History, TrialRecord
from orchestrator.tuner.objective import Goal
from orchestrator.tuner.strategies import STRATEGIES
from orchestrator.tuner.tuner import Tuner

RESULTS = Path(__file__).parent / "results"
STRATEGY_NAMES = ("sla", "tpe", "random", "heuristic", "grid")
DETERMINISTIC = {"sla", "heuristic"}  # the seed changes nothing: one run stands for all seeds
PATIENCE = 10

_TABLES: dict[str, Table] = {}


def load_tables(
    smoke: bool,
    keep: bool = False,
    generated: int = 0,
    noise: float = 0.0,
    unseen: int = 0,
    draw: int = 0,
) -> list[Table]:
    """The benchmark's tables (``smoke``: one small Pollux table; ``keep``: each cut to one
    global batch; ``generated``: that many generated tables instead; ``unseen``: that many
    unseen tables of draw ``draw``)."""
    if unseen:
        return unseen_tables(unseen, draw)
    if generated:
        return generated_tables(generated, noise)
    tables = (
        [pollux_table("yolov3")]
        if smoke
        else [pollux_table(a) for a in POLLUX_APPS] + cpu_grid_tables()
    )
    return [keep_batch(t) for t in tables] if keep else tables


def _q(values: list[float], q: float) -> float:
    s = sorted(values)
    pos = q * (len(s) - 1)
    lo = math.floor(pos)
    hi = min(lo + 1, len(s) - 1)
    return s[lo] + (s[hi] - s[lo]) * (pos - lo)


def _table(name: str, smoke: bool) -> Table:
    """A table by its name (a generated one is rebuilt from the seed and noise in it)."""
    if name.startswith(UNSEEN):
        return unseen_table(int(name.rsplit("-", 1)[1]))
    if name.startswith("gen-"):
        seed, _, noise = name.rsplit("-", 1)[1].partition("~")
        return generated_table(int(seed), float(noise or 0.0))
    if name not in _TABLES:
        _TABLES.update({t.name: t for t in load_tables(smoke, keep="@" in name)})
    return _TABLES[name]


def slas(table: Table, smoke: bool = False) -> list[tuple[str, Goal]]:
    """SLAs from loose to tight (and infeasible), from the table's own distribution (a
    generated table: its knife-edge and impossible ones)."""
    if table.name.startswith("gen-"):
        return generated_slas(table)
    if table.name.startswith(UNSEEN):
        return unseen_slas(table)
    # the rows of the table's space (all of them, unless it keeps one global batch)
    ok = [m for c in table.space.configs() if (m := table.rows.get(c)) is not None and m.ok]
    rates = [m.samples_per_s or 0.0 for m in ok]
    lats = [m.p95_ms or 0.0 for m in ok]
    out: list[tuple[str, Goal]] = [
        ("floor p25", Goal("throughput", floor=_q(rates, 0.25))),
        ("floor p75", Goal("throughput", floor=_q(rates, 0.75))),
        ("floor p95", Goal("throughput", floor=_q(rates, 0.95))),
        ("floor 98% max", Goal("throughput", floor=0.98 * max(rates))),
        ("floor 1.25x max (infeasible)", Goal("throughput", floor=1.25 * max(rates))),
        ("p95 <= p90", Goal("latency", ceiling_ms=_q(lats, 0.90))),
        ("p95 <= p50", Goal("latency", ceiling_ms=_q(lats, 0.50))),
        ("p95 <= p10", Goal("latency", ceiling_ms=_q(lats, 0.10))),
        ("p95 <= 0.8x min (infeasible)", Goal("latency", ceiling_ms=0.8 * min(lats))),
    ]
    return [out[1], out[6]] if smoke else out


def optimum(table: Table, goal: Goal) -> float | None:
    """The best feasible value over the whole table (``None``: the SLA is infeasible)."""
    best: float | None = None
    for c in table.space.configs():
        m = table.rows.get(c)
        if m is None:
            continue
        v = goal.judge(c, m)
        if v.feasible and (best is None or goal.better(v.value, best)):
            best = v.value
    return best


def run_one(task: tuple[str, int, str, int, bool]) -> dict[str, Any]:
    """One tuning run; returns its metrics."""
    table_name, sla_idx, strategy, seed, smoke = task
    table = _table(table_name, smoke)
    label, goal = slas(table, smoke)[sla_idx]
    opt = optimum(table, goal)
    trace: list[tuple[int, float, float | None]] = []  # (trials, seconds, best value)

    def on_trial(rec: TrialRecord, h: History) -> None:
        best = h.best
        trials = sum(1 for r in h.records if r.source == "measured")
        trace.append((trials, h.cost_s, best.verdict.value if best else None))

    tuner = Tuner(
        table.space,
        goal,
        table.evaluator(),
        STRATEGIES.create(strategy, seed=seed),
        max_trials=2 * table.space.size,
        patience=None if strategy == "grid" else PATIENCE,
        prune=strategy == "sla",
        on_trial=on_trial,
    )
    result = tuner.run()

    def reach(within: float) -> tuple[int | None, float | None]:
        if opt is None:
            return None, None
        for trials, secs, best in trace:
            if best is not None and goal.gap(best, opt) <= within + 1e-12:
                return trials, secs
        return None, None

    t5, s5 = reach(0.05)
    _, s3 = reach(0.03)
    t1, s1 = reach(0.01)
    final = result.best.verdict.value if result.best else None
    # the chosen config judged on the table's own row (a strategy reports what it measured)
    truly = table.rows.get(result.best.config) if result.best else None
    misses = result.best is not None and (
        truly is None or not goal.judge(result.best.config, truly).feasible
    )
    regret = goal.gap(final, opt) if (opt is not None and final is not None) else None
    return {
        "table": table_name,
        "sla": label,
        "strategy": strategy,
        "seed": seed,
        "feasible": opt is not None,
        "verdict_infeasible": result.status == "sla-infeasible",
        "trials": result.trials,
        "seconds": result.cost_s,
        "grid_s": table.grid_cost_s,
        "grid_trials": table.space.size,
        "trials_5": t5,
        "seconds_5": s5,
        "seconds_3": s3,
        "trials_1": t1,
        "seconds_1": s1,
        "regret": regret,
        "chosen_misses": misses,
    }


def _median(xs: list[float]) -> float | None:
    return statistics.median(xs) if xs else None


def _fmt(x: float | None, pct: bool = False, nd: int = 0) -> str:
    if x is None:
        return "-"
    return f"{100 * x:.{nd}f}%" if pct else f"{x:.{nd}f}"


def summarise(rows: list[dict[str, Any]]) -> str:
    """The markdown tables: one line per (table, strategy), then the targets."""
    groups: dict[tuple[str, str], list[dict[str, Any]]] = defaultdict(list)
    for r in rows:
        groups[(_group(r["table"]), r["strategy"])].append(r)
    head = (
        "| table | strategy | runs | trials to 5% | % grid time to 5% | trials to 1% | "
        "% grid time to 1% | "
        "trials at stop | % grid time at stop (med / max) | regret (med / max) | "
        "runs <= 3% regret | infeasible found | wrongly infeasible |\n"
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|\n"
    )
    lines = []
    targets = []
    for (table, strat), rs in sorted(groups.items(), key=lambda kv: (kv[0][0], _order(kv[0][1]))):
        feas = [r for r in rs if r["feasible"]]
        inf = [r for r in rs if not r["feasible"]]
        t5 = [r["trials_5"] for r in feas if r["trials_5"] is not None]
        t1 = [r["trials_1"] for r in feas if r["trials_1"] is not None]
        s5 = [r["seconds_5"] / r["grid_s"] for r in feas if r["seconds_5"] is not None]
        s1 = [r["seconds_1"] / r["grid_s"] for r in feas if r["seconds_1"] is not None]
        stop_frac = [r["seconds"] / r["grid_s"] for r in rs]
        regrets = [r["regret"] if r["regret"] is not None else math.inf for r in feas]
        good = sum(1 for x in regrets if x <= 0.03)
        wrong = sum(1 for r in feas if r["verdict_infeasible"])
        right = sum(1 for r in inf if r["verdict_infeasible"])
        lines.append(
            f"| {table} | {strat} | {len(rs)} | {_fmt(_median(t5), nd=1)} "
            f"({len(t5)}/{len(feas)}) | {_fmt(_median(s5), True, 1)} | "
            f"{_fmt(_median(t1), nd=1)} ({len(t1)}/{len(feas)}) | "
            f"{_fmt(_median(s1), True, 1)} | {_fmt(_median([r['trials'] for r in rs]), nd=1)} | "
            f"{_fmt(_median(stop_frac), True, 1)} / {_fmt(max(stop_frac), True, 1)} | "
            f"{_fmt(_median(regrets), True, 2)} / {_fmt(max(regrets, default=None), True, 1)} | "
            f"{good}/{len(feas)} | {right}/{len(inf)} | {wrong} |"
        )
        if strat == "sla":
            reached = [
                r
                for r in feas
                if r["seconds_3"] is not None and r["seconds_3"] <= 0.10 * r["grid_s"]
            ]
            stopped = [
                r
                for r in feas
                if r["regret"] is not None
                and r["regret"] <= 0.03
                and r["seconds"] <= 0.10 * r["grid_s"]
            ]
            # A feasible SLA never brought within 3% counts as the whole grid's time.
            to3 = [
                r["seconds_3"] / r["grid_s"] if r["seconds_3"] is not None else 1.0 for r in feas
            ]
            targets.append(
                (table, _median(to3), len(reached), len(stopped), len(feas), wrong, max(stop_frac))
            )
    out = head + "\n".join(lines) + "\n"
    out += "\nTarget (ours, `sla`): within 3% using <= 10% of the grid's profiling time\n\n"
    out += (
        "| table | median % grid time to within 3% | "
        "feasible SLAs: within 3% reached by 10% of grid time | "
        "... and stopped by then | wrong infeasible | max % grid time at stop |\n"
    )
    out += "|---|---|---|---|---|---|\n"
    for table, med3, reached_n, stopped_n, n, wrong, mx in targets:
        out += (
            f"| {table} | {_fmt(med3, True, 1)} | {reached_n}/{n} | {stopped_n}/{n} | {wrong} | "
            f"{100 * mx:.1f}% |\n"
        )
    out += "\n" + _overall(rows) + "\n" + _median_trials(rows)
    return out


def _overall(rows: list[dict[str, Any]]) -> str:
    """Every strategy over every table and SLA: the target's figures side by side (a
    non-deterministic strategy counts each seed as a run)."""
    per: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for r in rows:
        per[r["strategy"]].append(r)
    out = (
        "| strategy | feasible runs | within 3% by 10% of grid time | within 3% at stop | "
        "wrongly infeasible | infeasible found | chosen config truly misses |\n"
        "|---|---|---|---|---|---|---|\n"
    )
    for strat in sorted(per, key=_order):
        rs = per[strat]
        feas = [r for r in rs if r["feasible"]]
        inf = [r for r in rs if not r["feasible"]]
        early = sum(
            1 for r in feas if r["seconds_3"] is not None and r["seconds_3"] <= 0.10 * r["grid_s"]
        )
        final = sum(1 for r in feas if r["regret"] is not None and r["regret"] <= 0.03)
        wrong = sum(1 for r in feas if r["verdict_infeasible"])
        right = sum(1 for r in inf if r["verdict_infeasible"])
        missed = sum(1 for r in rs if r.get("chosen_misses"))
        n = max(len(feas), 1)
        out += (
            f"| {strat} | {len(feas)} | {early} ({100 * early / n:.0f}%) | "
            f"{final} ({100 * final / n:.0f}%) | {wrong} ({100 * wrong / n:.0f}%) | "
            f"{right}/{len(inf)} | {missed} |\n"
        )
    return out


def _group(table: str) -> str:
    """The line a table's runs are summed into: its own, or for a generated table its kind
    (``gen-<kind>-<seed>[~noise]`` -> ``gen-<kind>[~noise]``)."""
    if table.startswith(UNSEEN):
        return table.rpartition("-")[0]
    if not table.startswith("gen-"):
        return table
    head, _, seed = table.rpartition("-")
    return head + ("~" + seed.partition("~")[2] if "~" in seed else "")


def _median_trials(rows: list[dict[str, Any]]) -> str:
    """Median trials at stop per strategy over every (table, SLA, seed) run."""
    per: dict[str, list[float]] = defaultdict(list)
    for r in rows:
        per[r["strategy"]].append(r["trials"])
    parts = [f"{s}: {_fmt(_median(per[s]), nd=1)}" for s in sorted(per, key=_order)]
    return "Median trials at stop over all runs: " + ", ".join(parts) + "\n"


def _order(s: str) -> int:
    return STRATEGY_NAMES.index(s) if s in STRATEGY_NAMES else 99


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark; print the table; write results unless ``--smoke``."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--seeds", type=int, default=20)
    p.add_argument("--smoke", action="store_true", help="one table, 2 SLAs, 2 seeds")
    p.add_argument("--workers", type=int, default=max(1, (multiprocessing.cpu_count() or 1)))
    p.add_argument("--out", type=Path, default=RESULTS)
    p.add_argument("--raw", action="store_true", help="also write every run (tuner.json)")
    p.add_argument("--keep-batch", action="store_true", help="each table cut to one global batch")
    p.add_argument("--generated", type=int, default=0, help="N generated tables instead")
    p.add_argument("--noise", type=float, default=0.0, help="generated step-time noise (0.02)")
    p.add_argument("--unseen", type=int, default=0, help="N unseen tables instead (unseen.py)")
    p.add_argument("--draw", type=int, default=0, help="which draw of unseen tables")
    p.add_argument("--tag", default="", help="suffix of the results file (before, after)")
    p.add_argument("--strategies", default=",".join(STRATEGY_NAMES), help="comma-separated")
    args = p.parse_args(argv)
    seeds = 2 if args.smoke else args.seeds
    tables = load_tables(
        args.smoke, args.keep_batch, args.generated, args.noise, args.unseen, args.draw
    )
    names = [s for s in STRATEGY_NAMES if s in args.strategies.split(",")]
    tasks = []
    for t in tables:
        for i in range(len(slas(t, args.smoke))):
            for s in names:
                for seed in range(1 if s in DETERMINISTIC else seeds):
                    tasks.append((t.name, i, s, seed, args.smoke))
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
            "seeds": seeds,
            "command": "python -m bench.tuner.run"
            + (f" --seeds {seeds}" if seeds != 20 else "")
            + (" --keep-batch" if args.keep_batch else "")
            + (f" --generated {args.generated}" if args.generated else "")
            + (f" --noise {args.noise:g}" if args.noise else "")
            + (f" --unseen {args.unseen} --draw {args.draw}" if args.unseen else "")
            + (f" --strategies {','.join(names)}" if names != list(STRATEGY_NAMES) else ""),
        }
        stem = "tuner-keep-batch" if args.keep_batch else "tuner"
        if args.generated:
            stem = "tuner-generated" + (f"-noise{args.noise:g}" if args.noise else "")
        if args.unseen:
            stem = f"tuner-unseen-d{args.draw}"
        stem += f"-{args.tag}" if args.tag else ""
        if args.raw:
            raw = json.dumps({"meta": meta, "runs": rows}, separators=(",", ":"))
            (args.out / f"{stem}.json").write_text(raw)
        (args.out / f"{stem}.md").write_text(
            f"<!-- {json.dumps(meta)} -->\n\n" + text, encoding="utf-8"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
