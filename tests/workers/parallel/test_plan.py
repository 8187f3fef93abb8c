"""A plan's rules, refused at the edge with the field to change (pure: no process group)."""

from __future__ import annotations

import re
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from workers.config import HarnessConfig
from workers.errors import HarnessConfigError
from workers.harness import Harness
from workers.parallel import Plan

GPT = {"n_layer": 2, "d_model": 32, "n_head": 4, "seq_len": 16, "vocab": 64}


def _harness(plan: dict[str, Any], world: int, workload: str = "gpt", **kw: Any) -> Harness:
    args = GPT if workload == "gpt" else {}
    config = HarnessConfig(workload=workload, workload_args=args, steps=1, plan=plan, **kw)
    return Harness(config, rank=0, world_size=world, init_method="file:///nonexistent")


def test_one_replica_has_nothing_to_shard() -> None:
    assert Plan(tp=2, zero=3).zero == 0
    assert Plan(dp=2, zero=3).zero == 3
    assert Plan(dp=2, tp=2, pp=2).world == 8


@pytest.mark.parametrize(
    ("plan", "kw", "message"),
    [
        (Plan(dp=0), {}, "plan.dp must be an integer >= 1, got 0"),
        (Plan(dp=2, zero=4), {}, "plan.zero must be one of 0, 1, 2, 3, got 4"),
        (Plan(dp=2, zero=2, offload=True), {}, "plan.offload needs zero 3"),
        (Plan(dp=2, tp=2, zero=1), {}, "plan.zero must be 2 or 3 when dp > 1"),
        (Plan(dp=2, tp=2, zero=3), {"world": 8}, "must equal the GPU count 8, got 2 x 2 x 1 = 4"),
    ],
)
def test_a_bad_plan_names_its_field(plan: Plan, kw: dict[str, Any], message: str) -> None:
    assert any(message in p for p in plan.problems(**kw))


@given(st.integers(1, 4), st.integers(1, 4), st.integers(1, 4), st.integers(0, 3), st.booleans())
def test_valid_plans_survive_a_round_trip(dp: int, tp: int, pp: int, zero: int, off: bool) -> None:
    plan = Plan(dp=dp, tp=tp, pp=pp, zero=zero, offload=off)
    assert Plan.from_dict(plan.to_dict()) == plan
    if not plan.problems(world=dp * tp * pp):
        assert plan.describe()


def test_the_config_refuses_an_unknown_plan_key() -> None:
    with pytest.raises(HarnessConfigError, match=r"unknown plan keys \['tensor'\]"):
        HarnessConfig(workload="gpt", steps=1, plan={"tensor": 2})
    with pytest.raises(HarnessConfigError, match=re.escape("plan.offload needs zero 3")):
        HarnessConfig(workload="gpt", steps=1, plan={"dp": 2, "offload": True})


@pytest.mark.parametrize(
    ("plan", "world", "workload", "message"),
    [
        ({"dp": 2, "tp": 2, "zero": 3}, 2, "gpt", "must equal the GPU count 2"),
        ({"tp": 3}, 3, "gpt", "plan.tp must divide the model's 4 attention heads, got 3"),
        ({"pp": 4}, 4, "gpt", "plan.pp must divide the model's 2 blocks, got 4 (allowed: 1, 2)"),
        ({"tp": 2}, 2, "mlp", "'mlp' does not: use dp and zero only"),
        ({"dp": 2, "zero": 3, "offload": True}, 2, "gpt", "plan.offload needs CUDA"),
    ],
)
def test_the_harness_refuses_a_plan_its_workload_cannot_run(
    plan: dict[str, Any], world: int, workload: str, message: str
) -> None:
    with pytest.raises(HarnessConfigError, match="invalid plan: .*" + re.escape(message)):
        _harness(plan, world, workload)


def test_the_global_batch_counts_replicas_only() -> None:
    h = _harness({"dp": 2, "tp": 2, "pp": 2, "zero": 3}, 8, micro_batch=4, grad_accum=2)
    assert h.global_batch == 4 * 2 * 2
    # the older shorthand: every rank a replica
    legacy = Harness(
        HarnessConfig(workload="gpt", workload_args=GPT, steps=1, sharding="fsdp"),
        rank=0,
        world_size=4,
        init_method="file:///nonexistent",
    )
    assert legacy.plan == Plan(dp=4, zero=3) and legacy.global_batch == 8 * 4
