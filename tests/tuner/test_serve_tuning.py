"""Tuning a service against its SLA: trials are load tests of its own model (real forward
passes) at its offered load; the goal is the fewest GPU-seconds per request among configs whose
request p99 meets the ceiling; an accuracy or latency miss is an Optuna constraint."""

from __future__ import annotations

from typing import Any

import optuna
import pytest

from orchestrator.errors import SpecError, TuneError
from orchestrator.runtime.harness_config import job_harness_config, tuned_spec
from orchestrator.spec import JobSpec, parse_spec
from orchestrator.store import JobStore
from orchestrator.tuner.evaluators.serve import ServeEvaluator
from orchestrator.tuner.objective import Goal
from orchestrator.tuner.service import tune_spec
from orchestrator.tuner.serving import service_space, service_warm_start
from orchestrator.tuner.space import DeviceCaps
from orchestrator.tuner.study import study_name
from workers.serve_run import load_test, serve_arrivals
from workers.workloads.registry import build_workload

CPU = DeviceCaps(precisions=("fp32",))
CEILING_MS = 50.0


def _spec(bounds: dict[str, Any] | None = None, serve: dict[str, Any] | None = None) -> JobSpec:
    return parse_spec(
        {
            "name": "svc",
            "team": "t",
            "class": "interactive",
            "workload": {"name": "infer", "args": {"model": "mlp"}},
            "sla": {"latency": {"percentile": 99, "max_ms": CEILING_MS}},
            "resources": {"gpus": {"min": 1, "max": 2}},
            "run": {"micro_batch": 8, "duration_s": 60},
            "serve": {"rate_rps": 100, **(serve or {})},
            "tuning": {
                "enabled": True,
                "bounds": bounds
                if bounds is not None
                else {
                    "micro_batch": {"min": 8, "max": 16},
                    # at 100 requests/s a batch of 8 fills in 80 ms on average: a 500 ms
                    # window misses a 50 ms p99 (it waits), no window meets it (an MLP's
                    # forward pass is well under a millisecond)
                    "max_delay_ms": [0, 500],
                },
            },
        }
    )


def _evaluator(spec: JobSpec, trial_s: float) -> ServeEvaluator:
    assert spec.serve is not None
    return ServeEvaluator(
        "infer", {"model": "mlp"}, spec.serve.harness(), trial_s=trial_s, caps=CPU
    )


def test_a_service_is_tuned_by_load_tests_to_the_fewest_gpu_seconds_meeting_p99(
    store: JobStore, redis_url: str
) -> None:
    spec = _spec()
    evaluator = _evaluator(spec, trial_s=1.0)
    report = tune_spec(spec, store, redis_url, strategy="grid", evaluator=evaluator, patience=None)
    result = report.result
    space = service_space(spec, evaluator.caps)
    assert space.size == 2 * 2 * 2 * 2  # batch x window x int8 x replicas, all load-tested
    assert result.trials == space.size and result.status == "feasible" and report.run
    records = list(result.history.points())
    missed = [r for r in records if r.measurement.ok and r.measurement.p99_ms > CEILING_MS]
    assert missed and all(not r.verdict.feasible for r in missed)
    assert all(r in missed for r in records if r.config.max_delay_ms == 500)  # all 8 wait
    best = result.best
    assert best is not None and best.verdict.feasible and best not in missed
    # the fewest GPU-seconds per request: one replica, no window (two replicas cost twice)
    assert best.config.gpus == 1 and best.config.max_delay_ms == 0
    m = best.measurement
    assert m.p99_ms is not None and m.p99_ms <= CEILING_MS and m.dropped == 0
    # each trial served two seeded streams (its figures are the worse of the two)
    assert m.offered == sum(len(serve_arrivals(spec.serve.harness(), 1.0, k)) for k in (0, 1))
    assert best.verdict.value == pytest.approx(1 / m.samples_per_s)  # GPU-s per request
    feasible = [r for r in records if r.verdict.feasible]
    assert all(best.verdict.value <= r.verdict.value for r in feasible)
    # int8 trials carry their measured accuracy, within the tolerance
    int8 = [r for r in records if r.config.quantize == "int8"]
    assert int8 and all(0 < (r.measurement.quant_error or 0) <= 0.05 for r in int8)
    # the study is Optuna's, with the misses recorded as violated constraints
    study = optuna.load_study(
        study_name=study_name("svc"), storage=store.study_journal(redis_url).storage()
    )
    assert study.metric_names == ["gpu_s_per_request"]
    by_number = {t.number: t for t in study.trials}
    for r in missed:
        assert by_number[r.number].constraints["latency"] > 0
    # the chosen config, run again as the job would run it (a fresh seed), meets the ceiling
    run = tuned_spec(spec, best.config)
    assert run.serve is not None and run.serve.max_delay_ms == best.config.max_delay_ms
    assert run.serve.quantize == best.config.quantize and run.gpus == best.config.gpus
    hc = job_harness_config(run)
    again = load_test(
        build_workload("infer", {"model": "mlp"}, 0),
        serve_arrivals(hc["serve"], 2.0, seed=5),
        max_batch=hc["micro_batch"],
        max_delay_s=hc["serve"]["max_delay_s"],
        replicas=run.gpus,
        quantize=hc["serve"]["quantize"],
    ).summary()
    assert again["dropped"] == 0 and again["request_p99_ms"] <= CEILING_MS


def test_a_quantization_over_the_tolerance_is_an_infeasible_trial(
    store: JobStore, redis_url: str
) -> None:
    spec = _spec(
        {"micro_batch": {"min": 8, "max": 8}, "max_delay_ms": [0], "gpus": {"min": 1, "max": 1}},
        serve={"quant_tolerance": 1e-6},
    )
    evaluator = _evaluator(spec, trial_s=0.5)
    report = tune_spec(spec, store, redis_url, strategy="grid", evaluator=evaluator)
    by_quant = {r.config.quantize: r for r in report.result.history.points()}
    refused = by_quant["int8"]
    assert not refused.verdict.feasible and refused.verdict.constraints["accuracy"] > 0
    assert refused.measurement.quant_error is not None and refused.measurement.quant_error > 1e-6
    assert "tolerance" in refused.verdict.reason
    assert report.result.best is not None and report.result.best.config.quantize == "none"


def test_a_service_goal_and_bad_serving_bounds_name_their_field() -> None:
    goal = Goal.from_spec(_spec())
    assert goal.serving and goal.direction == "minimize" and goal.quant_tolerance == 0.05
    assert goal.describe() == "min GPU-s per request with request p99 <= 50 ms"
    gpu = DeviceCaps(name="h100", kind="cuda", precisions=("fp32", "bf16"), compile=True)
    space = service_space(_spec({"max_delay_ms": [0, 2]}), gpu)
    assert space.quantizations == ("none",) and space.compile == (False, True)
    with pytest.raises(TuneError, match=r"tuning\.bounds\.quantize"):
        service_space(_spec({"quantize": ["int8"]}), gpu)
    defaults = service_space(_spec({}), CPU)
    assert defaults.max_delays == (0.0, 1.0, 2.0, 5.0, 10.0, 20.0)  # below the 50 ms ceiling
    # the search starts from the most capacity per replica count, fewest replicas first
    first = service_warm_start(defaults)
    assert [(c.micro_batch, c.max_delay_ms, c.gpus, c.quantize) for c in first] == [
        (64, 1.0, 1, "none"),
        (64, 1.0, 2, "none"),
    ]
    assert all(defaults.contains(c) for c in first)
    with pytest.raises(SpecError, match=r"tuning\.bounds\.max_delay_ms applies to a service"):
        parse_spec(
            {
                "name": "x",
                "team": "t",
                "class": "interactive",
                "workload": "infer",
                "sla": {"latency": {"max_ms": 10}},
                "run": {"steps": 5},
                "tuning": {"enabled": True, "bounds": {"max_delay_ms": [1]}},
            }
        )
    with pytest.raises(SpecError, match="quantize"):
        _spec(serve={"quantize": "int4"})
