"""Synthetic tables for the tuner tests: every config's measurement known in advance."""

from __future__ import annotations

import math

from orchestrator.tuner.evaluators import TableEvaluator
from orchestrator.tuner.objective import Measurement
from orchestrator.tuner.space import Config, DeviceCaps, SearchSpace

CAPS = DeviceCaps(name="synthetic", kind="cuda", precisions=("fp32",), max_gpus=8, gpus_per_node=4)


def synthetic_space(max_gpus: int = 8) -> SearchSpace:
    """Micro-batch 1..256, 1..max_gpus GPUs, everything else pinned."""
    return SearchSpace(
        micro_batches=(1, 2, 4, 8, 16, 32, 64, 128, 256),
        gpus=tuple(range(1, max_gpus + 1)),
        gpus_per_node=4,
    )


def step_s(g: int, m: int) -> float:
    """A data-parallel step: 5 ms + 1 ms per sample, plus sync growing with GPUs."""
    sync = 0.0 if g == 1 else 0.004 + 0.001 * g + (0.01 if g > 4 else 0.0)
    return 0.005 + 0.001 * m + sync


def synthetic_table(mem_cap: int = 64, max_gpus: int = 8) -> TableEvaluator:
    """Configs above ``mem_cap`` samples per GPU are absent (out of memory)."""
    rows = {}
    for c in synthetic_space(max_gpus).configs():
        if c.micro_batch > mem_cap:
            continue
        t = step_s(c.gpus, c.micro_batch)
        ms = t * 1000
        rows[c] = Measurement(
            "ok",
            p50_ms=ms,
            p95_ms=ms * 1.1,
            p99_ms=ms * 1.2,
            samples_per_s=c.gpus * c.micro_batch / t,
            cost_s=10 + 20 * t,
        )
    return TableEvaluator(rows, CAPS, oom_cost_s=10)


def optimum(table: TableEvaluator, goal: object) -> tuple[float, Config] | None:
    """The best feasible (value, config) of a table under ``goal``."""
    best = None
    for c, m in table.rows.items():
        v = goal.judge(c, m)  # type: ignore[attr-defined]
        if v.feasible and (best is None or goal.better(v.value, best[0])):  # type: ignore[attr-defined]
            best = (v.value, c)
    assert best is None or math.isfinite(best[0])
    return best


def batch_space(*global_batches: int, max_gpus: int = 8) -> SearchSpace:
    """The synthetic space keeping a global batch (micro-batch x accumulation x GPUs): the
    splits of ``global_batches`` with accumulation up to 8."""
    full = SearchSpace(
        micro_batches=(1, 2, 4, 8, 16, 32, 64, 128, 256),
        grad_accums=(1, 2, 4, 8),
        gpus=tuple(range(1, max_gpus + 1)),
        gpus_per_node=4,
    )
    keep = [c for c in full.configs() if c.global_batch in global_batches]
    return SearchSpace(
        micro_batches=tuple(sorted({c.micro_batch for c in keep})),
        grad_accums=tuple(sorted({c.grad_accum for c in keep})),
        gpus=tuple(sorted({c.gpus for c in keep})),
        gpus_per_node=4,
        global_batches=tuple(sorted(global_batches)),
    )


def batch_table(space: SearchSpace, mem_cap: int = 16) -> TableEvaluator:
    """``step_s`` per micro-batch, times the accumulation (sync once per step); micro-batches
    above ``mem_cap`` run out of memory."""
    rows = {}
    for c in space.configs():
        if c.micro_batch > mem_cap:
            continue
        t = step_s(c.gpus, c.micro_batch) + (c.grad_accum - 1) * step_s(1, c.micro_batch)
        ms = t * 1000
        rows[c] = Measurement(
            "ok",
            p50_ms=ms,
            p95_ms=ms * 1.1,
            p99_ms=ms * 1.2,
            samples_per_s=c.global_batch / t,
            cost_s=10 + 20 * t,
        )
    return TableEvaluator(rows, CAPS, oom_cost_s=10)
