"""A team's own model served (issue 24, part 4): the example ``examples/own_model`` (an
``entry:`` whose Workload has ``train=False``) answers an open-loop stream through the batcher,
with request percentiles reported; int8 keeps its outputs within the
tolerance of fp32's, a model that int8 ruins is refused, and a training entry is refused as a
service naming the field."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest
import torch

from orchestrator.runtime.harness_config import job_harness_config
from orchestrator.spec import load_spec
from workers.arrivals import poisson_arrivals
from workers.config import HarnessConfig
from workers.errors import HarnessConfigError
from workers.harness import Harness
from workers.quantize import DEFAULT_TOLERANCE, QuantizationRefused, quantized
from workers.serve_run import load_test
from workers.workloads.registry import build_workload

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "own_model"
RANKER = "ranker:build"
FRAGILE = "tests.workers.sample_workload:build_fragile_inference"


@pytest.fixture
def ranker_importable(monkeypatch: pytest.MonkeyPatch) -> None:
    """The example's folder on the import path, as the team's package is on a worker's."""
    monkeypatch.syspath_prepend(str(EXAMPLE))
    monkeypatch.delitem(sys.modules, "ranker", raising=False)


@pytest.mark.usefixtures("ranker_importable")
def test_the_example_model_is_served_at_a_rate_with_request_percentiles() -> None:
    spec = load_spec(EXAMPLE / "job.yaml")
    assert spec.workload.entry == RANKER and spec.serve is not None
    config = job_harness_config(spec)  # the job's run, as a worker actor gets it
    config["duration_s"] = 1.0  # the job file's 60 s, shortened
    # its offered load made up in the harness (serve.endpoint false): no ingress here (its
    # endpoint on the pool: tests/e2e/test_service_endpoint.py)
    config["serve"]["endpoint"] = False
    reports: list[dict[str, Any]] = []
    # a worker actor runs an entry in its sandboxed child (workers.sandbox; the tuner's trials
    # in tests/tuner/test_serve_own_model.py go through it); the harness is the same here
    result = Harness(HarnessConfig.from_dict(config), report=reports.append).run()
    offered = len(poisson_arrivals(spec.serve.rate_rps or 0, 1.0, seed=spec.run.seed))
    assert result.status == "finished" and result.forward_only
    assert result.measured_steps == offered and result.dropped == 0  # every request answered
    assert result.p99_ms is not None and result.p50_ms is not None
    assert result.p99_ms >= result.p50_ms > 0
    last = reports[-1]
    assert last["status"] == "finished" and last["offered_rps"] == pytest.approx(offered)
    assert 1 <= last["mean_batch"] <= spec.run.micro_batch and last["queue_p95_ms"] is not None


@pytest.mark.usefixtures("ranker_importable")
def test_the_example_model_quantized_stays_within_the_tolerance_and_reports_its_error() -> None:
    ranker = build_workload(RANKER, {}, 0)
    served, error = quantized(ranker, "int8", seed=0)
    assert error is not None and 0 < error <= DEFAULT_TOLERANCE
    assert any("quantized" in type(m).__module__ for m in served.modules())
    trace = load_test(
        ranker, poisson_arrivals(200.0, 0.3, 0), max_batch=8, max_delay_s=0.002, quantize="int8"
    )
    assert trace.quant_error == error and trace.summary()["requests"] == trace.offered


def _service(workload: str, quantize: str) -> HarnessConfig:
    """A live service's config for ``workload`` (a tuning trial's replicas run the same one,
    with ``serve.endpoint``: ``ServeEvaluator.trial_config``)."""
    return HarnessConfig(
        workload=workload,
        micro_batch=8,
        duration_s=0.3,
        serve={
            "rate_rps": 100.0,
            "max_delay_s": 0.0,
            "quantize": quantize,
            "quant_tolerance": DEFAULT_TOLERANCE,
        },
    )


def test_a_model_that_int8_ruins_is_refused_as_a_service() -> None:
    torch.manual_seed(0)  # as the harness seeds before it builds
    fragile = build_workload(FRAGILE, {}, 0)
    with pytest.raises(QuantizationRefused, match=r"serve\.quant_tolerance") as info:
        quantized(fragile, "int8")
    assert info.value.error > DEFAULT_TOLERANCE
    with pytest.raises(QuantizationRefused):
        Harness(_service(FRAGILE, "int8")).run()  # refused before its first request
    # (as a tuning trial, an infeasible one with its error: tests/tuner/test_serve_own_model.py)
    fp32 = Harness(_service(FRAGILE, "none")).run()  # unquantized it serves
    assert fp32.status == "finished" and fp32.quant_error is None and fp32.dropped == 0
    assert fp32.measured_steps == len(poisson_arrivals(100.0, 0.3, 0))


def test_a_training_entry_is_refused_as_a_service_naming_the_field() -> None:
    trains = _service("tests.workers.sample_workload:build", "none")
    with pytest.raises(HarnessConfigError, match=r"workload: .* is a training workload"):
        Harness(trains).run()
