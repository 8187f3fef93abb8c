"""A training step's time in parts (issue 37): what each part is, from fixed marks, and a real
run's parts adding up to its timed step."""

from __future__ import annotations

import pytest

from tests.workers.helpers import tiny
from workers.harness import Harness
from workers.step_parts import StepParts, split


def test_with_accumulation_the_sync_is_the_last_micro_batch_over_the_others() -> None:
    spans = [("zero_grad", 0.001), ("micro", 0.010), ("micro", 0.012), ("synced", 0.020)]
    spans.append(("optimizer", 0.004))
    parts = split(spans, step_s=0.050)
    assert parts.comm == pytest.approx(0.020 - 0.011)
    assert parts.compute == pytest.approx(0.010 + 0.012 + 0.011)
    assert parts.optimizer == pytest.approx(0.004)
    assert parts.compute + parts.comm + parts.optimizer + parts.other == pytest.approx(0.050)


def test_a_sync_hidden_by_the_backward_is_no_exposed_time() -> None:
    parts = split([("micro", 0.010), ("synced", 0.009), ("optimizer", 0.001)], step_s=0.020)
    assert parts.comm == 0.0 and parts.compute == pytest.approx(0.019)


def test_without_accumulation_the_sync_is_not_told_apart() -> None:
    parts = split([("zero_grad", 0.0), ("synced", 0.02), ("optimizer", 0.005)], step_s=0.03)
    assert parts == StepParts(compute=0.02, comm=None, optimizer=0.005, other=pytest.approx(0.005))


def test_one_replica_has_no_sync_and_a_pipeline_keeps_its_sends_inside() -> None:
    one = split([("one", 0.01), ("one", 0.01), ("optimizer", 0.002)], step_s=0.025)
    assert one.comm == 0.0 and one.compute == pytest.approx(0.02)
    piped = split([("pipeline", 0.03), ("optimizer", 0.002)], step_s=0.035)
    assert piped.comm is None and piped.compute == pytest.approx(0.03)


def test_a_real_runs_parts_add_up_to_its_timed_step() -> None:
    """One replica, accumulation 2, the MLP: forward and backward, the optimizer and the rest
    add up to the mean timed step (``compute_ms``); nothing to sync on one replica."""
    result = Harness(tiny("mlp", micro_batch=8, grad_accum=2, steps=6)).run()
    parts = [result.fwd_bwd_ms, result.comm_ms, result.optimizer_ms, result.step_other_ms]
    assert all(p is not None and p >= 0 for p in parts), parts
    assert result.comm_ms == 0.0
    assert sum(p or 0.0 for p in parts) == pytest.approx(result.compute_ms, rel=1e-6)
    # the marked phases hold the step's work: the unmarked rest is what is left over
    assert result.fwd_bwd_ms is not None and result.step_other_ms is not None
    assert result.step_other_ms < result.fwd_bwd_ms
