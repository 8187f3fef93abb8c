"""Tuning a service against its SLA: trials are load tests of its own model (real forward
passes) at its offered load, through the ingress as a live service's requests go; the goal is
the fewest GPU-seconds per request among configs whose request p99 meets the ceiling; an
accuracy or latency miss is an Optuna constraint."""

from __future__ import annotations

import math
from typing import Any

import optuna
import pytest

from orchestrator.errors import SpecError, TuneError
from orchestrator.runtime.harness_config import job_harness_config, tuned_spec
from orchestrator.spec import JobSpec, parse_spec
from orchestrator.store import JobStore
from orchestrator.tuner.evaluators.serve import ServeEvaluator
from orchestrator.tuner.history import SERVING_TIE
from orchestrator.tuner.objective import Goal
from orchestrator.tuner.service import tune_spec
from orchestrator.tuner.serving import service_space, service_warm_start
from orchestrator.tuner.space import Config, DeviceCaps
from orchestrator.tuner.study import study_name
from workers.serve_run import serve_arrivals

CPU = DeviceCaps(precisions=("fp32",))
CEILING_MS = 50.0
TUNED_CEILING_MS = 200.0
"""The ceiling of the tuning below: its trials run on the wall clock through Redis on a shared
machine, so it leaves a no-window trial's p99 (10-60 ms at load 8 on 2 cores) far below it, and a
500 ms window's (about 500 ms at 20 req/s) far above."""


def _spec(
    bounds: dict[str, Any] | None = None,
    serve: dict[str, Any] | None = None,
    ceiling_ms: float = CEILING_MS,
) -> JobSpec:
    return parse_spec(
        {
            "name": "svc",
            "team": "t",
            "class": "interactive",
            "workload": {"name": "infer", "args": {"model": "mlp"}},
            "sla": {"latency": {"percentile": 99, "max_ms": ceiling_ms}},
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


def _evaluator(spec: JobSpec, trial_s: float, store: JobStore, redis_url: str) -> ServeEvaluator:
    assert spec.serve is not None
    return ServeEvaluator(
        "infer",
        {"model": "mlp"},
        spec.serve.harness(),
        redis_url=redis_url,
        namespace=store.namespace,
        trial_s=trial_s,
        caps=CPU,
    )


def test_a_service_is_tuned_by_load_tests_to_the_fewest_gpu_seconds_meeting_p99(
    store: JobStore, redis_url: str
) -> None:
    # at 20 requests/s a batch of 8 fills in 350 ms on average: a 500 ms window misses a
    # 200 ms p99 (it waits), no window meets it (an MLP's forward pass is under a millisecond)
    bounds = {"micro_batch": {"min": 8, "max": 8}, "max_delay_ms": [0, 500]}
    spec = _spec(bounds, serve={"rate_rps": 20}, ceiling_ms=TUNED_CEILING_MS)
    evaluator = _evaluator(spec, 2.0, store, redis_url)
    report = tune_spec(spec, store, redis_url, strategy="grid", evaluator=evaluator, patience=None)
    result = report.result
    space = service_space(spec, evaluator.caps)
    assert space.size == 2 * 2 * 2  # window x int8 x replicas, all load-tested
    assert result.trials == space.size and result.status == "feasible" and report.run
    records = list(result.history.points())
    missed = [r for r in records if r.measurement.ok and r.measurement.p99_ms > TUNED_CEILING_MS]
    assert missed and all(not r.verdict.feasible for r in missed)
    assert all(r in missed for r in records if r.config.max_delay_ms == 500)  # all 4 wait
    best = result.best
    assert best is not None and best.verdict.feasible and best not in missed
    # the fewest GPU-seconds per request: one replica, no window (two replicas cost twice)
    assert best.config.gpus == 1 and best.config.max_delay_ms == 0
    m = best.measurement
    assert m.p99_ms is not None and m.p99_ms <= TUNED_CEILING_MS and m.dropped == 0
    # each trial served two seeded streams (its figures are the worse of the two)
    assert m.offered == sum(len(serve_arrivals(spec.serve.harness(), 2.0, k)) for k in (0, 1))
    assert best.verdict.value == pytest.approx(1 / m.samples_per_s)  # GPU-s per request
    # of the feasible, the cheapest within SERVING_TIE, and of those the one with most room
    feasible = [r for r in records if r.verdict.feasible]
    cheapest = min(r.verdict.value for r in feasible)
    ties = [r for r in feasible if r.verdict.value <= cheapest * (1 + SERVING_TIE)]
    assert best in ties
    assert all(m.p99_ms <= (r.measurement.p99_ms or math.inf) for r in ties)
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
    # the chosen config, as the job would run it, served again (a fresh seed) meets the ceiling
    run = tuned_spec(spec, best.config)
    assert run.serve is not None and run.serve.max_delay_ms == best.config.max_delay_ms
    assert run.serve.quantize == best.config.quantize and run.gpus == best.config.gpus
    assert job_harness_config(run)["micro_batch"] == best.config.micro_batch
    # (two fresh seeds at most: one 2 s trial on a CPU the other test worker loads may be
    # starved, as a clean-clone suite run saw once: p99 305 ms, its p50 42 ms)
    for seed in (5, 6):
        again = ServeEvaluator(
            "infer",
            {"model": "mlp"},
            run.serve.harness(),
            redis_url=redis_url,
            namespace=store.namespace,
            trial_s=2.0,
            streams=1,
            caps=CPU,
            seed=seed,
        ).evaluate(best.config)
        if again.dropped == 0 and again.p99_ms is not None and again.p99_ms <= TUNED_CEILING_MS:
            break
    assert again.dropped == 0 and again.p99_ms is not None and again.p99_ms <= TUNED_CEILING_MS


def test_a_trial_s_requests_go_through_its_own_ingress_stream_and_leave_no_keys(
    store: JobStore, redis_url: str
) -> None:
    spec = _spec(serve={"rate_rps": 50})
    assert spec.serve is not None
    evaluator = ServeEvaluator(
        "infer",
        {"model": "mlp"},
        spec.serve.harness(),
        redis_url=redis_url,
        namespace=store.namespace,
        trial_s=2.0,
        streams=1,  # the ingress's figures are the trial's whole life: one stream's here
        caps=CPU,
    )
    m = evaluator.evaluate(Config(micro_batch=8, gpus=2, max_delay_ms=1.0))
    assert m.ok and m.offered
    assert m.offered == len(serve_arrivals(spec.serve.harness(), 2.0, 0))
    # every request reached the trial's ingress and was answered by a replica taking it from
    # the stream, or counted a timeout there when the replicas did not answer in time, none
    # errored or refused (on a quiet machine none times out; a clean-clone suite run, the CPU
    # shared with the other test worker, saw 16 of 87 time out)
    seen = evaluator.last_ingress
    assert seen is not None and seen.requests == m.offered
    assert seen.counts["ok"] + seen.counts["timeout"] == m.offered and seen.counts["ok"] > 0
    # the trial's stream, ready set and figures are gone: nothing of it mixes with a service
    assert list(store.client.scan_iter(match=f"{store.namespace}:svc:*")) == []


def test_a_quantization_over_the_tolerance_is_an_infeasible_trial(
    store: JobStore, redis_url: str
) -> None:
    spec = _spec(
        {"micro_batch": {"min": 8, "max": 8}, "max_delay_ms": [0], "gpus": {"min": 1, "max": 1}},
        serve={"quant_tolerance": 1e-6, "rate_rps": 20},
        ceiling_ms=TUNED_CEILING_MS,
    )
    evaluator = _evaluator(spec, 0.5, store, redis_url)
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


def test_of_equally_cheap_configs_a_service_runs_the_one_with_most_room_under_its_ceiling() -> None:
    from orchestrator.tuner.history import History, TrialRecord
    from orchestrator.tuner.objective import Measurement

    spec = _spec(ceiling_ms=20.0)
    goal = Goal.from_spec(spec)
    space = service_space(spec, CPU)

    def trial(i: int, gpus: int, delay: float, p99: float, rps: float) -> TrialRecord:
        c = Config(micro_batch=32, gpus=gpus, max_delay_ms=delay)
        m = Measurement("ok", p50_ms=p99 / 3, p95_ms=p99 / 2, p99_ms=p99, samples_per_s=rps)
        return TrialRecord(i, c, m, goal.judge(c, m))

    h = History(space, goal)
    h.add(trial(0, 1, 1.0, 11.1, 600.0))  # the cheapest by a hair, little room: not it
    h.add(trial(1, 1, 0.0, 5.7, 596.0))  # as cheap within noise, most room: this one
    h.add(trial(2, 2, 0.0, 3.0, 600.0))  # more room, but twice the GPUs
    h.add(trial(3, 1, 2.0, 25.0, 600.0))  # misses the ceiling
    assert h.best is not None and h.best.number == 1
    # the search's progress is the objective's own best: a roomier tie is not progress
    assert h.cheapest is not None and h.cheapest.number == 0
    h.add(trial(4, 1, 5.0, 9.0, 400.0))  # a third dearer (it lost requests' worth of rate)
    assert h.best.number == 1

    # a training job's latency goal is not a service's: its best is still the highest rate
    plain = Goal("latency", ceiling_ms=20.0, percentile=99)
    t = History(space, plain)
    for i, (p99, rate) in enumerate([(11.1, 600.0), (5.7, 596.0)]):
        c = Config(micro_batch=32, gpus=1, max_delay_ms=float(i))
        m = Measurement("ok", p50_ms=1.0, p95_ms=1.0, p99_ms=p99, samples_per_s=rate)
        t.add(TrialRecord(i, c, m, plain.judge(c, m)))
    assert t.best is not None and t.best.number == 0
