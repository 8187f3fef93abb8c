"""The search-strategy contract, run by every strategy on the same synthetic table."""

from __future__ import annotations

import dataclasses
import math

import pytest

from orchestrator.errors import TuneError
from orchestrator.tuner.evaluators import TableEvaluator
from orchestrator.tuner.history import History
from orchestrator.tuner.objective import Goal, Measurement
from orchestrator.tuner.perfmodel import Sample, fit_step_model
from orchestrator.tuner.space import Config, SearchSpace
from orchestrator.tuner.strategies import STRATEGIES, SearchStrategy
from orchestrator.tuner.strategies.sla import Family
from orchestrator.tuner.strategies.sla.evidence import fit_samples
from orchestrator.tuner.strategies.sla.priors import scaled_priors
from orchestrator.tuner.tuner import Tuner
from policies.registry import UnknownPolicyError
from tests.tuner.conftest import (
    CAPS,
    batch_space,
    batch_table,
    optimum,
    step_s,
    synthetic_space,
    synthetic_table,
)

GOALS = [
    Goal("throughput", floor=3000.0),
    Goal("latency", ceiling_ms=40.0),
    Goal("throughput", floor=1e9),  # infeasible
]


@pytest.mark.parametrize("name", STRATEGIES.names())
class TestStrategyContract:
    """Every strategy: stops, never crashes on OOM, never calls a feasible SLA infeasible when it
    searched the whole budget, and records every trial in the Optuna study."""

    def _tune(self, name: str, goal: Goal, seed: int = 0) -> tuple[object, Tuner]:
        table = synthetic_table(mem_cap=64)
        tuner = Tuner(
            synthetic_space(),
            goal,
            table,
            STRATEGIES.create(name, seed=seed),
            patience=None if name in ("grid",) else 15,
        )
        return tuner.run(), tuner

    @pytest.mark.parametrize("goal", GOALS, ids=["floor", "ceiling", "infeasible"])
    def test_stops_with_a_verdict(self, name: str, goal: Goal) -> None:
        result, tuner = self._tune(name, goal)
        assert result.stopped in ("done", "patience", "trials")  # type: ignore[attr-defined]
        assert len(tuner.study.trials) == len(result.history)  # type: ignore[attr-defined]
        if goal.floor == 1e9:
            assert result.status == "sla-infeasible"  # type: ignore[attr-defined]
            assert "floor" in result.reason  # type: ignore[attr-defined]

    def test_out_of_memory_trials_are_infeasible_and_the_search_goes_on(self, name: str) -> None:
        result, _ = self._tune(name, Goal("latency", ceiling_ms=1000.0))
        h = result.history  # type: ignore[attr-defined]
        best = result.best  # type: ignore[attr-defined]
        assert best is not None and best.config.micro_batch <= 64
        for r in h.records:
            if r.measurement.status == "oom":
                assert not r.verdict.feasible and r.verdict.constraints["runs"] > 0

    def test_deterministic_for_a_seed(self, name: str) -> None:
        a, _ = self._tune(name, GOALS[0], seed=3)
        b, _ = self._tune(name, GOALS[0], seed=3)
        assert [r.config for r in a.history.records] == [  # type: ignore[attr-defined]
            r.config
            for r in b.history.records  # type: ignore[attr-defined]
        ]


BATCH_GOALS = [
    Goal("throughput", floor=2000.0),
    Goal("latency", ceiling_ms=60.0),
    Goal("throughput", floor=1e9),  # infeasible
]


@pytest.mark.parametrize("name", STRATEGIES.names())
@pytest.mark.parametrize("batches", [(64,), (32, 64, 128)], ids=["fixed", "range"])
@pytest.mark.parametrize("goal", BATCH_GOALS, ids=["floor", "ceiling", "infeasible"])
def test_every_tuned_config_keeps_the_global_batch(
    name: str, batches: tuple[int, ...], goal: Goal
) -> None:
    """No strategy proposes a config outside the job's global batch (the tuner would refuse
    it): every trial, in the history and in the Optuna study, has it (one of the allowed range
    when a range is allowed), and the search still finds the optimum of that space."""
    space = batch_space(*batches)
    table = batch_table(space)
    tuner = Tuner(space, goal, table, STRATEGIES.create(name, seed=3), patience=15)
    result = tuner.run()
    records = result.history.records
    assert records and {r.config.global_batch for r in records} <= set(batches)
    for t in tuner.study.trials:
        assert Config.from_dict(t.user_attrs["config"]).global_batch in batches
    if len(batches) > 1 and name == "grid":
        assert {r.config.global_batch for r in records} == set(batches)
    best = optimum(table, goal)
    if best is None:
        assert result.status == "sla-infeasible"
    elif name in ("grid", "sla"):
        assert result.best is not None and result.best.verdict.value == pytest.approx(best[0])


def test_the_tuner_refuses_a_proposal_that_breaks_the_batch() -> None:
    class Stray(SearchStrategy):
        name = "stray"

        def next_config(self, history: History) -> Config | None:
            return Config(64, gpus=2)  # global batch 128, the space keeps 64

    space = batch_space(64)
    with pytest.raises(TuneError, match=r"proposed micro-batch 64.*global batch 128"):
        Tuner(space, GOALS[0], batch_table(space), Stray()).run()


@pytest.mark.parametrize("goal", GOALS[:2], ids=["floor", "ceiling"])
def test_ours_finds_the_optimum_cheaply(goal: Goal) -> None:
    table = synthetic_table(mem_cap=64)
    result = Tuner(synthetic_space(), goal, table, STRATEGIES.create("sla")).run()
    opt = optimum(table, goal)
    assert opt is not None and result.best is not None
    assert goal.gap(result.best.verdict.value, opt[0]) <= 0.03
    grid_cost = sum(m.cost_s for m in table.rows.values()) + table.oom_cost_s * 16
    assert result.cost_s < 0.5 * grid_cost
    # Never at or above an OOM already seen with the same settings and no more GPUs.
    seen: list[tuple[int, int]] = []
    for r in result.history.records:
        c = r.config
        assert not any(g <= c.gpus and mb <= c.micro_batch for g, mb in seen), c
        if r.measurement.status == "oom":
            seen.append((c.gpus, c.micro_batch))


def test_latency_miss_prunes_larger_micro_batches() -> None:
    """With pruning, TPE's proposals above a missed ceiling are skipped, not measured."""
    goal = Goal("latency", ceiling_ms=20.0)
    result = Tuner(
        synthetic_space(),
        goal,
        synthetic_table(),
        STRATEGIES.create("tpe", seed=1),
        patience=None,
        max_trials=60,
    ).run()
    pruned = [r for r in result.history.records if r.source == "pruned"]
    assert pruned and all(r.measurement.message.startswith("skipped") for r in pruned)
    assert all(r.cost_s == 0 for r in pruned)


def test_patience_stops_a_search_that_stopped_improving() -> None:
    result = Tuner(
        synthetic_space(),
        GOALS[0],
        synthetic_table(),
        STRATEGIES.create("random", seed=0),
        patience=3,
    ).run()
    assert result.stopped == "patience"


def test_unknown_strategy_lists_the_valid_names() -> None:
    with pytest.raises(UnknownPolicyError, match="grid, heuristic, random, sla, tpe"):
        STRATEGIES.create("bayes")


def test_registry_holds_search_strategies() -> None:
    assert all(isinstance(STRATEGIES.create(n), SearchStrategy) for n in STRATEGIES.names())


def _sharded_table(precisions: tuple[str, ...] = ("fp32",)) -> tuple[SearchSpace, TableEvaluator]:
    """1-4 GPUs, DDP or FSDP: FSDP syncs slower (2 ms more per GPU) but shards the model, so it
    fits 16 samples per GPU per GPU (DDP fits 16 on any count). bf16, if asked for, runs at
    0.7x fp32's step time and needs the same memory."""
    space = SearchSpace(
        micro_batches=(1, 2, 4, 8, 16, 32, 64, 128, 256),
        gpus=(1, 2, 3, 4),
        shardings=("ddp", "fsdp"),
        precisions=precisions,
        gpus_per_node=4,
    )
    rows = {}
    for c in space.configs():
        fsdp = c.sharding == "fsdp"
        if c.micro_batch > 16 * (c.gpus if fsdp else 1):
            continue
        t = step_s(c.gpus, c.micro_batch) + (0.002 * c.gpus if fsdp else 0.0)
        t *= 0.7 if c.precision == "bf16" else 1.0
        rows[c] = Measurement(
            "ok",
            p50_ms=t * 1e3,
            p95_ms=t * 1.1e3,
            p99_ms=t * 1.2e3,
            samples_per_s=c.gpus * c.micro_batch / t,
            cost_s=10 + 20 * t,
        )
    caps = dataclasses.replace(CAPS, precisions=precisions)
    return space, TableEvaluator(rows, caps, oom_cost_s=10)


@pytest.mark.parametrize(
    "goal",
    [
        Goal("throughput", floor=2000.0),
        Goal("throughput", floor=3000.0),
        Goal("latency", ceiling_ms=60),
    ],
    ids=["floor", "tight-floor", "ceiling"],
)
def test_ours_tunes_the_sharding_where_fsdp_fits_larger_micro_batches(goal: Goal) -> None:
    """The optimum needs FSDP on 4 GPUs (a micro-batch DDP cannot fit): the search walks the FSDP
    family from 2 GPUs and carries its memory limits upwards in GPUs, not downwards as DDP's."""
    space, table = _sharded_table()
    result = Tuner(space, goal, table, STRATEGIES.create("sla")).run()
    opt = optimum(table, goal)
    assert opt is not None and opt[1].sharding == "fsdp" and opt[1].micro_batch > 16
    assert result.best is not None, result.reason
    assert goal.gap(result.best.verdict.value, opt[0]) <= 0.03
    assert result.trials <= space.size // 3  # of 63 configs


def test_ours_does_not_walk_a_family_its_model_finds_slower_everywhere() -> None:
    """bf16 at half fp32's speed at every micro-batch (as on many CPUs): one bf16 run, at the
    largest micro-batch fp32 fitted, with fp32's model scaled through it, shows nothing to gain
    there, so bf16 is not walked at all."""
    space = SearchSpace(micro_batches=(1, 2, 4, 8, 16, 32, 64, 128), precisions=("fp32", "bf16"))
    rows = {}
    for c in space.configs():
        t = step_s(1, c.micro_batch) * (2.0 if c.precision == "bf16" else 1.0)
        rows[c] = Measurement("ok", p95_ms=t * 1e3, samples_per_s=c.micro_batch / t, cost_s=t)
    table = TableEvaluator(rows, CAPS)
    goal = Goal("throughput", floor=100.0)
    result = Tuner(space, goal, table, STRATEGIES.create("sla")).run()
    opt = optimum(table, goal)
    assert opt is not None and result.best is not None and result.best.config == opt[1]
    bf16 = [r.config.micro_batch for r in result.history.records if r.config.precision == "bf16"]
    assert bf16 == [128], bf16


def test_ours_tries_the_fewest_gpus_predicted_to_meet_a_floor_first() -> None:
    """One GPU measured, its sync cost unknown: every GPU count meeting the floor is predicted
    equally cheap, and the first multi-GPU trial is the fewest GPUs predicted to meet it."""
    table = synthetic_table(mem_cap=64)
    goal = Goal("throughput", floor=3000.0)
    result = Tuner(synthetic_space(), goal, table, STRATEGIES.create("sla")).run()
    single = [r for r in result.history.records if r.config.gpus == 1 and r.measurement.ok]
    top_rate = max(float(r.measurement.samples_per_s or 0) for r in single)
    first_multi = next(r.config for r in result.history.records if r.config.gpus > 1)
    assert first_multi.gpus == math.ceil(goal.floor / top_rate)  # type: ignore[operator]


def test_a_new_family_starts_at_a_micro_batch_its_memory_settings_fitted() -> None:
    """A family's first run is at the largest micro-batch a family with the same sharding and
    checkpointing fitted: bf16 DDP starts at fp32 DDP's 16, not at the 32 or 64 FSDP fitted by
    sharding the model; bf16 FSDP starts at the largest micro-batch FSDP fitted on as many GPUs
    or fewer (FSDP's fits at more GPUs do not carry down)."""
    space, table = _sharded_table(("fp32", "bf16"))
    goal = Goal("throughput", floor=2000.0)
    result = Tuner(space, goal, table, STRATEGIES.create("sla")).run()
    trials = [(r.config, r.measurement.status) for r in result.history.records]
    fp32_ddp_fits = [
        c.micro_batch
        for c, s in trials
        if (c.sharding, c.precision) == ("ddp", "fp32") and s == "ok"
    ]
    first_bf16_ddp = next(c for c, _ in trials if (c.sharding, c.precision) == ("ddp", "bf16"))
    assert first_bf16_ddp.micro_batch == max(fp32_ddp_fits) == 16, trials
    first_bf16_fsdp = next(c for c, _ in trials if (c.sharding, c.precision) == ("fsdp", "bf16"))
    fsdp_fits_at_or_below = [
        c.micro_batch
        for c, s in trials[: trials.index((first_bf16_fsdp, "ok"))]
        if c.sharding == "fsdp" and s == "ok" and c.gpus <= first_bf16_fsdp.gpus
    ]
    assert first_bf16_fsdp.micro_batch == max(fsdp_fits_at_or_below), trials


def test_half_precision_is_not_tried_at_twice_an_fp32_out_of_memory() -> None:
    """Autocast keeps weights and optimizer state in fp32 and at best halves the activations:
    bf16 DDP is not tried at twice fp32 DDP's OOM (64 after fp32 ran out at 32), so its walk
    above its first fit costs one OOM trial (32), not a gallop to 256 and back (nor does the
    local search at the end try it)."""
    space, table = _sharded_table(("fp32", "bf16"))
    result = Tuner(space, Goal("throughput", floor=2000.0), table, STRATEGIES.create("sla")).run()
    trials = [(r.config, r.measurement.status) for r in result.history.records]
    fp32_oom = min(c.micro_batch for c, s in trials if c.precision == "fp32" and s == "oom")
    bf16_walk = [(c.micro_batch, s) for c, s in trials if (c.gpus, c.precision) == (1, "bf16")]
    assert fp32_oom == 32 and bf16_walk == [(16, "ok"), (32, "oom")], trials
    assert not [
        c for c, _ in trials if (c.sharding, c.precision) == ("ddp", "bf16") and c.micro_batch >= 64
    ], trials


def test_a_sharded_family_with_one_run_gets_the_best_familys_model_scaled_through_it() -> None:
    """The one-point prior counts a family's own runs: FSDP's model is fitted with DDP's one-GPU
    runs too (the same run on one GPU), but one FSDP run of its own still makes it a one-point
    family, judged by the reference family's shape scaled through that run."""
    ddp = Family("ddp", "fp32", False, False)
    fsdp = Family("fsdp", "fp32", False, False, zero=3)
    by_family = {
        ddp: [Sample(1, m, 1, step_s(1, m)) for m in (1, 4, 16)] + [Sample(2, 16, 1, 0.03)],
        fsdp: [Sample(2, 16, 1, 0.04)],
    }
    fitted = {f: fit_step_model(fit_samples(f, by_family), 4) for f in by_family}
    models = {f: m for f, m in fitted.items() if m is not None}
    priors = scaled_priors(models, by_family, None)
    assert set(priors) == {fsdp}
    ref = models[ddp]
    assert ref is not None
    assert priors[fsdp].step_s(2, 16) == pytest.approx(0.04)
    # Same shape: every prediction is DDP's times the one ratio the FSDP run showed.
    ratio = 0.04 / ref.step_s(2, 16)
    for g, m in [(1, 1), (2, 4), (2, 64)]:
        assert priors[fsdp].step_s(g, m) == pytest.approx(ratio * ref.step_s(g, m))


def test_a_new_family_starts_at_the_leading_micro_batch_not_past_the_throughput_peak() -> None:
    """Time per sample grows past micro-batch 32 (a CPU falling out of cache), so fp32's
    largest fit (128) is slower than its 64. bf16's first run is at the leading config's
    micro-batch, where the comparison matters, not at 128, the costlier trial past the peak."""
    space = SearchSpace(micro_batches=(1, 2, 4, 8, 16, 32, 64, 128), precisions=("fp32", "bf16"))

    def t_of(m: int, precision: str) -> float:
        t = 0.005 + 0.001 * m + (0.00005 * (m - 32) ** 2 if m > 32 else 0.0)
        return t * (0.6 if precision == "bf16" else 1.0)

    rows = {}
    for c in space.configs():
        t = t_of(c.micro_batch, c.precision)
        rows[c] = Measurement("ok", p95_ms=t * 1e3, samples_per_s=c.micro_batch / t, cost_s=t)
    goal = Goal("throughput", floor=100.0)
    result = Tuner(space, goal, TableEvaluator(rows, CAPS), STRATEGIES.create("sla")).run()
    trials = [(r.config.precision, r.config.micro_batch) for r in result.history.records]
    first_bf16 = next(i for i, (p, _) in enumerate(trials) if p == "bf16")
    fp32_before = result.history.records[:first_bf16]
    fastest = max(fp32_before, key=lambda r: r.measurement.samples_per_s or 0.0)
    assert max(m for p, m in trials[:first_bf16]) == 128, trials  # fp32 fitted 128
    assert trials[first_bf16] == ("bf16", fastest.config.micro_batch) != ("bf16", 128), trials
    opt = optimum(TableEvaluator(rows, CAPS), goal)
    assert opt is not None and result.best is not None and result.best.config == opt[1], trials
