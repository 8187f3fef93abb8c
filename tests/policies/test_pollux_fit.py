"""Pollux's fitted throughput model: its gradient, what it holds, and its prior for unseen nodes.

A hand-built job: compute ``0.08 + 0.012 x micro-batch`` seconds a step; true sync 0.02 s on one
node with 2 GPUs, 0.03 s with 4, and 0.5 s on two nodes (a slow network). Seen on one node only,
the fit takes two nodes to cost 1.1 x one node's sync, far below the true 0.5 s.
"""

from __future__ import annotations

import numpy as np
import pytest

from policies.scheduling.pollux_fit import (
    PRIOR_INTER_NODE,
    GradParams,
    PerfParams,
    _log_step_time,
    _objective,
    fit_perf_params,
    network_time,
    speedup_table,
)


def _observe(runs: list[tuple[int, int, int, float]]) -> PerfParams:
    """Fit to (nodes, replicas, micro-batch, sync) runs of the hand-built job (step time =
    compute + sync, no overlap)."""
    a = np.array(runs, dtype=np.float64)
    compute = 0.08 + 0.012 * a[:, 2]
    return fit_perf_params(a[:, 0], a[:, 1], a[:, 2], compute, compute + a[:, 3])


ONE_NODE = [(1, 1, 32, 0.0), (1, 1, 64, 0.0), (1, 2, 32, 0.02), (1, 4, 32, 0.03)]


def test_objective_gradient_matches_finite_differences() -> None:
    nodes = np.array([1.0, 1, 1, 2, 4])
    replicas = np.array([1.0, 2, 4, 8, 16])
    bsz = np.array([32.0, 32, 16, 64, 8])
    log_c = np.log(0.1 + 0.01 * bsz)
    log_s = np.log(0.1 + 0.01 * bsz + np.array([0, 0.02, 0.03, 0.5, 0.7]))
    x = np.array([0.05, 0.02, 0.3, 0.02, 0.01, 0.004, 1.7])
    _, grad = _objective(x, nodes, replicas, bsz, log_c, log_s)
    for i in range(len(x)):
        h = 1e-7 * max(abs(x[i]), 1e-3)
        up, down = x.copy(), x.copy()
        up[i] += h
        down[i] -= h
        fd = (
            _objective(up, nodes, replicas, bsz, log_c, log_s)[0]
            - _objective(down, nodes, replicas, bsz, log_c, log_s)[0]
        ) / (2 * h)
        assert grad[i] == pytest.approx(fd, rel=1e-4, abs=1e-6)


def _step(p: PerfParams, nodes: int, replicas: int, micro: int = 32) -> float:
    """The fitted time of one step (compute and sync overlapped as the model says)."""
    compute = np.array([p.alpha_c + p.beta_c * micro])
    sync = network_time(p, np.array([float(nodes)]), np.array([float(replicas)]))
    return float(np.exp(_log_step_time(p.gamma, compute, sync))[0])


def test_the_prior_prices_an_unseen_node_count_as_one_node() -> None:
    p = _observe(ONE_NODE)
    # nothing multi-node seen: the inter-node pair is the intra-node one times 1.1
    assert p.alpha_n == pytest.approx(PRIOR_INTER_NODE * p.alpha_r)
    assert p.beta_n == pytest.approx(PRIOR_INTER_NODE * p.beta_r)
    assert _step(p, 1, 4) == pytest.approx(0.464 + 0.03, rel=0.02)  # fitted to what it ran on
    # 8 GPUs on 2 nodes: truly 0.464 + 0.5 s a step; the prior says about one node's
    assert _step(p, 2, 8) < 0.51
    # so 8 GPUs look faster than 4 on one node (truly 4 x 0.494 / 0.964: half as fast per GPU)
    view = speedup_table(p, GradParams(sqr=1.0, var=10.0), 8, (32, 1024), (8, 64))
    assert view[7] > view[3] > view[0] == 1.0


def test_a_multi_node_run_replaces_the_prior() -> None:
    p = _observe([*ONE_NODE, (2, 8, 32, 0.5)])
    assert _step(p, 2, 8) == pytest.approx(0.964, rel=0.01)
    assert _step(p, 1, 4) == pytest.approx(0.494, rel=0.01)
    view = speedup_table(p, GradParams(sqr=1.0, var=10.0), 8, (32, 1024), (8, 64))
    assert view[7] < view[3]


def test_one_gpu_only_makes_synchronisation_free() -> None:
    # the artifact's fit on a single GPU: the network pairs stay at the bound (1e-8 s)
    p = _observe([(1, 1, 32, 0.0)])
    assert max(p.alpha_n, p.alpha_r, p.beta_n, p.beta_r) < 1e-7
    # one micro-batch seen: alpha_c held at half the compute time
    assert p.alpha_c == pytest.approx((0.08 + 0.384) / 2)
    # with a large gradient noise scale (big batches cost nothing) it scales linearly
    view = speedup_table(p, GradParams(sqr=1e-6, var=1.0), 4, (32, 1024), (8, 64))
    assert view == pytest.approx((1.0, 2.0, 3.0, 4.0), rel=1e-3)
