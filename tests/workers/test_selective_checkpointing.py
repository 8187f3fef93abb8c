"""Selective activation checkpointing (issue 37): a share of the workload's blocks recomputed,
between none and all in memory (bytes saved for the backward) and in time (the forward's
FLOPs run again in the backward), counted exactly rather than timed."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from torch.utils.flop_counter import FlopCounterMode

from workers.config import HarnessConfig
from workers.errors import HarnessConfigError
from workers.harness import Harness
from workers.optimizations import apply_activation_checkpointing, checkpointed_blocks
from workers.workloads.registry import build_workload

GPT = {"n_layer": 4, "d_model": 32, "n_head": 2, "seq_len": 16, "vocab": 64}


def _step_costs(setting: bool | float) -> tuple[int, int]:
    """Bytes saved for the backward, and FLOPs, of one forward and backward of a 4-block gpt."""
    workload = build_workload("gpt", GPT, seed=0)
    apply_activation_checkpointing(checkpointed_blocks(list(workload.blocks), setting))
    batch = workload.make_batch(0, 8)
    saved = 0

    def pack(t: torch.Tensor) -> Any:
        nonlocal saved
        saved += t.numel() * t.element_size()
        return t

    counter = FlopCounterMode(display=False)
    with counter, torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        workload.loss(workload.model, batch).backward()
    return saved, counter.get_total_flops()


def test_a_share_of_the_blocks_is_between_none_and_all_in_memory_and_in_compute() -> None:
    none, half, every = (_step_costs(s) for s in (False, 0.5, True))
    assert none[0] > half[0] > every[0]  # activations kept for the backward
    assert none[1] < half[1] < every[1]  # the recomputed forwards' FLOPs


@pytest.mark.parametrize(
    ("setting", "count"), [(False, 0), (0.25, 1), (0.5, 2), (0.6, 3), (True, 4)]
)
def test_the_first_blocks_by_share_are_recomputed(setting: bool | float, count: int) -> None:
    blocks = [torch.nn.Linear(2, 2) for _ in range(4)]
    assert checkpointed_blocks(blocks, setting) == blocks[:count]


def test_a_harness_run_recomputes_only_its_share_of_the_blocks() -> None:
    h = Harness(
        HarnessConfig(
            workload="gpt", workload_args=GPT, micro_batch=4, steps=1, activation_checkpointing=0.5
        )
    )
    h.run()
    wrapped = [hasattr(b.forward, "__wrapped__") for b in h.workload.blocks]
    assert wrapped == [True, True, False, False]


@pytest.mark.parametrize("bad", [1.5, -0.1, "half"])
def test_a_share_outside_zero_to_one_is_refused(bad: Any) -> None:
    with pytest.raises(HarnessConfigError, match="activation_checkpointing"):
        HarnessConfig(workload="gpt", activation_checkpointing=bad)
