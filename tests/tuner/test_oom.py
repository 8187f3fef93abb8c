"""Out of memory: recognised, bisected, never exceeded."""

from __future__ import annotations

import errno

import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from orchestrator.tuner.evaluators import TableEvaluator
from orchestrator.tuner.objective import Goal, Measurement
from orchestrator.tuner.oom import FitFrontier, is_oom
from orchestrator.tuner.space import Config, DeviceCaps, SearchSpace
from orchestrator.tuner.strategies import STRATEGIES
from orchestrator.tuner.tuner import Tuner
from workers.errors import CommandError
from workers.sandbox import OutOfMemoryError


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


def test_out_of_memory_on_the_cpu_is_recognised_as_on_a_gpu() -> None:
    """Torch's CPU allocator failing for real (more than any host's address space), an
    ``ENOMEM`` (a fork or a mapping refused), the sandbox's error for a process the kernel's
    OOM killer ended, and a command job's failure whose last output names the allocator's
    message."""
    try:
        torch.empty(1 << 50, dtype=torch.uint8)
    except RuntimeError as err:
        assert "DefaultCPUAllocator" in str(err)
        assert is_oom(err)
    else:
        raise AssertionError("a petabyte was allocated")
    assert is_oom(OSError(errno.ENOMEM, "Cannot allocate memory"))
    assert not is_oom(OSError(errno.EAGAIN, "Resource temporarily unavailable"))
    assert is_oom(OutOfMemoryError("out of memory: ... the kernel killed one (exit code -9)"))
    said = (
        "the command exited with code 1: python train.py; last output: RuntimeError: [enforce "
        "fail at alloc_cpu.cpp:127] err == 0. DefaultCPUAllocator: can't allocate memory"
    )
    assert is_oom(CommandError(said))
    assert is_oom(CommandError("... last output: OSError: [Errno 12] Cannot allocate memory"))
    assert not is_oom(CommandError("the command exited with code 1: ... disk full"))


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
