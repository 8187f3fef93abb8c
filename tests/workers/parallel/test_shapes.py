"""The model shape the control plane computes from a built-in's arguments is the one the
harness reads off the built model, so a plan refused at submission is the plan the harness
would refuse at start, by the same rule (``split_problems``)."""

from __future__ import annotations

from typing import Any

import pytest

from workers.parallel.plan import ModelShape, Plan, divisors, split_problems
from workers.parallel.recipe import shape_of
from workers.workloads.registry import build_workload
from workers.workloads.shapes import builtin_shape


@pytest.mark.parametrize(
    ("name", "args"),
    [
        ("gpt", {}),
        ("gpt", {"n_layer": 3, "d_model": 48, "n_head": 6, "seq_len": 8, "vocab": 32}),
        ("mlp", {}),
        ("mlp", {"in_features": 7, "hidden": 5, "n_layer": 0, "classes": 3}),
    ],
)
def test_the_computed_shape_is_the_built_models(name: str, args: dict[str, Any]) -> None:
    assert builtin_shape(name, args) == shape_of(build_workload(name, args, seed=0))


@pytest.mark.parametrize("name", ["cnn", "images"])
def test_a_builtin_without_layout_splits_nothing(name: str) -> None:
    shape = builtin_shape(name, {})
    assert shape is not None and shape.blocks is None
    assert shape_of(build_workload(name, {}, seed=0)).blocks is None


def test_arguments_the_worker_refuses_give_no_shape() -> None:
    assert builtin_shape("gpt", {"d_model": 30, "n_head": 4}) is None
    assert builtin_shape("gpt", {"layers": 2}) is None
    assert builtin_shape("infer", {}) is None


@pytest.mark.parametrize(
    ("plan", "message"),
    [
        (Plan(pp=3), "x.pp must divide the model's 4 blocks, got 3 (allowed: 1, 2, 4)"),
        (Plan(tp=4), "x.tp must divide the model's 6 attention heads, got 4 (allowed: 1, 2, 3, 6)"),
        (Plan(tp=2), "x.tp must divide up's 9 features, got 2"),
    ],
)
def test_the_split_rule_names_the_field_and_what_it_may_be(plan: Plan, message: str) -> None:
    shape = ModelShape(blocks=4, heads=6, widths={"up": 9, "down": 12})
    assert split_problems(plan, shape, where="x") == [message]
    assert split_problems(Plan(tp=3, pp=2), ModelShape(4, 6, {"up": 9})) == []
    assert divisors(12) == [1, 2, 3, 4, 6, 12]


def test_a_model_without_layout_takes_data_parallel_plans_only() -> None:
    assert split_problems(Plan(dp=4, zero=3), ModelShape()) == []
    [message] = split_problems(Plan(tp=2), ModelShape(), workload="'mlp'")
    assert "'mlp' does not: use dp and zero only" in message


@pytest.mark.parametrize(
    ("gpus", "tp", "pp", "zero", "dp"),
    [(4, 2, 1, 3, 2), (4, 2, 2, 0, 1), (4, 1, 1, 1, 4), (3, 2, 1, 0, None), (2, 2, 1, 3, None)],
)
def test_a_plan_on_a_gpu_count(gpus: int, tp: int, pp: int, zero: int, dp: int | None) -> None:
    plan = Plan.on(gpus, tp, pp, zero)
    assert (plan.dp if plan else None) == dp
    assert Plan.on(4, 2, 1, 0) is None  # ZeRO 0 runs DDP: a 1-D plan only
