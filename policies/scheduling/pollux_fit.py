"""Pollux's fitted throughput model: what its agent believes a job's goodput is, from what it ran.

The published Pollux plans with each job's *fitted* model, not the true one. This module is the
OSDI'21 artifact's model, re-derived (petuum/adaptdl, ``simulator/goodput.py``:
``PerfParams``, ``fit_perf_params``, ``_obj_fn``, ``_predict_*``,
``GoodputFunction.optimize``; ``simulator/speedup.py``: ``SpeedupFunction``):

* the time of one micro-batch step is ``T = (T_c ** gamma + T_n ** gamma) ** (1 / gamma)``,
  compute ``T_c = alpha_c + beta_c * local_bsz`` and network ``T_n = alpha + beta *
  max(replicas - 2, 0)``, with ``(alpha_n, beta_n)`` on several nodes, ``(alpha_r, beta_r)``
  on one node with several GPUs, nothing on one GPU; an accumulation step costs ``T_c``;
* :func:`fit_perf_params` fits the seven parameters to the job's observed (compute time, step
  time) per (nodes, GPUs, micro-batch) it has run on, minimising the RMS log-error of both plus
  two small regularisers, with the parameters that nothing observed can tell held at the
  bound. Its **prior**: with no multi-node observation yet, inter-node synchronisation is
  taken to cost 1.1 x the intra-node one (``alpha_n >= 1.1 alpha_r``, ``beta_n >= 1.1
  beta_r``), and with no multi-GPU observation at all, synchronisation is free. A job seen on
  one node therefore looks nearly as fast on two as the one-node curve extended, whatever the
  network really costs, until it has run there;
* :func:`speedup_table` is the goodput on 1..n GPUs (packed, 4 a node) at the best of 50 global
  batch sizes (with accumulation), relative to 1 GPU, as ``SpeedupFunction``; statistical
  efficiency from the one gradient-statistics pair last measured, extrapolated to other batch
  sizes by the gradient noise scale, as the artifact's ``GoodputFunction.efficiency``.

The gradient of the fitting objective is written out here (the artifact takes it from
``autograd``); the optimiser is the same (``scipy.optimize.minimize``, L-BFGS-B, the
artifact's bounds and starting point), so a fit may differ from the artifact's in the last
digits, not in what is held or assumed.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, NamedTuple

import numpy as np

if TYPE_CHECKING:
    from numpy.typing import NDArray

PRIOR_INTER_NODE = 1.1
"""With no multi-node observation, inter-node sync costs at least this times intra-node."""
PER_NODE = 4
"""GPUs a node holds in the Pollux cluster (16 nodes of 4 GPUs): the packed placement."""
BATCH_SIZES = 50
"""Global batch sizes the goodput optimisation tries (``np.geomspace``'s default, as there)."""
_TINY = 1e-8  # the artifact's lower bound of every alpha and beta, and its "no time"


class PerfParams(NamedTuple):
    """The seven parameters of the step-time model (the artifact's ``PerfParams``)."""

    alpha_c: float
    beta_c: float
    alpha_n: float
    beta_n: float
    alpha_r: float
    beta_r: float
    gamma: float


class GradParams(NamedTuple):
    """The squared gradient norm and gradient variance last measured (``GradParams``)."""

    sqr: float
    var: float


def network_time(
    params: PerfParams, nodes: NDArray[np.float64], replicas: NDArray[np.float64]
) -> NDArray[np.float64]:
    """Synchronisation time per step: the slowest link's constant plus a term per replica."""
    multi = nodes > 1
    intra = ~multi & (replicas > 1)
    alpha = np.where(multi, params.alpha_n, np.where(intra, params.alpha_r, _TINY))
    beta = np.where(multi, params.beta_n, np.where(intra, params.beta_r, _TINY))
    out: NDArray[np.float64] = alpha + beta * np.maximum(replicas - 2, _TINY)
    return out


def _log_step_time(
    gamma: float, compute: NDArray[np.float64], network: NDArray[np.float64]
) -> NDArray[np.float64]:
    out: NDArray[np.float64] = np.log(compute**gamma + network**gamma) / gamma
    return out


def fit_perf_params(
    nodes: NDArray[np.float64],
    replicas: NDArray[np.float64],
    local_bsz: NDArray[np.float64],
    compute_time: NDArray[np.float64],
    step_time: NDArray[np.float64],
    tol: float | None = None,
) -> PerfParams:
    """Fit :class:`PerfParams` to observations, one per (nodes, GPUs, micro-batch) run on.

    As the artifact's ``fit_perf_params``: start at ``(0.1, 0.01) x 3, 1.001``; hold
    ``alpha_c`` at half the mean compute time when a single micro-batch was seen, the
    inter-node pair at the bound with no multi-node observation, the intra-node pair with no
    one-node multi-GPU one, both ``beta`` with no run on more than 2 GPUs; then the prior
    (see the module docstring). ``tol``: the optimiser's tolerance (Sia's artifact fits with
    ``1e-5``; Pollux's with scipy's default).
    """
    from scipy.optimize import minimize  # heavy: only when a job is first measured

    data = (nodes, replicas, local_bsz, np.log(compute_time), np.log(step_time))
    x0 = [1e-1, 1e-2] * 3 + [1.0 + 1e-3]
    lower = [_TINY, _TINY] * 3 + [1.0]
    upper = [math.inf, math.inf] * 3 + [10.0]
    held: list[int] = []
    if len(np.unique(local_bsz)) == 1:
        x0[0] = lower[0] = upper[0] = float(np.mean(compute_time)) / 2
    if not np.any(nodes > 1):
        held += [2, 3]
    if not np.any((nodes == 1) & (replicas > 1)):
        held += [4, 5]
    if not np.any(replicas > 2):
        held += [3, 5]
    for i in held:
        x0[i] = upper[i] = lower[i]
    result = minimize(
        _objective,
        x0,
        args=data,
        jac=True,
        method="L-BFGS-B",
        bounds=list(zip(lower, upper, strict=True)),
        tol=tol,
    )
    p = [float(v) for v in result.x]
    if not np.any(nodes > 1):  # the prior: inter-node costs at least 1.1 x intra-node
        p[2] = max(p[2], p[4] * PRIOR_INTER_NODE)
        p[3] = max(p[3], p[5] * PRIOR_INTER_NODE)
    return PerfParams(*p)


def _objective(
    x: NDArray[np.float64],
    nodes: NDArray[np.float64],
    replicas: NDArray[np.float64],
    local_bsz: NDArray[np.float64],
    log_compute: NDArray[np.float64],
    log_step: NDArray[np.float64],
) -> tuple[float, NDArray[np.float64]]:
    """The artifact's ``_obj_fn`` and its gradient: RMS log-error of the compute and step
    times, ``1e-3 (gamma - 1) ** 2`` and ``1e-2 ((beta_n / alpha_n) ** 2 + (beta_r /
    alpha_r) ** 2)`` (an optimistic model: little retrogression)."""
    p = PerfParams(*(float(v) for v in x))
    g = p.gamma
    compute = p.alpha_c + p.beta_c * local_bsz
    network = network_time(p, nodes, replicas)
    cg, ng = compute**g, network**g
    total = cg + ng
    log_pred = np.log(total) / g
    n = len(local_bsz)
    d1 = np.log(compute) - log_compute
    d2 = log_pred - log_step
    e1 = math.sqrt(float(np.mean(d1**2)))
    e2 = math.sqrt(float(np.mean(d2**2)))
    w1 = d1 / (n * e1) if e1 > 0 else np.zeros(n)  # d e1 / d log(compute)
    w2 = d2 / (n * e2) if e2 > 0 else np.zeros(n)  # d e2 / d log_pred
    d_compute = w1 / compute + w2 * cg / (compute * total)
    d_network = w2 * ng / (network * total)
    d_gamma = w2 * (
        -np.log(total) / g**2 + (cg * np.log(compute) + ng * np.log(network)) / (g * total)
    )
    multi = nodes > 1
    intra = ~multi & (replicas > 1)
    m = np.maximum(replicas - 2, _TINY)
    rn, rr = p.beta_n / p.alpha_n, p.beta_r / p.alpha_r
    grad = np.array(
        [
            d_compute.sum(),
            (d_compute * local_bsz).sum(),
            (d_network * multi).sum() - 2e-2 * rn**2 / p.alpha_n,
            (d_network * multi * m).sum() + 2e-2 * rn / p.alpha_n,
            (d_network * intra).sum() - 2e-2 * rr**2 / p.alpha_r,
            (d_network * intra * m).sum() + 2e-2 * rr / p.alpha_r,
            d_gamma.sum() + 2e-3 * (g - 1),
        ]
    )
    value = e1 + e2 + 1e-3 * (g - 1) ** 2 + 1e-2 * (rn**2 + rr**2)
    return value, grad


def best_goodput(
    params: PerfParams,
    grad: GradParams,
    nodes: NDArray[np.float64],
    replicas: NDArray[np.float64],
    batch_range: tuple[int, int],
    local_range: tuple[int, int],
) -> NDArray[np.float64]:
    """Goodput (samples of progress per second, any fixed unit) on each (nodes, replicas)
    at its best global batch, as ``GoodputFunction.optimize(..., accumulation=True)``: 50
    batch sizes geometric from ``max(B0, min_local x replicas)`` to the largest, accumulation
    steps so a micro-batch fits (at least 1 on one GPU above ``B0``), micro-batches outside
    ``local_range`` worth nothing."""
    return optimize(params, grad, nodes, replicas, batch_range, local_range)[0]


def optimize(
    params: PerfParams,
    grad: GradParams,
    nodes: NDArray[np.float64],
    replicas: NDArray[np.float64],
    batch_range: tuple[int, int],
    local_range: tuple[int, int],
) -> tuple[NDArray[np.float64], NDArray[np.float64], NDArray[np.float64]]:
    """:func:`best_goodput` with the configuration that reaches it: ``(goodput, micro-batch,
    accumulation steps)`` per (nodes, replicas), the first best of the candidates, as
    ``GoodputFunction.optimize`` returns them (what a job then runs at)."""
    init_bsz, max_bsz = batch_range
    lo, hi = local_range
    eps = 1e-8
    start = np.maximum(init_bsz, lo * replicas)
    batch = np.geomspace(start, max_bsz, BATCH_SIZES)  # (batch sizes, configurations)
    local = batch / replicas
    accum = np.ceil(local / hi - eps) - 1
    accum = np.where((replicas == 1) & (local > init_bsz + eps), np.maximum(accum, 1), accum)
    atomic = np.ceil(local / (accum + 1) - eps)
    p = params
    compute = p.alpha_c + p.beta_c * atomic
    step = np.exp(_log_step_time(p.gamma, compute, network_time(p, nodes, replicas)))
    used = replicas * atomic * (accum + 1)
    scale = used / init_bsz
    denom = grad.var / scale + grad.sqr
    with np.errstate(divide="ignore", invalid="ignore"):
        gain = np.where(denom > 0, (grad.var + grad.sqr) / denom, 1.0)
    goodput = used / (accum * compute + step) * gain / scale
    goodput = np.where((lo <= atomic) & (atomic <= hi), goodput, 0.0)
    best = np.argmax(goodput, axis=0)
    cols = np.arange(goodput.shape[1])
    return goodput[best, cols], atomic[best, cols], accum[best, cols]


def speedup_table(
    params: PerfParams,
    grad: GradParams,
    max_gpus: int,
    batch_range: tuple[int, int],
    local_range: tuple[int, int],
) -> tuple[float, ...]:
    """Fitted goodput on 1..``max_gpus`` GPUs packed :data:`PER_NODE` a node, relative to 1 GPU
    (``SpeedupFunction``'s view of a job, as the search reads a ``speedup`` tuple)."""
    replicas = np.arange(1, max_gpus + 1, dtype=np.float64)
    nodes = np.ceil(replicas / PER_NODE)
    good = best_goodput(params, grad, nodes, replicas, batch_range, local_range)
    base = float(good[0])
    return tuple(float(v) / base for v in good) if base > 0 else ()
