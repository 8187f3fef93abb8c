"""A performance model of data-parallel training, fitted to the trials measured so far.

Step time of ``g`` GPUs at micro-batch ``m`` with ``a`` accumulated micro-batches, after
Pollux (Qiao et al., OSDI 2021, sec. 4.1) with its overlap exponent fixed at 1:

    t(g, m, a) = c_step + a * (c0 + c1 * m + c2 * m**2) + sync(g)
    sync(1) = 0;  sync(g) = s[N] + k * (g - 2)  with N = ceil(g / gpus_per_node) nodes

Two terms beyond Pollux's: ``c_step``, paid once per optimizer step (the optimizer itself), is
what gradient accumulation amortises; ``c2`` lets the time per sample grow with the
micro-batch (a CPU falling out of cache, attention growing with the batch of tokens), where
a linear model would always send the search to the largest micro-batch. ``c2`` is fitted
only once three micro-batches have been measured (two points do not show a curve).

Pollux has one sync constant for one node and one for several; here each node count has its
own, because measured clusters are not that regular (in the Pollux tables themselves, 2-node
placements sync slower than 3-node ones). Linear in the coefficients, so it is fitted by
non-negative least squares on relative error (``scipy.optimize.nnls``). What the data cannot
tell apart is settled on the optimistic side, so that the search measures it rather than
rule it out:

- until runs with two accumulations are measured, ``c_step`` and ``c0`` cannot be told
  apart; the whole constant is put in ``c_step`` (accumulation at its most useful);
- a node count not measured yet syncs as slowly as the slowest count measured below it
  (zero if none), or as fast as the fastest measured above it if that is faster: before any
  multi-GPU run, sync looks free; a count between two measured ones syncs as fast as the
  faster; a count beyond all measured ones is not assumed to sync faster than fewer nodes
  did.

Per-GPU throughput and latency of every config follow from ``t``; the profile uses the same
model to price extra GPUs.
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
_STEP, _MICRO, _SAMPLE, _SQUARE, _PER_GPU, _NODES = range(6)  # feature columns


def _nodes(g: int, per_node: int) -> int:
    return min(math.ceil(g / per_node), MAX_NODES)


def _features(g: int, m: int, a: int, per_node: int) -> list[float]:
    nodes = [0.0] * MAX_NODES
    if g > 1:
        nodes[_nodes(g, per_node) - 1] = 1.0
    return [1.0, a, a * m, a * m * m, (g - 2.0) if g > 1 else 0.0, *nodes]


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
        # the dot product with _features, written out (a strategy predicts every config of
        # the space at each decision); the same terms in the same order, so the same floats
        c, a, m = self.coef, grad_accum, micro_batch
        t = c[_STEP] * 1.0 + c[_MICRO] * a + c[_SAMPLE] * (a * m) + c[_SQUARE] * (a * m * m)
        if gpus > 1:
            t += c[_PER_GPU] * (gpus - 2.0)
            t += c[_NODES + _nodes(gpus, self.gpus_per_node) - 1]
        return t

    def scaled_to(self, sample: Sample) -> StepModel:
        """This model's shape scaled to pass through one measured ``sample`` of another
        family of settings (a prior for a family with a single point: one point cannot fit
        a curve, but a precision or compile change mostly scales the step time). Every
        coefficient is scaled, sync included; ``error`` stays this model's (the prior's own
        error is unknown)."""
        pred = self.step_s(sample.gpus, sample.micro_batch, sample.grad_accum)
        k = sample.step_s / pred if pred > 0 else 1.0
        return StepModel(
            tuple(c * k for c in self.coef), self.gpus_per_node, sample.pct_ratio, self.error
        )

    def with_factors(self, compute: float = 1.0, sync: float = 1.0, step: float = 1.0) -> StepModel:
        """This model with its per-sample compute (``c1``, ``c2``) times ``compute``, its
        sync terms times ``sync``, and then the whole step times ``step``: a prior for a
        family whose settings are known to change one of them (activation checkpointing
        recomputes the forward pass; FSDP adds all-gathers to DDP's gradient sync; a script
        setting measured elsewhere scales the step)."""
        coef = [c * step for c in self.coef]
        for i in (_SAMPLE, _SQUARE):
            coef[i] *= compute
        for i in range(_PER_GPU, len(coef)):
            coef[i] *= sync
        return StepModel(tuple(coef), self.gpus_per_node, self.pct_ratio, self.error)

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
    lines: dict[tuple[int, int], set[int]] = {}
    for s in samples:
        lines.setdefault((s.gpus, s.grad_accum), set()).add(s.micro_batch)
    if max(len(mbs) for mbs in lines.values()) < 3:
        # No curve from two points on a line (micro-batches spread over GPU counts would let
        # the curve soak up the sync cost): c2 stays 0.
        a[:, _SQUARE] = 0.0
    b = np.array([s.step_s for s in samples], dtype=float)
    w = 1.0 / np.maximum(b, 1e-12)  # relative error: fast and slow configs count alike
    coef, _ = nnls(a * w[:, None], b * w)
    accums = {s.grad_accum for s in samples}
    if len(accums) == 1:
        # One accumulation measured: per step and per micro-batch constants are
        # indistinguishable (see the module doc).
        coef[_STEP] += accums.pop() * coef[_MICRO]
        coef[_MICRO] = 0.0
    seen = {_nodes(s.gpus, gpus_per_node) for s in samples if s.gpus > 1}
    sync = {n: float(coef[_NODES + n - 1]) for n in seen}
    for n in range(1, MAX_NODES + 1):
        if n not in seen:
            below = max((v for k, v in sync.items() if k < n), default=0.0)
            above = min((v for k, v in sync.items() if k > n), default=below)
            coef[_NODES + n - 1] = min(below, above)
    ratio = statistics.median(s.pct_ratio for s in samples)
    error = float(np.max(np.abs(a @ coef - b) * w))
    return StepModel(tuple(float(c) for c in coef), gpus_per_node, ratio, error)
