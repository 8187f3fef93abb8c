"""The SLA strategy's neighbour rule and its order of the budget (issue 37)."""

from __future__ import annotations

import pytest

from bench.tuner.run import optimum
from bench.tuner.unseen import unseen_slas, unseen_table
from orchestrator.tuner.evaluators import TableEvaluator
from orchestrator.tuner.history import History, TrialRecord
from orchestrator.tuner.objective import Goal, Measurement
from orchestrator.tuner.space import Config, DeviceCaps, SearchSpace
from orchestrator.tuner.strategies import SLASearchStrategy
from orchestrator.tuner.strategies.sla import Evidence, steps
from orchestrator.tuner.tuner import Tuner


def _ok(c: Config, ms: float) -> Measurement:
    return Measurement(
        "ok", p50_ms=ms, p95_ms=ms, p99_ms=ms, samples_per_s=c.global_batch / (ms / 1000.0)
    )


def _history(space: SearchSpace, goal: Goal, runs: dict[Config, Measurement]) -> History:
    h = History(space, goal)
    for i, (c, m) in enumerate(runs.items()):
        h.add(TrialRecord(i, c, m, goal.judge(c, m)))
    return h


def test_no_infeasible_verdict_with_an_unmeasured_neighbour_of_the_closest() -> None:
    """Nothing meets the ceiling; 6 GPUs comes closest (3% over), 5 and 7 are slower, and the
    model fitted on 1-7 GPUs predicts 8 to miss, and 8 is no family's extreme: before the
    neighbour rule the guard (extremes, then the closest's next GPU count either side) had
    nothing left and the verdict came. 8 GPUs is two from 6, a neighbour on the GPU axis: the
    strategy measures it, and holds the patience until then."""
    space = SearchSpace(micro_batches=(1,), gpus=tuple(range(1, 9)))
    goal = Goal("latency", ceiling_ms=10.0)
    lat = {1: 12.0, 2: 11.0, 3: 11.5, 4: 10.5, 5: 11.2, 6: 10.3, 7: 11.8}
    h = _history(
        space, goal, {Config(1, gpus=g): _ok(Config(1, gpus=g), ms) for g, ms in lat.items()}
    )
    ev = Evidence.build(h)
    scored = steps.score(ev)
    assert ev.best is None and ev.closest is not None
    assert ev.closest.config == Config(1, gpus=6)
    assert not any(p.ok for p in scored)  # no model predicts a config meeting the SLA
    assert steps.approach(ev, scored, 0.01) is None
    assert all(steps.extreme(ev, f) != Config(1, gpus=8) for f in ev.models)
    assert Config(1, gpus=8) in steps.open_neighbours(ev, ev.closest.config)
    strategy = SLASearchStrategy()
    assert strategy.next_config(h) == Config(1, gpus=8)
    assert not strategy.settled(h)
    # measured and missed: now the verdict may come
    h.add(
        TrialRecord(
            7,
            Config(1, gpus=8),
            _ok(Config(1, gpus=8), 11.0),
            goal.judge(Config(1, gpus=8), _ok(Config(1, gpus=8), 11.0)),
        )
    )
    assert strategy.next_config(h) is None
    assert strategy.settled(h)


def test_axis_neighbours_cover_every_axis_and_skip_what_cannot_run() -> None:
    """GPUs +-1, +-2, x2 and /2; micro-batch x2 and /2; precision; sharding; checkpointing
    only where the plain config runs out of memory (there in place of it)."""
    space = SearchSpace(
        micro_batches=(1, 2, 4, 8),
        gpus=tuple(range(1, 9)),
        shardings=("ddp", "fsdp"),
        precisions=("fp32", "bf16"),
        activation_checkpointing=(False, True),
    )
    goal = Goal("throughput", floor=1e9)
    c = Config(4, gpus=3)
    h = _history(
        space,
        goal,
        {c: _ok(c, 10.0), Config(8, gpus=3): Measurement("oom")},
    )
    near = steps.axis_neighbours(Evidence.build(h), c)
    assert {n.gpus for n in near if n.micro_batch == 4 and n.precision == "fp32"} >= {
        1,
        2,
        4,
        5,
        6,
    }
    assert Config(2, gpus=3) in near
    assert Config(8, gpus=3, activation_checkpointing=True) in near  # fp32 8 ran out of memory
    assert Config(8, gpus=3) not in near
    assert Config(4, gpus=3, precision="bf16") in near
    assert Config(4, gpus=3, sharding="fsdp") in near
    assert Config(4, gpus=3, activation_checkpointing=True) not in near  # it only adds work


@pytest.mark.parametrize("seed", [1, 6, 16, 26])
def test_an_infeasible_verdict_leaves_no_neighbour_of_the_closest_open(seed: int) -> None:
    """On unseen sharding-only tables (FSDP fits from 4-8 GPUs), every SLA: a feasible one is
    never called infeasible, and an infeasible verdict comes only after the closest config's
    neighbours on every axis were measured."""
    table = unseen_table(seed)
    for _, goal in unseen_slas(table):
        tuner = Tuner(
            table.space,
            goal,
            table.evaluator(),
            SLASearchStrategy(),
            max_trials=2 * table.space.size,
        )
        result = tuner.run()
        if optimum(table, goal) is not None:
            assert result.status == "feasible"
            continue
        ev = Evidence.build(result.history)
        assert ev.closest is not None
        assert steps.open_neighbours(ev, ev.closest.config) == []


def _settings_table() -> tuple[SearchSpace, TableEvaluator]:
    """A job with a script setting ``fused`` (``false`` first: the default) that makes every
    step 10% faster, bf16 20% faster than fp32, 1-2 GPUs."""
    space = SearchSpace(
        micro_batches=(1, 2, 4, 8, 16),
        gpus=(1, 2),
        precisions=("fp32", "bf16"),
        settings=(("fused", ("false", "true")),),
    )
    rows = {}
    for c in space.configs():
        step = 0.01 + 0.002 * c.micro_batch * c.grad_accum + (0.004 if c.gpus > 1 else 0.0)
        step *= 0.8 if c.precision == "bf16" else 1.0
        step *= 0.9 if c.script_settings().get("fused") else 1.0
        rows[c] = _ok(c, step * 1000.0)
    return space, TableEvaluator(rows, DeviceCaps(precisions=space.precisions, max_gpus=2))


@pytest.mark.parametrize(
    "goal", [Goal("throughput", floor=100.0), Goal("latency", ceiling_ms=30.0)], ids=str
)
def test_a_teams_own_settings_come_after_the_batch_and_precision_and_are_learned_once(
    goal: Goal,
) -> None:
    """The budget goes by expected effect: the first run with the team's setting changed comes
    after the batch split (three micro-batches) and the other precision were measured; once
    its effect is measured in one family it is carried to the others by a prior (not walked
    in each), and the best config has it."""
    space, evaluator = _settings_table()
    result = Tuner(space, goal, evaluator, SLASearchStrategy(), patience=10).run()
    runs = [r.config for r in result.history.records if r.source == "measured"]
    first_set = next(i for i, c in enumerate(runs) if c.script_settings().get("fused"))
    before = runs[:first_set]
    assert any(c.precision == "bf16" for c in before)
    assert len({c.micro_batch for c in before}) >= 3
    # the fused bf16 family was never walked from its foot: it entered with the prior
    fused_bf16 = [c for c in runs if c.script_settings().get("fused") and c.precision == "bf16"]
    assert fused_bf16 and min(c.micro_batch for c in fused_bf16) > 1
    assert result.best is not None
    assert result.best.config.script_settings().get("fused")
    assert result.best.verdict.value == optimum_of(space, evaluator, goal)


def optimum_of(space: SearchSpace, evaluator: TableEvaluator, goal: Goal) -> float:
    """The best feasible value of the table."""
    values = [v.value for c in space.configs() if (v := goal.judge(c, evaluator.rows[c])).feasible]
    return min(values) if goal.direction == "minimize" else max(values)
