"""Out of memory: recognised, bisected, never exceeded."""

from __future__ import annotations

import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from orchestrator.tuner.evaluators import TableEvaluator
from orchestrator.tuner.objective import Goal, Measurement
from orchestrator.tuner.oom import FitFrontier, is_oom
from orchestrator.tuner.space import Config, DeviceCaps, SearchSpace
from orchestrator.tuner.strategies import STRATEGIES
from orchestrator.tuner.tuner import Tuner


def test_oom_errors_are_recognised() -> None:
    assert is_oom(torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2 GiB"))
    assert is_oom(RuntimeError("CUDA error: out of memory"))
    assert is_oom(MemoryError())
    try:
        try:
            raise MemoryError
        except MemoryError as inner:
            raise ValueError("wrapped") from inner
    except ValueError as err:
        assert is_oom(err)
    assert not is_oom(RuntimeError("shape mismatch"))
    assert not is_oom(ValueError("out of range"))


@settings(max_examples=40, deadline=None)
@given(n=st.integers(1, 24), cap=st.integers(0, 30), name=st.sampled_from(["sla", "heuristic"]))
def test_bisection_finds_the_largest_fitting_micro_batch(n: int, cap: int, name: str) -> None:
    """Synthetic memory model: micro-batch index i fits iff i <= cap; throughput grows with the
    micro-batch, so the best config is the largest that fits."""
    ladder = tuple(2**i for i in range(n))
    rows = {
        Config(mb): Measurement(
            "ok",
            p50_ms=1.0 + mb,
            p95_ms=1.0 + mb,
            p99_ms=1.0 + mb,
            samples_per_s=1000.0 * mb / (1.0 + mb),
            cost_s=1.0,
        )
        for i, mb in enumerate(ladder)
        if i <= cap
    }
    table = TableEvaluator(rows, DeviceCaps(), oom_cost_s=1.0)
    result = Tuner(
        SearchSpace(micro_batches=ladder),
        Goal("latency", ceiling_ms=1e9),
        table,
        STRATEGIES.create(name),
        patience=None,
    ).run()
    assert result.best is not None
    assert result.best.config.micro_batch == ladder[min(cap, n - 1)]
    ooms = [r.config.micro_batch for r in result.history.records if r.measurement.status == "oom"]
    # Nothing at or above a known OOM is tried again: each OOM is below the previous one.
    assert ooms == sorted(set(ooms), reverse=True)
    assert result.trials <= 2 * max(n, 2).bit_length() + 3


def test_frontier_rules_out_larger_micro_batches_with_the_same_memory_settings() -> None:
    f = FitFrontier()
    f.record(Config(64), oom=True)
    f.record(Config(16), oom=False)
    assert f.will_oom(Config(128)) and f.will_oom(Config(64))
    assert not f.will_oom(Config(32))
    assert not f.will_oom(Config(128, activation_checkpointing=True))
    assert not f.will_oom(Config(128, precision="bf16"))
    assert f.limit(Config(1)) == 64
