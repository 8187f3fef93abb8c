"""Tuning a team's own model as a service (issue 24, part 4): the serving tuner load-tests the
example ``examples/own_model`` (an ``entry:``) over replicas and int8 at its offered load and
picks the fewest GPU-seconds per request meeting p99; the trials run the team's code in a
sandboxed child, never in the tuner's process; a training entry is refused naming the field.
(A model that int8 ruins: tests/workers/test_own_model_serving.py; its trial's refusal as an
infeasible trial: tests/tuner/test_serve_tuning.py.)"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from orchestrator.errors import TuneError
from orchestrator.spec import JobSpec, load_spec
from orchestrator.store import JobStore
from orchestrator.tuner.evaluators.serve import ServeEvaluator
from orchestrator.tuner.service import tune_spec
from orchestrator.tuner.space import Config, DeviceCaps

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "own_model"
CPU = DeviceCaps(precisions=("fp32",))


CEILING_MS = 500.0
"""The example's 25 ms p99, loosened, and its 200 req/s lowered to :data:`RATE_RPS`: its trials
go through the sandbox's pipes and Redis on the wall clock of a shared 2-core machine (p99
above 250 ms at 200 req/s and load 9 there)."""
RATE_RPS = 50.0


def _example(**bounds: object) -> JobSpec:
    spec = load_spec(EXAMPLE / "job.yaml")
    tuning = spec.tuning.model_copy(update={"bounds": spec.tuning.bounds.model_copy(update=bounds)})
    assert spec.sla.latency is not None
    sla = spec.sla.model_copy(
        update={"latency": spec.sla.latency.model_copy(update={"max_ms": CEILING_MS})}
    )
    assert spec.serve is not None
    serve = spec.serve.model_copy(update={"rate_rps": RATE_RPS})
    return spec.model_copy(update={"tuning": tuning, "sla": sla, "serve": serve})


def _evaluator(
    spec: JobSpec, store: JobStore, redis_url: str, workload: str | None = None
) -> ServeEvaluator:
    assert spec.serve is not None
    return ServeEvaluator(
        workload or spec.workload.ref,
        dict(spec.workload.args),
        spec.serve.harness(),
        redis_url=redis_url,
        namespace=store.namespace,
        trial_s=0.5,
        streams=1,
        caps=CPU,
    )


def test_the_serving_tuner_picks_a_config_for_a_users_model_in_its_sandbox(
    store: JobStore, redis_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.syspath_prepend(str(EXAMPLE))  # the team's package, on the workers' path
    monkeypatch.delitem(sys.modules, "ranker", raising=False)
    from orchestrator.spec import IntRange

    # two trials: one and two replicas of the int8 ranker, batch 16, a 2 ms window
    spec = _example(micro_batch=IntRange(min=16, max=16), max_delay_ms=[2.0], quantize=["int8"])
    report = tune_spec(
        spec, store, redis_url, evaluator=_evaluator(spec, store, redis_url), patience=None
    )
    assert "ranker" not in sys.modules  # the tuner's process never imported the team's code
    result = report.result
    assert result.trials == 2 and result.status == "feasible" and report.run
    records = list(result.history.points())
    assert sorted(r.config.gpus for r in records) == [1, 2]
    ceiling = spec.sla.latency.max_ms if spec.sla.latency else 0
    for r in records:
        m = r.measurement
        assert m.ok and m.offered and m.dropped == 0 and m.p99_ms is not None
        assert 0 < (m.quant_error or 0) <= spec.serve.quant_tolerance  # type: ignore[union-attr]
        assert r.verdict.feasible == (m.p99_ms <= ceiling)
    best = result.best
    assert best is not None and best.verdict.feasible
    # the fewest GPU-seconds per request: one replica serves the same requests at half the cost,
    # when it meets the ceiling; on a machine too slow for one, two (judged from the trials'
    # own measurements, not from how fast this machine is)
    one = next(r for r in records if r.config.gpus == 1)
    assert best.config.gpus == (1 if one.verdict.feasible else 2)
    assert best.config.quantize == "int8"


def test_a_training_entry_is_refused_as_a_service_naming_the_field(
    store: JobStore, redis_url: str
) -> None:
    from orchestrator.spec import WorkloadRef

    # the spec cannot tell (the control plane never imports a team's code): the probe does,
    # before any trial; here the built-in mlp (a training workload) answers it in-process,
    # as the team's code answers it in its sandbox in the test above
    spec = _example().model_copy(
        update={"workload": WorkloadRef(entry="tests.workers.sample_workload:build")}
    )
    with pytest.raises(TuneError, match=r"workload\.entry: .* is a training workload"):
        tune_spec(spec, store, redis_url, evaluator=_evaluator(spec, store, redis_url, "mlp"))
    assert store.tune_reports.load(spec.name) is None  # refused before any trial: nothing stored


def test_a_model_that_int8_ruins_is_an_infeasible_trial_from_its_sandbox(
    store: JobStore, redis_url: str
) -> None:
    spec = _example()
    assert spec.serve is not None
    fragile = "tests.workers.sample_workload:build_fragile_inference"
    evaluator = _evaluator(spec, store, redis_url, fragile)
    m = evaluator.evaluate(Config(micro_batch=8, gpus=1, max_delay_ms=0.0, quantize="int8"))
    # its replica refused to serve it before joining the ingress (in its sandboxed child): the
    # trial is an error carrying the measured output error, which the goal judges infeasible
    assert m.status == "error" and m.quant_error is not None
    assert m.quant_error > spec.serve.quant_tolerance and "quant_tolerance" in (m.message or "")
