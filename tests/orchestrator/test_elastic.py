"""Elastic sizes: the global batch is kept, and the speedup curve comes from measurements."""

from __future__ import annotations

import pytest

from orchestrator import elastic
from orchestrator.spec import JobSpec, parse_spec


def _spec(lo: int = 1, hi: int = 4, micro: int = 8, accum: int = 1, dp: int | None = 2) -> JobSpec:
    return parse_spec(
        {
            "name": "e",
            "team": "t",
            "class": "bulk",
            "workload": "mlp",
            "sla": {"throughput": {"min_samples_per_s": 1}},
            "resources": {"gpus": {"min": lo, "max": hi}},
            "run": {"steps": 10, "micro_batch": micro, "grad_accum": accum, "data_parallel": dp},
        }
    )


@pytest.mark.parametrize(("gpus", "micro", "accum"), [(1, 8, 2), (2, 8, 1), (4, 4, 1)])
def test_resize_keeps_the_global_batch(gpus: int, micro: int, accum: int) -> None:
    spec = _spec()
    got = elastic.resized_spec(spec, gpus)
    assert got is not None
    assert (got.run.micro_batch, got.run.grad_accum, got.gpus) == (micro, accum, gpus)
    assert elastic.global_batch(got) == elastic.global_batch(spec) == 16
    assert got.steps_for() == spec.steps_for()


def test_a_service_resized_changes_its_replicas_never_its_batch() -> None:
    """A service tuned to 2 replicas of max batch 16 and placed on 1 GPU runs one replica of
    max batch 16 (it used to become accumulation 2, which no inference step takes)."""
    spec = parse_spec(
        {
            "name": "s",
            "team": "t",
            "class": "interactive",
            "workload": {"name": "infer", "args": {"model": "mlp"}},
            "sla": {"latency": {"percentile": 99, "max_ms": 20}},
            "resources": {"gpus": {"min": 1, "max": 3}},
            "run": {"duration_s": 5, "micro_batch": 16, "data_parallel": 2},
            "serve": {"rate_rps": 100, "endpoint": False},
        }
    )
    for gpus in (1, 3):
        got = elastic.resized_spec(spec, gpus)
        assert got is not None
        assert (got.run.micro_batch, got.run.grad_accum, got.gpus) == (16, 1, gpus)
    assert elastic.resized_spec(spec, 4) is None  # outside its range


def test_sizes_that_cannot_keep_the_batch_are_not_used() -> None:
    spec = _spec(lo=1, hi=4)  # global batch 16: 3 GPUs cannot split it
    assert elastic.resized_spec(spec, 3) is None
    assert elastic.resized_spec(spec, 5) is None  # outside the range
    assert elastic.feasible_sizes(spec) == [1, 2, 4]


def test_the_micro_batch_never_grows_past_the_requested_one() -> None:
    spec = _spec(lo=1, hi=2, micro=6, accum=1, dp=2)  # 12 samples a step
    one = elastic.resized_spec(spec, 1)
    assert one is not None and (one.run.micro_batch, one.run.grad_accum) == (6, 2)


def test_speedup_curve_interpolates_and_extrapolates() -> None:
    spec = _spec(lo=1, hi=4)
    assert elastic.speedup_curve(spec, {}) == (1.0, 2.0, 3.0, 4.0)  # nothing measured: linear
    # beyond the largest measured size, at the efficiency seen there (75 per GPU)
    assert elastic.speedup_curve(spec, {1: 100.0, 2: 150.0}) == (100.0, 150.0, 225.0, 300.0)
    # between measured sizes, interpolated; below the smallest, linear down
    assert elastic.speedup_curve(spec, {2: 150.0, 4: 250.0}) == (75.0, 150.0, 200.0, 250.0)


def test_a_resize_keeps_the_plans_model_axes_and_its_batch() -> None:
    spec = parse_spec(
        {
            "name": "e",
            "team": "t",
            "class": "bulk",
            "workload": "gpt",
            "sla": {"throughput": {"min_samples_per_s": 1}},
            "resources": {"gpus": {"min": 2, "max": 8}},
            "run": {
                "steps": 10,
                "micro_batch": 8,
                "data_parallel": 4,
                "plan": {"dp": 2, "tp": 2, "zero": 3, "offload": True},
            },
        }
    )
    assert elastic.global_batch(spec) == 16
    grown = elastic.resized_spec(spec, 8)
    assert grown is not None and grown.run.plan is not None
    assert (grown.run.plan.dp, grown.run.plan.tp, grown.run.plan.zero) == (4, 2, 3)
    assert elastic.global_batch(grown) == 16 and grown.run.micro_batch == 4
    shrunk = elastic.resized_spec(spec, 2)  # one replica: nothing left to shard or offload
    assert shrunk is not None and shrunk.run.plan is not None
    assert (shrunk.run.plan.dp, shrunk.run.plan.zero, shrunk.run.plan.offload) == (1, 0, False)
    assert elastic.global_batch(shrunk) == 16 and shrunk.run.grad_accum == 2
    assert elastic.resized_spec(spec, 3) is None  # tp 2 does not divide 3 GPUs
