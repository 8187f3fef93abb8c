"""What a parallel plan costs: step time and model-state memory per rank, for the search.

Step time of a config on ``g`` GPUs with ``T``-way tensor and ``P``-way pipeline parallelism
(``r = g / (T P)`` replicas, ZeRO stage ``z``), micro-batch ``m``, ``a`` micro-batches a step,
linear in its constants, fitted by non-negative least squares on relative error as
:mod:`orchestrator.tuner.perfmodel` is (``scipy.optimize.nnls``):

    t = c_opt * o  +  s / T * (c0 + c1 m + c2 m^2)  +  s * (k_tp0 + k_tp m * 2(T-1)/T)
        +  k_pp * a m [P > 1]  +  k_dp * v(z) * 2(r-1)/r / (T P)

- ``s = (a + P - 1) / P``: GPipe runs ``a + P - 1`` micro-batch slots of a stage holding
  ``1/P`` of the model, so ``(P - 1) / (a + P - 1)`` of the step is the pipeline bubble
  (Huang et al., GPipe, 2019); with ``P = 1``, ``s = a``.
- tensor parallelism splits each slot's compute ``T`` ways and adds per layer two
  all-reduces forward and two backward of the slot's activations (Megatron-LM, Shoeybi et al.
  2019): a ring all-reduce moves ``2(T-1)/T`` of them, plus a latency per slot.
- ``k_pp``: the activations a stage sends to the next, per sample.
- data-parallel sync moves the stage's gradients (``1/(T P)`` of the model) ``2(r-1)/r``
  times; ZeRO 1 adds the broadcast of updated parameters and ZeRO 3 the parameter gathers of
  forward and backward: ``v(z) = 1, 1.5, 1, 1.5`` for ``z = 0..3`` (Rajbhandari et al., ZeRO,
  SC 2020, sec. 7).
- ``o = 1 / (T P)``, over ``r`` again from ZeRO 1 on: the optimizer step updates the rank's
  share of the state.

Model state per rank (:func:`state_bytes`, bytes; exact, no fit): parameters, gradients and
``k`` optimizer tensors per parameter (AdamW 2, SGD with momentum 1), each over ``T P``, and
over ``r`` from ZeRO 3, 2 and 1 on respectively. A config whose state alone exceeds the
device's memory cannot run and is never tried (:func:`fits`).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from orchestrator.tuner.space import Config

__all__ = ["PlanModel", "PlanSample", "fit_plan_model", "fits", "state_bytes"]

_SYNC_VOLUME = {0: 1.0, 1: 1.5, 2: 1.0, 3: 1.5}


def state_bytes(config: Config, params: int, optimizer_states: int = 2) -> float:
    """Bytes of parameters, gradients and optimizer state one rank holds through a step of
    ``config`` (fp32), for a model of ``params`` parameters."""
    r, z = config.replicas, config.zero
    per_rank = 4.0 * params / (config.tp * config.pp)
    weights = per_rank / (r if z >= 3 else 1)
    grads = per_rank / (r if z >= 2 else 1)
    optimizer = optimizer_states * per_rank / (r if z >= 1 else 1)
    return weights + grads + optimizer


def fits(config: Config, params: int, memory_bytes: float, optimizer_states: int = 2) -> bool:
    """Whether ``config``'s model state fits ``memory_bytes`` per rank (activations come on
    top: the out-of-memory search of :mod:`orchestrator.tuner.oom` finds their limit)."""
    return state_bytes(config, params, optimizer_states) <= memory_bytes


@dataclass(frozen=True)
class PlanSample:
    """One measured config: its mean step seconds and its latency percentile of interest."""

    config: Config
    step_s: float
    latency_ms: float


def _features(c: Config) -> list[float]:
    t, p, r, a, m = c.tp, c.pp, c.replicas, c.grad_accum, c.micro_batch
    slots = (a + p - 1) / p
    ring_tp = 2.0 * (t - 1) / t
    ring_dp = 2.0 * (r - 1) / r
    opt = 1.0 / (t * p) / (r if c.zero >= 1 else 1)
    return [
        opt,
        slots / t,
        slots * m / t,
        slots * m * m / t,
        slots * (t > 1),
        slots * m * ring_tp,
        a * m * (p > 1),
        _SYNC_VOLUME[c.zero] * ring_dp / (t * p),
    ]


@dataclass(frozen=True)
class PlanModel:
    """Fitted step-time model of plans (one precision, checkpointing and compile setting).

    ``coef``: the fitted constants in the formula's order (``c_opt, c0, c1, c2, k_tp0, k_tp,
    k_pp, k_dp``); ``pct_ratio``: the median ratio of the latency percentile to the mean step;
    ``error``: the largest relative error of the fit on its own samples.
    """

    coef: tuple[float, ...]
    pct_ratio: float = 1.0
    error: float = 0.0

    def step_s(self, config: Config) -> float:
        """Predicted mean seconds per optimizer step."""
        return sum(k * f for k, f in zip(self.coef, _features(config), strict=True))

    def samples_per_s(self, config: Config) -> float:
        """Predicted throughput: the global batch over the step time."""
        t = self.step_s(config)
        return config.global_batch / t if t > 0 else float("inf")

    def latency_ms(self, config: Config) -> float:
        """Predicted latency percentile of a step."""
        return self.step_s(config) * 1000.0 * self.pct_ratio

    def best(
        self,
        candidates: Iterable[Config],
        *,
        max_latency_ms: float | None = None,
        params: int | None = None,
        memory_bytes: float | None = None,
    ) -> Config | None:
        """The candidate of the highest predicted throughput whose predicted latency is within
        ``max_latency_ms`` (when given) and whose model state fits ``memory_bytes`` (when
        given, with ``params``); ``None`` if none qualifies."""
        ok = [
            c
            for c in candidates
            if (max_latency_ms is None or self.latency_ms(c) <= max_latency_ms)
            and (params is None or memory_bytes is None or fits(c, params, memory_bytes))
        ]
        return max(ok, key=self.samples_per_s, default=None)


def fit_plan_model(samples: Sequence[PlanSample]) -> PlanModel | None:
    """Fit :class:`PlanModel` to measured samples (``None`` without any). A constant the
    samples do not exercise (no tensor-parallel run: ``k_tp``) stays 0: optimistic, so the
    search measures it rather than rule it out (as :mod:`orchestrator.tuner.perfmodel`)."""
    if not samples:
        return None
    import numpy as np
    from scipy.optimize import nnls

    a = np.array([_features(s.config) for s in samples], dtype=float)
    b = np.array([s.step_s for s in samples], dtype=float)
    w = 1.0 / np.maximum(b, 1e-12)
    coef, _ = nnls(a * w[:, None], b * w)
    ratios = sorted(s.latency_ms / (s.step_s * 1000.0) for s in samples if s.step_s > 0)
    ratio = ratios[len(ratios) // 2] if ratios else 1.0
    error = float(np.max(np.abs(a @ coef - b) * w))
    return PlanModel(tuple(float(c) for c in coef), ratio, error)
