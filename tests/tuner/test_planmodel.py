"""The plan model: its terms (pipeline bubble, tensor-parallel traffic, ZeRO sync), its fit,
the memory filter, and its choice on a grid of plans recorded on CPU ranks."""

from __future__ import annotations

import itertools

import pytest

from orchestrator.tuner.planmodel import PlanModel, PlanSample, fit_plan_model, fits, state_bytes
from orchestrator.tuner.space import Config, SearchSpace

COMPUTE_ONLY = PlanModel((0.0, 1.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0))


@pytest.mark.parametrize(("stages", "micro_batches"), [(2, 1), (2, 4), (4, 4), (4, 16)])
def test_the_pipeline_bubble_is_gpipes(stages: int, micro_batches: int) -> None:
    c = Config(4, grad_accum=micro_batches, gpus=stages, pp=stages)
    busy = micro_batches / stages  # each stage's share of the work, without a bubble
    idle = 1 - busy / COMPUTE_ONLY.step_s(c)
    assert idle == pytest.approx((stages - 1) / (micro_batches + stages - 1))


def test_the_fit_recovers_known_constants_across_plans() -> None:
    truth = PlanModel((0.01, 0.002, 0.003, 0.0001, 0.004, 0.0005, 0.0002, 0.02))
    space = SearchSpace(
        micro_batches=(1, 2, 4, 8),
        grad_accums=(1, 2, 4, 8),
        gpus=(1, 2, 4),
        plans=((1, 1, 0), (1, 1, 1), (1, 1, 3), (2, 1, 0), (2, 1, 3), (1, 2, 0), (2, 2, 0)),
        global_batches=(16,),
    )
    samples = [PlanSample(c, truth.step_s(c), 1000 * truth.step_s(c)) for c in space.configs()]
    model = fit_plan_model(samples)
    assert model is not None and model.error < 1e-6
    for c in space.configs():
        assert model.step_s(c) == pytest.approx(truth.step_s(c), rel=1e-6)


def test_plans_that_cannot_fit_are_never_chosen() -> None:
    params = 1_000_000_000  # 16 GB of fp32 state with AdamW on one rank
    ddp, zero3 = Config(8, gpus=8, zero=0), Config(8, gpus=8, zero=3)
    assert state_bytes(ddp, params) == 16e9 and state_bytes(zero3, params) == 2e9
    assert not fits(ddp, params, 8e9) and fits(zero3, params, 8e9)
    model = PlanModel((0.0, 1.0, 0.0, 0.0, 0.0, 0.0, 0.0, 1.0))  # DDP syncs least: fastest
    candidates = [Config(8, gpus=8, zero=z) for z in (0, 1, 2, 3)]
    assert model.best(candidates) == ddp
    assert model.best(candidates, params=params, memory_bytes=8e9) == Config(8, gpus=8, zero=2)
    assert model.best(candidates, params=params, memory_bytes=1e9) is None


def test_the_models_choice_on_the_recorded_grid_of_plans() -> None:
    """On the plans recorded on CPU ranks (bench/plans), the model fitted to one config per
    plan (and a second one-GPU point) picks the table's best config under a throughput and a
    latency SLA with its first trial: fewer trials than DeepSpeed-style staged search."""
    from bench.plans.run import load, model_order, slas, staged_order, trials_to_within

    rows, space = load()
    seeds = len({(c.gpus, c.tp, c.pp, c.zero) for c in rows}) + 1
    for score, ceiling in slas(rows).values():
        best = max(rows, key=score)
        order = list(itertools.islice(model_order(rows, space, ceiling), seeds + 1))
        assert score(order[seeds]) >= 0.97 * score(best), order[seeds]
        staged = trials_to_within(staged_order(rows, space, score), score, score(best), len(rows))
        assert seeds + 1 < staged
