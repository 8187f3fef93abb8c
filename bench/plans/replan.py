"""Re-planned on resize, on the recorded CPU grid: what the old rule runs against what
``orchestrator.tuner.replan`` runs, for a few resizes of a ``gpt`` job whose profile is the
grid (``data/cpu_plans.json``), each config's samples/s and p95 as the grid measured them
(``-`` where the grid has no such config: a size it never ran, or a size the rule cannot use).

    .venv/bin/python -m bench.plans.replan        # table lookups only: a second or two
"""

from __future__ import annotations

import json
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
CASES: list[tuple[str, dict[str, int], int, int, int, int, dict[str, Any], dict[str, Any]]] = [
    ("grow one rank", {}, 32, 1, 1, 2, FLOOR, {}),
    ("grow one rank", {}, 32, 1, 1, 2, CEILING, {}),
    ("grow one rank, dp only", {}, 32, 1, 1, 2, FLOOR, DP_ONLY),
    ("grow one rank, dp only", {}, 32, 1, 1, 2, CEILING, DP_ONLY),
    ("shrink pp 2", {"pp": 2}, 16, 2, 2, 1, FLOOR, {}),
    ("grow pp 2", {"pp": 2}, 16, 2, 2, 4, FLOOR, {}),
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
                "plan": plan,
            },
            **({"tuning": tuning} if tuning else {}),
        }
    )


def _cells(spec: JobSpec | None, source: str = "") -> str:
    """A spec's config and what the grid measured for it, as three table cells."""
    if spec is None:
        return "cannot run there | - | -"
    run, plan = spec.run, spec.run.plan
    assert plan is not None
    c = Config(run.micro_batch, run.grad_accum, spec.gpus, tp=plan.tp, pp=plan.pp, zero=plan.zero)
    m = ROWS.get(c)
    rate, p95 = (f"{m['samples_per_s']:.1f}", f"{m['p95_ms']:.0f}") if m else ("-", "-")
    said = f"{c.describe()} ({source})" if source else c.describe()
    return f"{said} | {rate} | {p95}"


def main() -> int:
    """Print the table."""
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
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
