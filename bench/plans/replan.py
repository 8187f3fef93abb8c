"""Re-planned on resize, on the recorded CPU grid: what the old rule runs against what
``orchestrator.tuner.replan`` runs, for a few resizes of a ``gpt`` job whose profile is the
grid (``data/cpu_plans.json``), each config's samples/s and p95 as the grid measured them
(``-`` where the grid has no such config: a size it never ran, or a size the rule cannot use).
Cases with no ``run.plan`` are issue 37's: a job tuned to one GPU and placed on two, which the
rule alone used to decide.

    .venv/bin/python -m bench.plans.replan            # table lookups only: a second or two
    .venv/bin/python -m bench.plans.replan --live     # and the no-plan cases run again now

``--live`` runs, for each case without a plan, the rule's config and the re-plan's on 2 Gloo
ranks now (the worker harness through ``harness_config``, as a run or a trial runs them; 3
warm-up steps, 10 measured), alternating the two ``--repeats`` times, and prints the medians
side by side: the tuned rate on the given size against the rule's, measured in one run.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path
from typing import Any

from bench.plans.run import DATA
from orchestrator.elastic import resized_spec
from orchestrator.spec import JobSpec, parse_spec
from orchestrator.tuner.replan import replanned_spec
from orchestrator.tuner.space import Config

GRID = json.loads(DATA.read_text())
ROWS = {Config.from_dict(r["config"]): r["measurement"] for r in GRID["workloads"][0]["rows"]}
PROFILE = {
    "curves": {"fp32": [{**r["config"], **r["measurement"]} for r in GRID["workloads"][0]["rows"]]}
}
FLOOR = {"throughput": {"min_samples_per_s": 1}}
CEILING = {**FLOOR, "latency": {"max_ms": 700}}
DP_ONLY = {"bounds": {"plan": {"tp": [1], "pp": [1], "zero": [0, 1, 2, 3]}}}

# name, plan, micro-batch, accumulation, GPUs, new GPUs, SLA, tuning
CASES: list[
    tuple[str, dict[str, int] | None, int, int, int, int, dict[str, Any], dict[str, Any]]
] = [
    ("grow one rank", {}, 32, 1, 1, 2, FLOOR, {}),
    ("grow one rank", {}, 32, 1, 1, 2, CEILING, {}),
    ("grow one rank, dp only", {}, 32, 1, 1, 2, FLOOR, DP_ONLY),
    ("grow one rank, dp only", {}, 32, 1, 1, 2, CEILING, DP_ONLY),
    ("shrink pp 2", {"pp": 2}, 16, 2, 2, 1, FLOOR, {}),
    ("grow pp 2", {"pp": 2}, 16, 2, 2, 4, FLOOR, {}),
    ("grow one rank, no plan", None, 32, 1, 1, 2, FLOOR, {}),
    ("grow one rank, no plan", None, 32, 1, 1, 2, CEILING, {}),
]


def _spec(case: tuple[Any, ...]) -> JobSpec:
    _, plan, micro, accum, gpus, _, sla, tuning = case
    return parse_spec(
        {
            "name": "e",
            "team": "t",
            "class": "bulk",
            "workload": {"name": "gpt", "args": GRID["meta"]["workload_args"]},
            "sla": sla,
            "resources": {"gpus": {"min": 1, "max": 4}},
            "run": {
                "steps": 10,
                "micro_batch": micro,
                "grad_accum": accum,
                "data_parallel": gpus,
                **({"plan": plan} if plan is not None else {}),
            },
            **({"tuning": tuning} if tuning else {}),
        }
    )


def config_of(spec: JobSpec) -> Config:
    """The config a spec runs (its plan's, or data parallelism by its sharding)."""
    run, plan = spec.run, spec.run.plan
    if plan is None:
        return Config(run.micro_batch, run.grad_accum, spec.gpus, sharding=run.sharding)
    return Config(
        run.micro_batch, run.grad_accum, spec.gpus, tp=plan.tp, pp=plan.pp, zero=plan.zero
    )


def _cells(spec: JobSpec | None, source: str = "") -> str:
    """A spec's config and what the grid measured for it, as three table cells."""
    if spec is None:
        return "cannot run there | - | -"
    c = config_of(spec)
    m = ROWS.get(c)
    rate, p95 = (f"{m['samples_per_s']:.1f}", f"{m['p95_ms']:.0f}") if m else ("-", "-")
    said = f"{c.describe()} ({source})" if source else c.describe()
    return f"{said} | {rate} | {p95}"


def main(argv: list[str] | None = None) -> int:
    """Print the table (and with ``--live`` the no-plan cases measured now)."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--live", action="store_true", help="run the no-plan cases' configs now")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--scratch", type=Path, default=Path("/tmp/replan-live"))
    args = p.parse_args(argv)
    print(_table())
    if args.live:
        print(live(args.repeats, args.scratch))
    return 0


def live(repeats: int, scratch: Path) -> str:
    """The no-plan cases' rule and re-plan configs run now, alternating, medians side by side."""
    import torch.multiprocessing as mp

    from bench.plans.record_grid import _rank

    scratch.mkdir(parents=True, exist_ok=True)
    pairs = []
    for case in CASES:
        if case[1] is not None:
            continue
        spec, new = _spec(case), case[5]
        ruled, got = resized_spec(spec, new), replanned_spec(spec, new, PROFILE).spec
        assert ruled is not None and got is not None
        pairs.append((case, config_of(ruled), config_of(got)))
    configs = list(dict.fromkeys(c for _, r, g in pairs for c in (r, g)))
    runs: dict[Config, list[float]] = {c: [] for c in configs}
    for rep in range(repeats):
        order = configs if rep % 2 == 0 else configs[::-1]  # neither always goes first
        tag = f"live-{rep}-{time.time_ns()}"
        todo = [order[0].to_dict()] + [c.to_dict() for c in order]  # a discarded first
        mp.spawn(_rank, args=(2, todo, scratch, tag), nprocs=2)
        rows = json.loads((scratch / f"{tag}.json").read_text())[1:]
        for c, row in zip(order, rows, strict=True):
            runs[c].append(float(row["samples_per_s"]))
    lines = [
        "",
        f"live, 2 Gloo ranks, median of {repeats} alternating runs (samples/s, min-max):",
        "| case | SLA | rule runs | samples/s | re-plan runs | samples/s | ratio |",
        "|---|---|---|---|---|---|---|",
    ]
    for case, ruled_c, got_c in pairs:
        r, g = runs[ruled_c], runs[got_c]
        sla = "p95 <= 700 ms" if "latency" in case[6] else "throughput"
        lines.append(
            f"| {case[0]} | {sla} | {ruled_c.describe()} | {_spread(r)} | {got_c.describe()} "
            f"| {_spread(g)} | {statistics.median(g) / statistics.median(r):.2f}x |"
        )
    return "\n".join(lines)


def _spread(values: list[float]) -> str:
    return f"{statistics.median(values):.1f} ({min(values):.1f}-{max(values):.1f})"


def _table() -> str:
    """The table lookups: every case's rule and re-plan configs as the grid measured them."""
    lines = [
        "| resize | SLA | rule runs | samples/s | p95 ms | re-plan runs (source) | samples/s "
        "| p95 ms |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for case in CASES:
        spec, new = _spec(case), case[5]
        got = replanned_spec(spec, new, PROFILE)
        sla = "p95 <= 700 ms" if "latency" in case[6] else "throughput"
        lines.append(
            f"| {case[0]}: {case[4]} -> {new} GPUs | {sla} | {_cells(resized_spec(spec, new))} "
            f"| {_cells(got.spec, got.source)} |"
        )
    return "\n".join(lines)


if __name__ == "__main__":
    raise SystemExit(main())
