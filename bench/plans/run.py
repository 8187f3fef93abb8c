"""Plan search on the recorded CPU grid: trials until within 3 % of the best plan.

The table is ``data/cpu_plans.json`` (``record_grid``): every plan of 1-2 CPU ranks, each
config's measured throughput and p95 step latency. Three searches, each a sequence of trials
(table lookups) judged by how many trials it takes until the best config it has measured is
within 3 % of the table's true optimum for the SLA:

- ``model``: the plan model (``orchestrator.tuner.planmodel``): measure the fewest configs
  that exercise every term (each plan at its largest micro-batch, one GPU also at its
  smallest), fit, then measure the model's predicted best untried config, refitted after each;
- ``staged``: DeepSpeed's autotuner (ZeRO stage by stage, then tensor and pipeline plans),
  micro-batch galloping within each: doubling while the SLA's value improves;
- ``tpe``: Optuna's TPE over the tuner's own space (``SearchSpace.suggest``), 5 seeds
  (median trials; a search that never gets there counts as the table's size);
- ``sla``: the tuner's own SLA strategy (``orchestrator.tuner.strategies.sla``) through the
  ``Tuner`` on a ``TableEvaluator``, as ``bench.tuner`` runs it (pruning on, patience 10):
  under the latency ceiling, and for the throughput SLA under a ceiling no step reaches (the
  best samples/s wins: a throughput floor would minimise GPU-seconds per sample instead).

SLAs: a throughput floor (the best samples/s wins) and a latency ceiling (the best samples/s
with p95 under the median p95 of the table).

    .venv/bin/python -m bench.plans.run            # prints the table, writes results/plans.md
"""

from __future__ import annotations

import json
import statistics
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from orchestrator.tuner.planmodel import PlanSample, fit_plan_model
from orchestrator.tuner.space import Config, SearchSpace

DATA = Path(__file__).parent / "data" / "cpu_plans.json"
RESULTS = Path(__file__).parent / "results" / "plans.md"
WITHIN = 0.03
Rows = dict[Config, dict[str, Any]]
Score = Callable[[Config], float]  # the SLA's value of a measured config (higher is better)


def load() -> tuple[Rows, SearchSpace]:
    """The grid's rows and its space."""
    data = json.loads(DATA.read_text())["workloads"][0]
    s = data["space"]
    space = SearchSpace(
        micro_batches=tuple(s["micro_batches"]),
        grad_accums=tuple(s["grad_accums"]),
        gpus=tuple(s["gpus"]),
        plans=tuple((tp, pp, z) for tp, pp, z in s["plans"]),
        global_batches=tuple(s["global_batches"]),
    )
    return {Config.from_dict(r["config"]): r["measurement"] for r in data["rows"]}, space


def slas(rows: Rows) -> dict[str, tuple[Score, float | None]]:
    """The SLAs: name -> (score of a config, latency ceiling in ms or None)."""
    ceiling = statistics.median(m["p95_ms"] for m in rows.values())

    def throughput(c: Config) -> float:
        return float(rows[c]["samples_per_s"])

    def latency(c: Config) -> float:
        return throughput(c) if rows[c]["p95_ms"] <= ceiling else 0.0

    return {"throughput": (throughput, None), f"p95 <= {ceiling:.0f} ms": (latency, ceiling)}


def model_order(rows: Rows, space: SearchSpace, ceiling: float | None) -> Iterator[Config]:
    """The plan model's trials: the seed configs, then its predicted best untried, refitted."""
    configs = list(space.configs())
    lays: dict[tuple[int, int, int, int], list[Config]] = {}
    for c in configs:
        lays.setdefault((c.gpus, c.tp, c.pp, c.zero), []).append(c)
    # each plan at its largest micro-batch (fewest accumulations), and the one-GPU line at both
    # ends: every term of the model gets a point, the compute curve two
    seeds = [max(line) for line in lays.values()] + [min(lays[(1, 1, 1, 0)])]
    measured: list[Config] = []
    for c in seeds:
        measured.append(c)
        yield c
    while len(measured) < len(configs):
        samples = [
            PlanSample(c, c.global_batch / rows[c]["samples_per_s"], rows[c]["p95_ms"])
            for c in measured
        ]
        model = fit_plan_model(samples)
        assert model is not None
        left = [c for c in configs if c not in measured]
        best = model.best(left, max_latency_ms=ceiling) or max(left, key=model.samples_per_s)
        measured.append(best)
        yield best


def staged_order(rows: Rows, space: SearchSpace, score: Score) -> Iterator[Config]:
    """DeepSpeed autotuner's order: one plan at a time (ZeRO 0, 1, 2, 3, then tensor and
    pipeline), micro-batch galloping up from the smallest while the score improves."""
    configs = list(space.configs())
    order = sorted(
        {(c.gpus, c.zero, c.tp, c.pp) for c in configs}, key=lambda k: (k[2] * k[3], k[1], -k[0])
    )
    for gpus, zero, tp, pp in order:
        line = sorted(c for c in configs if (c.gpus, c.zero, c.tp, c.pp) == (gpus, zero, tp, pp))
        best = -1.0
        for c in line:
            yield c
            if score(c) <= best:
                break
            best = score(c)


def tpe_order(space: SearchSpace, score: Score, seed: int) -> Iterator[Config]:
    """Optuna TPE over the space, told each config's score."""
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study = optuna.create_study(
        direction="maximize", sampler=optuna.samplers.TPESampler(seed=seed, n_startup_trials=5)
    )
    for _ in range(200):
        trial = study.ask()
        c = space.suggest(trial)
        study.tell(trial, score(c))
        yield c


def sla_order(rows: Rows, space: SearchSpace, ceiling: float | None) -> Iterator[Config]:
    """The SLA strategy's measured trials, in order (a table lookup each)."""
    from orchestrator.tuner.evaluators.table import TableEvaluator
    from orchestrator.tuner.objective import Goal, Measurement
    from orchestrator.tuner.space import DeviceCaps
    from orchestrator.tuner.strategies import STRATEGIES
    from orchestrator.tuner.tuner import Tuner

    table = {c: Measurement.from_dict(m) for c, m in rows.items()}
    goal = Goal("latency", ceiling_ms=ceiling if ceiling is not None else 1e12)
    caps = DeviceCaps(shardings=("ddp", "fsdp"), max_gpus=max(space.gpus))
    tried: list[Config] = []
    tuner = Tuner(
        space,
        goal,
        TableEvaluator(table, caps),
        STRATEGIES.create("sla", seed=0),
        max_trials=2 * space.size,
        patience=10,
        prune=True,
        on_trial=lambda rec, _: tried.append(rec.config) if rec.source == "measured" else None,
    )
    tuner.run()
    yield from tried


def trials_to_within(order: Iterator[Config], score: Score, best: float, cap: int) -> int:
    """Distinct trials until the best measured score is within ``WITHIN`` of ``best``."""
    seen: set[Config] = set()
    top = 0.0
    for c in order:
        seen.add(c)
        top = max(top, score(c))
        if top >= (1 - WITHIN) * best:
            return len(seen)
        if len(seen) >= cap:
            break
    return cap


def main() -> int:
    """Run every search under every SLA; print and write the table."""
    rows, space = load()
    n = len(rows)
    lines = [
        f"Plan search on the CPU grid ({n} configs): trials until within 3 % of the best.",
        "",
        "| SLA | best config (table) | model | staged (DeepSpeed-style) | TPE (median of 5) "
        "| SLA strategy |",
        "|---|---|---|---|---|---|",
    ]
    for name, (score, ceiling) in slas(rows).items():
        best_c = max(rows, key=score)
        best = score(best_c)
        model = trials_to_within(model_order(rows, space, ceiling), score, best, n)
        staged = trials_to_within(staged_order(rows, space, score), score, best, n)
        tpe = statistics.median(
            trials_to_within(tpe_order(space, score, s), score, best, n) for s in range(5)
        )
        sla = trials_to_within(sla_order(rows, space, ceiling), score, best, n)
        lines.append(f"| {name} | {best_c.describe()} | {model} | {staged} | {tpe:g} | {sla} |")
    text = "\n".join(lines)
    print(text)
    RESULTS.parent.mkdir(exist_ok=True)
    RESULTS.write_text(text + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
