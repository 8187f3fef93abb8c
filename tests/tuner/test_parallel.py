"""Parallel tuning: batches of trials at once choose what one at a time chooses, pack GPUs,
and survive a failing trial (pure: table lookups, no Ray)."""

from __future__ import annotations

from collections.abc import Sequence

import pytest
import torch

from bench.tuner.run import slas
from bench.tuner.tables import pollux_table
from orchestrator.tuner.evaluators.base import Evaluator, EvaluatorLost
from orchestrator.tuner.evaluators.table import TableEvaluator
from orchestrator.tuner.objective import Goal, Measurement
from orchestrator.tuner.space import Config, DeviceCaps, SearchSpace
from orchestrator.tuner.strategies import STRATEGIES
from orchestrator.tuner.tuner import Tuner, TuneResult
from tests.tuner.conftest import synthetic_space, synthetic_table


class _Recording(Evaluator):
    """A table whose batches are recorded, and whose ``fail`` configs raise."""

    def __init__(self, table: TableEvaluator, fail: dict[Config, Exception] | None = None):
        self.table = table
        self.caps = table.caps
        self.fail = fail or {}
        self.batches: list[list[Config]] = []

    def evaluate(self, config: Config) -> Measurement:
        if config in self.fail:
            raise self.fail[config]
        return self.table.evaluate(config)

    def evaluate_batch(self, configs: Sequence[Config]) -> list[Measurement | BaseException]:
        self.batches.append(list(configs))
        return super().evaluate_batch(configs)


def _tune(
    table: TableEvaluator, space: SearchSpace, goal: Goal, strategy: str, k: int, **kw: object
) -> TuneResult:
    return Tuner(
        space,
        goal,
        table,
        STRATEGIES.create(strategy),
        free_gpus=k,
        **kw,  # type: ignore[arg-type]
    ).run()


@pytest.mark.parametrize("strategy", ["sla", "grid"])
@pytest.mark.parametrize("sla", [1, 3, 6, 7])
def test_a_parallel_run_chooses_the_sequential_runs_config(strategy: str, sla: int) -> None:
    """On a deterministic table (Pollux yolov3: real step times, one value per config), under
    the benchmark's floors (p75, 98 % of the best) and ceilings (p50, p10), every k picks the
    config the sequential run picks, in less wall time than it spends."""
    table = pollux_table("yolov3")
    goal = slas(table)[sla][1]
    one = Tuner(
        table.space,
        goal,
        table.evaluator(),
        STRATEGIES.create(strategy),
        patience=None if strategy == "grid" else 10,
        prune=strategy == "sla",  # the grid is the ground truth: every config measured
    ).run()
    assert one.chosen is not None
    assert one.wall_s == pytest.approx(one.cost_s)
    for k in (2, 4, 8):
        par = Tuner(
            table.space,
            goal,
            table.evaluator(),
            STRATEGIES.create(strategy),
            patience=None if strategy == "grid" else 10,
            prune=strategy == "sla",
            free_gpus=k,
            trial_gpus=lambda c: 1,  # k trials at once, whatever their GPU count
        ).run()
        assert par.status == one.status
        assert par.chosen is not None and par.chosen.config == one.chosen.config, k
        assert par.wall_s < one.wall_s  # simulated: a batch takes its longest trial


def test_the_sequential_path_is_unchanged_at_one_gpu() -> None:
    """k = 1 runs one trial at a time, in the order the strategy proposes them."""
    ev = _Recording(synthetic_table())
    res = _tune(ev.table, synthetic_space(), Goal("throughput", floor=5000.0), "sla", 1)
    assert ev.batches == []  # the single-trial path: no batch at all
    seq = _Recording(synthetic_table())
    res4 = _tune(seq.table, synthetic_space(), Goal("throughput", floor=5000.0), "sla", 1)
    assert [r.config for r in res.history.records] == [r.config for r in res4.history.records]


def test_batches_pack_trials_by_their_gpus() -> None:
    """A batch's GPU counts add up to at most k, and several trials do share a batch."""
    ev = _Recording(synthetic_table())
    res = Tuner(
        synthetic_space(),
        Goal("throughput", floor=5000.0),
        ev,
        STRATEGIES.create("grid"),
        patience=None,
        prune=False,
        free_gpus=8,
    ).run()
    assert res.best is not None
    assert all(sum(c.gpus for c in b) <= 8 for b in ev.batches)
    assert max(len(b) for b in ev.batches) > 1
    assert all(len(set(b)) == len(b) for b in ev.batches)  # never the same config twice
    measured = [r.config for r in res.history.records if r.source == "measured"]
    assert len(measured) == len(set(measured)) == synthetic_space().size


def test_a_batch_with_an_oom_trial_completes() -> None:
    """One trial of a batch runs out of memory and another crashes: both are recorded as
    such, the others of the batch keep their measurements, and the search goes on."""
    space = SearchSpace(micro_batches=(1, 2, 4, 8, 16, 32))
    rows = {
        c: Measurement("ok", p95_ms=1.0 + c.micro_batch, samples_per_s=10.0 * c.micro_batch)
        for c in space.configs()
    }
    oom, crash = Config(micro_batch=16), Config(micro_batch=4)
    ev = _Recording(
        TableEvaluator(rows, DeviceCaps()),
        {oom: torch.OutOfMemoryError("CUDA out of memory"), crash: ValueError("bad shape")},
    )
    res = Tuner(
        space, Goal("throughput", floor=50.0), ev, STRATEGIES.create("grid"), free_gpus=8
    ).run()
    assert ev.batches[0] and {oom, crash} <= set(ev.batches[0])  # one batch of all six
    status = {r.config: r.measurement.status for r in res.history.records}
    assert status[oom] == "oom" and status[crash] == "error"
    assert sum(s == "ok" for s in status.values()) == 4
    assert res.best is not None and res.best.config == Config(micro_batch=32)
    assert res.status == "feasible"


class _Lost(_Recording):
    def evaluate_batch(self, configs: Sequence[Config]) -> list[Measurement | BaseException]:
        out = super().evaluate_batch(configs)
        return [EvaluatorLost("the tuning gang does not answer"), *out[1:]]


def test_a_lost_evaluator_in_a_batch_stops_the_tuner() -> None:
    ev = _Lost(synthetic_table())
    tuner = Tuner(
        synthetic_space(),
        Goal("throughput", floor=5000.0),
        ev,
        STRATEGIES.create("grid"),
        free_gpus=4,
    )
    with pytest.raises(EvaluatorLost):
        tuner.run()
    assert not any(t.state.is_finished() for t in tuner.study.trials)


def test_a_strategy_that_waits_runs_one_trial_at_a_time() -> None:
    """The heuristic's line search needs each result before the next point: batches of one."""
    ev = _Recording(synthetic_table())
    res = _tune(ev.table, synthetic_space(), Goal("throughput", floor=5000.0), "heuristic", 4)
    assert res.trials > 1
    ev2 = _Recording(synthetic_table())
    Tuner(
        synthetic_space(),
        Goal("throughput", floor=5000.0),
        ev2,
        STRATEGIES.create("heuristic"),
        free_gpus=4,
    ).run()
    assert ev2.batches and all(len(b) == 1 for b in ev2.batches)


def test_sampler_proposals_fill_a_batch() -> None:
    """TPE asked k times before any tell (constant liar): one batch holds k distinct configs,
    and a repeat of a running config is answered by that trial."""
    ev = _Recording(synthetic_table())
    res = Tuner(
        synthetic_space(),
        Goal("throughput", floor=5000.0),
        ev,
        STRATEGIES.create("tpe"),
        free_gpus=16,
        trial_gpus=lambda c: 1,
        max_trials=40,
    ).run()
    assert len(ev.batches[0]) > 1
    assert all(len(set(b)) == len(b) for b in ev.batches)
    assert len(res.history) <= 40


def test_the_parallel_benchmark_runs(capsys: pytest.CaptureFixture[str]) -> None:
    """``bench.tuner.parallel --smoke``: one table, two SLAs, k = 1, 2, 4, 8."""
    from bench.tuner.parallel import main

    assert main(["--smoke"]) == 0
    assert "| sla | 8 |" in capsys.readouterr().out
