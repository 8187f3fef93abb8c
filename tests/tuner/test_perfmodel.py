"""The step-time model the ``sla`` strategy and the profile fit to measured trials: what it
infers, and which way it settles what the data cannot tell apart (optimistically)."""

from __future__ import annotations

import pytest

from orchestrator.tuner.perfmodel import Sample, fit_step_model


def _t(m: int, a: int = 1, *, step: float = 0.004, micro: float = 0.0, per: float = 0.001) -> float:
    """A step of ``a`` micro-batches of ``m`` samples on one GPU."""
    return step + a * (micro + per * m)


def test_fits_a_linear_step_time_exactly() -> None:
    model = fit_step_model([Sample(1, m, 1, _t(m)) for m in (4, 16, 64)], gpus_per_node=4)
    assert model is not None
    for m in (8, 32, 128):
        assert model.step_s(1, m) == pytest.approx(_t(m), rel=1e-6)
    assert model.error == pytest.approx(0.0, abs=1e-9)


def test_accumulation_is_optimistic_until_measured_then_learned() -> None:
    """Without accumulation runs, the per-step constant may be all optimizer (amortised by
    accumulation) or all per-micro-batch: the model takes the first, so accumulation gets one
    trial. Once a run with accumulation shows the constant is per micro-batch, it is learned."""
    truth = {"step": 0.0, "micro": 0.004}  # accumulation gains nothing
    ones = [Sample(1, m, 1, _t(m, **truth)) for m in (4, 16, 64)]
    optimistic = fit_step_model(ones, gpus_per_node=4)
    assert optimistic is not None
    assert optimistic.samples_per_s(1, 16, 2) > 1.1 * optimistic.samples_per_s(1, 16, 1)

    learned = fit_step_model([*ones, Sample(1, 16, 2, _t(16, 2, **truth))], gpus_per_node=4)
    assert learned is not None
    assert learned.samples_per_s(1, 16, 2) == pytest.approx(learned.samples_per_s(1, 16, 1))


def test_time_per_sample_growing_with_the_micro_batch_needs_three_points() -> None:
    """Superlinear step time (throughput falls past 32): fitted once three micro-batches are
    measured, so the model stops sending the search to the largest micro-batch."""

    def t(m: int) -> float:
        return 0.002 + 0.001 * m + 0.00002 * m * m

    two = fit_step_model([Sample(1, m, 1, t(m)) for m in (8, 32)], gpus_per_node=4)
    assert two is not None
    # a line through the origin at best: throughput never falls with the micro-batch
    assert two.samples_per_s(1, 128) >= two.samples_per_s(1, 32) * (1 - 1e-9)
    three = fit_step_model([Sample(1, m, 1, t(m)) for m in (8, 32, 128)], gpus_per_node=4)
    assert three is not None
    assert three.samples_per_s(1, 64) < three.samples_per_s(1, 32)
    assert three.step_s(1, 64) == pytest.approx(t(64), rel=1e-6)


def test_micro_batches_spread_over_gpu_counts_do_not_make_a_curve() -> None:
    """Linear data with a sync cost, three micro-batches but on two lines (1 and 2 GPUs): the
    curve term stays off, so it cannot soak up the sync cost and price large micro-batches
    on 2 GPUs far too slow."""

    def t(g: int, m: int) -> float:
        return 0.004 + 0.001 * m + (0.01 if g > 1 else 0.0)

    samples = [Sample(1, 1, 1, t(1, 1)), Sample(1, 4, 1, t(1, 4)), Sample(2, 16, 1, t(2, 16))]
    model = fit_step_model(samples, gpus_per_node=4)
    assert model is not None
    assert model.step_s(2, 128) == pytest.approx(t(2, 128), rel=1e-3)


def test_unmeasured_node_counts_take_the_nearest_measured_sync() -> None:
    """4 GPUs a node. 1 node (2-4 GPUs) and 3 nodes measured, 3 nodes faster than 1: 2 nodes
    (between them) is as fast as the faster, 4 nodes (beyond them) as slow as the slowest
    below it, and nothing measured beyond one GPU means no sync at all."""

    def t(g: int) -> float:
        return 0.1 + (0.0 if g == 1 else {1: 0.05, 3: 0.02}[(g + 3) // 4])

    samples = [Sample(g, 8, 1, t(g)) for g in (1, 2, 3, 4, 9, 12)]
    model = fit_step_model(samples, gpus_per_node=4)
    assert model is not None
    for g in (2, 9):
        assert model.step_s(g, 8) == pytest.approx(t(g), rel=1e-6)
    assert model.step_s(6, 8) == pytest.approx(model.step_s(10, 8), rel=1e-6)  # 2 nodes = 3 nodes
    assert model.step_s(14, 8) == pytest.approx(0.15, rel=1e-6)  # 4 nodes = 1 node's 0.05

    alone = fit_step_model([Sample(1, m, 1, t(1)) for m in (8,)], gpus_per_node=4)
    assert alone is not None
    assert alone.step_s(16, 8) == pytest.approx(alone.step_s(1, 8))


def test_a_one_point_family_is_scaled_from_another_familys_shape() -> None:
    fp32 = fit_step_model([Sample(1, m, 1, _t(m)) for m in (4, 16, 64)], gpus_per_node=4)
    assert fp32 is not None
    bf16 = fp32.scaled_to(Sample(1, 64, 1, 2 * _t(64), pct_ratio=1.5))
    assert bf16.step_s(1, 16) == pytest.approx(2 * _t(16), rel=1e-6)
    assert bf16.latency_ms(1, 16) == pytest.approx(1.5 * 2 * _t(16) * 1e3, rel=1e-6)
