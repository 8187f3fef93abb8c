"""The SLA as objective and constraints, on hand-made measurements."""

from __future__ import annotations

from typing import Any

import pytest

from orchestrator.spec import parse_spec
from orchestrator.tuner.objective import FAILED_COST, Goal, Measurement
from orchestrator.tuner.space import Config


def _m(rate: float, p95: float, **kw: Any) -> Measurement:
    return Measurement(
        "ok", p50_ms=p95 * 0.8, p95_ms=p95, p99_ms=p95 * 1.2, samples_per_s=rate, **kw
    )


def test_throughput_goal_is_gpu_seconds_per_sample_under_the_floor() -> None:
    goal = Goal("throughput", floor=100.0)
    assert goal.direction == "minimize"
    v = goal.judge(Config(16, gpus=4), _m(400.0, 50.0))
    assert v.feasible and v.value == pytest.approx(4 / 400.0)
    assert v.constraints == {"runs": -1.0, "throughput": pytest.approx(-3.0)}
    miss = goal.judge(Config(4, gpus=1), _m(80.0, 50.0))
    assert not miss.feasible
    assert miss.constraints["throughput"] == pytest.approx(0.2)
    assert miss.violation == pytest.approx(0.2)
    assert "80.0 samples/s at micro-batch 4, 1 GPU, fp32 < 100 samples/s floor" in miss.reason
    # Cheaper per sample wins, not faster.
    assert goal.better(1 / 200.0, 4 / 400.0)


def test_latency_goal_is_throughput_under_the_percentile_ceiling() -> None:
    goal = Goal("latency", ceiling_ms=25.0, percentile=95)
    assert goal.direction == "maximize"
    ok = goal.judge(Config(8), _m(500.0, 20.0))
    assert ok.feasible and ok.value == 500.0
    assert ok.constraints["latency"] == pytest.approx(-0.2)
    miss = goal.judge(Config(1), _m(30.0, 38.0))
    assert not miss.feasible
    assert miss.reason == "p95 38.0 ms at micro-batch 1, 1 GPU, fp32 > 25 ms ceiling"
    assert miss.constraints["latency"] == pytest.approx(13 / 25)
    p99 = Goal("latency", ceiling_ms=25.0, percentile=99)
    assert not p99.judge(Config(8), _m(500.0, 22.0)).feasible  # p99 = 26.4


def test_failed_trial_violates_every_constraint_with_the_worst_value() -> None:
    goal = Goal("throughput", floor=10.0)
    v = goal.judge(Config(64), Measurement("oom", message="CUDA out of memory"))
    assert not v.feasible and v.value == FAILED_COST
    assert v.constraints == {"runs": 1.0, "throughput": 1.0}
    assert v.reason.startswith("out of memory at micro-batch 64")
    lat = Goal("latency", ceiling_ms=5.0).judge(Config(1), Measurement("error"))
    assert lat.value == 0.0 and lat.constraints["latency"] == 1.0


def test_gap_is_relative_regret_in_both_directions() -> None:
    assert Goal("throughput").gap(1.05, 1.0) == pytest.approx(0.05)
    assert Goal("latency").gap(95.0, 100.0) == pytest.approx(0.05)


def _spec(sla: dict[str, object], cls: str = "bulk") -> dict[str, object]:
    return {"name": "j", "team": "t", "class": cls, "workload": "gpt", "sla": sla}


def test_goal_from_spec() -> None:
    floor = parse_spec({**_spec({"throughput": {"min_tokens_per_s": 5000}}), "run": {"steps": 5}})
    assert Goal.from_spec(floor) == Goal("throughput", "tokens_per_s", 5000.0)
    work = parse_spec(_spec({"throughput": {"work_samples": 6000, "deadline_s": 60}}))
    assert Goal.from_spec(work).floor == pytest.approx(100.0)
    lat = parse_spec(
        {**_spec({"latency": {"max_ms": 40, "percentile": 99}}, "interactive"), "run": {"steps": 5}}
    )
    g = Goal.from_spec(lat)
    assert (g.kind, g.ceiling_ms, g.percentile, g.floor) == ("latency", 40.0, 99, None)


@pytest.mark.parametrize(
    ("bounds", "said"),
    [
        ({}, ""),
        ({"global_batch": {"min": 32, "max": 32}}, ""),  # one value: the batch is kept
        (
            {"global_batch": {"min": 16, "max": 64}, "lr_scaling": "sqrt"},
            " (global batch 16-64, learning rate sqrt)",
        ),
        (
            {"global_batch": {"min": 16, "max": 64}, "lr_scaling": "none"},
            " (global batch 16-64, learning rate kept)",
        ),
    ],
)
def test_the_goal_says_when_the_job_lets_its_global_batch_move(
    bounds: dict[str, object], said: str
) -> None:
    data = {
        **_spec({"throughput": {"min_samples_per_s": 10}}),
        "run": {"steps": 5},
        "tuning": {"bounds": bounds},
    }
    goal = Goal.from_spec(parse_spec(data))
    assert goal.describe() == "min GPU-s per sample with >= 10 samples/s" + said


def test_energy_cost_is_joules_per_sample_where_measured() -> None:
    goal = Goal("throughput", floor=100.0, cost="energy")
    assert goal.direction == "minimize"
    assert goal.describe() == "min J per sample with >= 100 samples/s"
    # 2 GPUs at 400 samples/s, 1.5 J per sample: each GPU draws 1.5 * 400 / 2 = 300 W
    v = goal.judge(Config(16, gpus=2), _m(400.0, 50.0, energy_per_sample_j=1.5))
    assert v.feasible and v.value == pytest.approx(1.5)
    assert goal.watts_per_gpu(2, _m(400.0, 50.0, energy_per_sample_j=1.5)) == pytest.approx(300)
    # a prediction for a config not yet run: 300 W x 4 GPUs / 1000 samples/s
    assert goal.value_of(4, 1000.0, 300.0) == pytest.approx(1.2)
    # a slower config that draws less per sample wins under energy, loses under GPU-seconds
    frugal = _m(200.0, 50.0, energy_per_sample_j=1.0)
    assert goal.better(goal.judge(Config(8), frugal).value, v.value)
    gpu_s = Goal("throughput", floor=100.0)
    assert not gpu_s.better(gpu_s.judge(Config(8), frugal).value, 2 / 400.0)


def test_energy_cost_per_token_under_a_token_floor() -> None:
    goal = Goal("throughput", "tokens_per_s", 1000.0, cost="energy")
    m = Measurement(
        "ok", p95_ms=5.0, samples_per_s=100.0, tokens_per_s=6400.0, energy_per_sample_j=0.64
    )
    assert goal.judge(Config(8), m).value == pytest.approx(0.64 / 64)


def test_energy_cost_without_an_energy_figure_is_not_made_up() -> None:
    goal = Goal("throughput", floor=10.0, cost="energy")
    v = goal.judge(Config(8), _m(400.0, 50.0))  # a CPU trial: no NVML
    assert not v.feasible and v.value == FAILED_COST
    assert v.constraints["runs"] == 1.0
    assert v.reason.startswith("no energy figure")
    assert goal.value_of(1, 100.0, None) == FAILED_COST


def test_the_spec_chooses_the_cost() -> None:
    spec = parse_spec(
        {
            **_spec({"throughput": {"min_samples_per_s": 50}}),
            "run": {"steps": 5},
            "tuning": {"enabled": True, "objective": "energy"},
        }
    )
    assert Goal.from_spec(spec) == Goal("throughput", floor=50.0, cost="energy")
    default = parse_spec({**_spec({"throughput": {"min_samples_per_s": 50}}), "run": {"steps": 5}})
    assert Goal.from_spec(default).cost == "gpu_seconds"


def test_measurement_keeps_the_run_figures_through_a_dict() -> None:
    m = _m(400.0, 50.0, energy_per_sample_j=1.5, gpu_busy_share=0.9, data_wait_share=0.1)
    assert Measurement.from_dict(m.to_dict()) == m


def test_objective_names_say_the_cost() -> None:
    from orchestrator.tuner.study import objective_name

    assert objective_name(Goal("throughput")) == "gpu_s_per_sample"
    assert objective_name(Goal("throughput", cost="energy")) == "j_per_sample"
    assert objective_name(Goal("throughput", "tokens_per_s", cost="energy")) == "j_per_token"
    assert objective_name(Goal("latency", ceiling_ms=5.0)) == "samples_per_s"
