"""int8 dynamic quantization of a service's model: within the stated tolerance of fp32 on the
built-in infer models, refused (not silently used) when over it, and reported with the run."""

from __future__ import annotations

import pytest
import torch

from workers.arrivals import poisson_arrivals
from workers.config import HarnessConfig
from workers.errors import HarnessConfigError
from workers.harness import Harness
from workers.quantize import (
    CHECK_SAMPLES,
    DEFAULT_TOLERANCE,
    QuantizationRefused,
    output_error,
    quantize_model,
    quantized,
)
from workers.serve_run import load_test
from workers.workloads.registry import build_workload


@pytest.mark.parametrize("model", ["mlp", "gpt"])
def test_int8_outputs_are_within_the_tolerance_of_fp32(model: str) -> None:
    infer = build_workload("infer", {"model": model}, 0)
    served, error = quantized(infer, "int8", seed=0)
    assert error is not None and 0 < error <= DEFAULT_TOLERANCE
    # the served model is really quantized (its linear layers hold int8 weights), and the
    # figure is the relative L2 distance of its outputs, as recomputed here on other inputs
    assert any("quantized" in type(m).__module__ for m in served.modules())
    assert all(p.dtype == torch.float32 for p in infer.model.parameters())  # fp32 kept
    with torch.inference_mode():
        x = infer.make_batch(7, CHECK_SAMPLES)
        want, got = infer.loss(infer.model, x), infer.loss(served, x)
    again = float((got - want).norm() / want.norm())
    assert again == pytest.approx(output_error(infer, infer.model, served, 7), rel=1e-6)
    assert again <= DEFAULT_TOLERANCE
    assert quantized(infer, "none") == (infer.model, None)


def test_a_quantization_over_the_tolerance_is_refused_not_used() -> None:
    infer = build_workload("infer", {"model": "mlp"}, 0)
    with pytest.raises(QuantizationRefused, match=r"serve.quantize int8: outputs are .* over"):
        quantized(infer, "int8", 1e-6)
    arrivals = poisson_arrivals(100.0, 0.2, seed=0)
    with pytest.raises(QuantizationRefused, match="quant_tolerance"):
        load_test(infer, arrivals, max_batch=4, max_delay_s=0.0, quantize="int8", tolerance=1e-6)
    config = HarnessConfig(
        workload="infer",
        workload_args={"model": "mlp"},
        micro_batch=4,
        duration_s=0.3,
        serve={"rate_rps": 50.0, "max_delay_s": 0.0, "quantize": "int8", "quant_tolerance": 1e-6},
    )
    with pytest.raises(QuantizationRefused):
        Harness(config).run()  # refused before its first request
    for bad, field in ((("int4", 0.05), "serve.quantize"), (("int8", 0.0), "quant_tolerance")):
        with pytest.raises(HarnessConfigError, match=field):
            quantized(infer, *bad)
    with pytest.raises(HarnessConfigError, match=r"serve\.quantize must be none or int8"):
        HarnessConfig(workload="infer", duration_s=1.0, serve={"rate_rps": 1.0, "quantize": "x"})
    with pytest.raises(HarnessConfigError, match=r"serve\.quantize"):
        quantize_model(infer.model, "fp8")


def test_a_quantized_load_test_and_service_report_the_error() -> None:
    infer = build_workload("infer", {"model": "mlp"}, 0)
    trace = load_test(
        infer,
        poisson_arrivals(200.0, 0.5, seed=0),
        max_batch=8,
        max_delay_s=0.002,
        quantize="int8",
    )
    assert trace.quant_error is not None and trace.summary()["quant_error"] == trace.quant_error
    reports: list[dict] = []
    config = HarnessConfig(
        workload="infer",
        workload_args={"model": "mlp"},
        micro_batch=8,
        duration_s=0.5,
        serve={"rate_rps": 100.0, "max_delay_s": 0.002, "quantize": "int8"},
    )
    result = Harness(config, report=reports.append).run()
    assert result.status == "finished"
    assert result.quant_error is not None and 0 < result.quant_error <= DEFAULT_TOLERANCE
    assert reports[-1]["quant_error"] == result.quant_error
