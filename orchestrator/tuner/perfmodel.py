"""A performance model of data-parallel training, fitted to the trials measured so far.

Step time of ``g`` GPUs at micro-batch ``m`` with ``a`` accumulated micro-batches, after
Pollux (Qiao et al., OSDI 2021, sec. 4.1) with its overlap exponent fixed at 1:

    t(g, m, a) = a * (c0 + c1 * m) + sync(g)
    sync(1) = 0;  sync(g) = s[N] + k * (g - 2)  with N = ceil(g / gpus_per_node) nodes

Pollux has one constant for one node and one for several; here each node count has its own,
because measured clusters are not that regular (in the Pollux tables themselves, 2-node
placements sync slower than 3-node ones). Linear in the coefficients, so it is fitted by
non-negative least squares on relative error (``scipy.optimize.nnls``): a coefficient with no
data yet stays 0, which makes an unmeasured regime (first multi-node run) look as fast as it
could be -- optimism that sends the search to measure it. Per-GPU throughput and latency of
every config follow from ``t``; the profile uses the same model to price extra GPUs.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass

__all__ = ["Sample", "StepModel", "fit_step_model"]


@dataclass(frozen=True)
class Sample:
    """One measured config: GPUs, micro-batch, accumulation, mean step seconds, and the ratio
    of the latency percentile of interest to the mean step time."""

    gpus: int
    micro_batch: int
    grad_accum: int
    step_s: float
    pct_ratio: float = 1.0


MAX_NODES = 64


def _features(g: int, m: int, a: int, per_node: int) -> list[float]:
    nodes = [0.0] * MAX_NODES
    if g > 1:
        nodes[min(math.ceil(g / per_node), MAX_NODES) - 1] = 1.0
    return [a, a * m, (g - 2.0) if g > 1 else 0.0, *nodes]


@dataclass(frozen=True)
class StepModel:
    """Fitted step-time model (seconds) of one family of settings.

    ``error`` is the largest relative error of the fit on its own samples (how far a
    prediction from it may be off; shown with the job's profile).
    """

    coef: tuple[float, ...]
    gpus_per_node: int
    pct_ratio: float = 1.0
    error: float = 0.0

    def step_s(self, gpus: int, micro_batch: int, grad_accum: int = 1) -> float:
        """Predicted mean seconds per optimizer step."""
        x = _features(gpus, micro_batch, grad_accum, self.gpus_per_node)
        return sum(c * f for c, f in zip(self.coef, x, strict=True))

    def samples_per_s(self, gpus: int, micro_batch: int, grad_accum: int = 1) -> float:
        """Predicted throughput over all GPUs (``inf`` if the model predicts no time)."""
        t = self.step_s(gpus, micro_batch, grad_accum)
        return gpus * micro_batch * grad_accum / t if t > 0 else math.inf

    def latency_ms(self, gpus: int, micro_batch: int, grad_accum: int = 1) -> float:
        """Predicted latency percentile (the mean step scaled by the measured ratio)."""
        return self.step_s(gpus, micro_batch, grad_accum) * 1000.0 * self.pct_ratio


def fit_step_model(samples: Sequence[Sample], gpus_per_node: int) -> StepModel | None:
    """Fit :class:`StepModel` to measured samples (``None`` without any)."""
    if not samples:
        return None
    import numpy as np
    from scipy.optimize import nnls

    rows = [_features(s.gpus, s.micro_batch, s.grad_accum, gpus_per_node) for s in samples]
    a = np.array(rows, dtype=float)
    b = np.array([s.step_s for s in samples], dtype=float)
    w = 1.0 / np.maximum(b, 1e-12)  # relative error: fast and slow configs count alike
    coef, _ = nnls(a * w[:, None], b * w)
    ratio = statistics.median(s.pct_ratio for s in samples)
    error = float(np.max(np.abs(a @ coef - b) * w))
    return StepModel(tuple(float(c) for c in coef), gpus_per_node, ratio, error)
