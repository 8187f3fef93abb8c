"""int8 dynamic quantization of a service's model, with its accuracy against fp32 checked.

``quantize: int8`` replaces every ``nn.Linear`` of the model by a dynamically quantized one:
int8 weights, activations quantized per batch at run time (``torch.ao.quantization.
quantize_dynamic``; fbgemm/qnnpack kernels, so it runs on the CPU only). A faster answer that is
wrong is no answer, so the quantized model is used only after its outputs are compared with the
fp32 model's on seeded inputs of the job's own workload (:func:`output_error`): the relative L2
error ``||y_int8 - y_fp32|| / ||y_fp32||`` over :data:`CHECK_SAMPLES` samples must be within the
stated tolerance, else :func:`quantized` refuses it (:class:`QuantizationRefused`, naming
``serve.quantize``). The figure is reported with the run (``quant_error``).

The maintained path: ``torch.ao.quantization.quantize_dynamic`` ships with torch (deprecated
for torchao's ``quantize_`` since torch 2.9 but present and working in the pinned 2.13);
torchao is not a dependency of the project, and this module is the one place to switch to it.
"""

from __future__ import annotations

import copy
import math
import warnings

import torch
from torch import nn

from workers.errors import HarnessConfigError
from workers.workloads.base import Workload, WorkloadError

__all__ = [
    "CHECK_SAMPLES",
    "DEFAULT_TOLERANCE",
    "QUANTIZATIONS",
    "QuantizationRefused",
    "output_error",
    "quantize_model",
    "quantized",
]

QUANTIZATIONS: tuple[str, ...] = ("none", "int8")
DEFAULT_TOLERANCE = 0.05
"""The default largest relative L2 error of a quantized model's outputs against fp32's
(``serve.quant_tolerance``). Measured on the built-in models (seed 0, 64 samples): infer(mlp)
about 0.01, infer(gpt) about 0.02 (tests/workers/test_quantize.py)."""
CHECK_SAMPLES = 64
"""Seeded samples the accuracy check compares outputs on."""


class QuantizationRefused(HarnessConfigError):
    """A quantized model whose outputs are further from fp32's than the tolerance allows.

    Attributes:
        error: the measured output error (relative L2).
    """

    def __init__(self, message: str, error: float = math.nan) -> None:
        super().__init__(message)
        self.error = error


def quantize_model(model: nn.Module, mode: str) -> nn.Module:
    """A copy of ``model`` quantized by ``mode`` (``none``: ``model`` itself).

    Raises:
        HarnessConfigError: an unknown mode.
    """
    if mode == "none":
        return model
    if mode != "int8":
        raise HarnessConfigError(
            f"serve.quantize must be one of {', '.join(QUANTIZATIONS)}, got {mode!r}"
        )
    from torch.ao.quantization import quantize_dynamic

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the deprecation notice (see the module doc)
        return quantize_dynamic(copy.deepcopy(model).eval(), {nn.Linear}, dtype=torch.qint8)


@torch.inference_mode()
def output_error(
    workload: Workload, reference: nn.Module, candidate: nn.Module, seed: int
) -> float:
    """Relative L2 error of ``candidate``'s outputs against ``reference``'s, on
    :data:`CHECK_SAMPLES` seeded samples of ``workload`` (on the CPU).

    Raises:
        WorkloadError: the workload's ``loss`` (its forward pass) returns no single tensor.
    """
    batch = workload.make_batch(seed, CHECK_SAMPLES)
    want, got = workload.loss(reference, batch), workload.loss(candidate, batch)
    if not (isinstance(want, torch.Tensor) and isinstance(got, torch.Tensor)):
        # a user's loss may return anything; the check compares one output tensor
        raise WorkloadError(
            "serve.quantize: a served workload's loss must return the model's output as one "
            f"tensor (the accuracy check compares it with fp32's), got {type(want).__name__}"
        )
    want, got = want.float(), got.float()
    norm = float(torch.linalg.vector_norm(want))
    diff = float(torch.linalg.vector_norm(got - want))
    if not math.isfinite(diff):
        return math.inf
    return diff / norm if norm > 0 else (0.0 if diff == 0 else math.inf)


def quantized(
    workload: Workload,
    mode: str,
    tolerance: float = DEFAULT_TOLERANCE,
    *,
    seed: int = 0,
    device: torch.device | None = None,
) -> tuple[nn.Module, float | None]:
    """The model to serve under ``mode`` and its measured output error (``None`` unquantized).

    Raises:
        QuantizationRefused: the error exceeds ``tolerance``.
        HarnessConfigError: an unknown mode, a tolerance that is not a number > 0, or int8
            asked of a device other than the CPU.
    """
    model = workload.model
    if mode == "none":
        return model, None
    if not (isinstance(tolerance, int | float) and math.isfinite(tolerance) and tolerance > 0):
        raise HarnessConfigError(
            f"serve.quant_tolerance must be a finite number > 0, got {tolerance!r}"
        )
    if device is not None and device.type != "cpu":
        raise HarnessConfigError(
            f"serve.quantize {mode}: dynamic int8 kernels run on the CPU, not {device.type}"
        )
    reference = model.to("cpu").eval()
    candidate = quantize_model(reference, mode)
    error = output_error(workload, reference, candidate, seed)
    if not error <= tolerance:
        raise QuantizationRefused(
            f"serve.quantize {mode}: outputs are {error:.4f} (relative L2) from fp32's, over "
            f"serve.quant_tolerance {tolerance:g}; serve unquantized or allow more",
            error,
        )
    return candidate, error
