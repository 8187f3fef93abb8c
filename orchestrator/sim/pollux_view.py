"""A Pollux application that runs at its true speed but shows the policy Pollux's fitted view.

The published Pollux never sees a job's true goodput: its agent fits a throughput model to the
step times the job has measured on the placements it ran on, and the scheduler plans with that
model (petuum/adaptdl, ``simulator/simulator.py``: ``Job.update_params`` refits
``fit_perf_params`` on each new (nodes, replicas, micro-batch) measured in ``Job.step``, keeps
the latest gradient statistics, and ``Job.get_speedup_fn`` is linear until the first
measurement). :class:`FittedViewJobModel` does the same on top of
:class:`~orchestrator.sim.models.ProfileJobModel`: progress, step times and the batch a job
runs at are the profile's (unchanged), only :meth:`speedup` - what the policy reads - is the
fitted model's (:mod:`policies.scheduling.pollux_fit`).

It matters most beyond the nodes a job has run on: there the fit's prior takes inter-node
synchronisation to cost about what intra-node does, so a job whose true speed dips from one
node to two (yolov3) is still seen to gain, grows, and learns the true cost by running there.
"""

from __future__ import annotations

import numpy as np

from orchestrator.sim.models import ProfileJobModel
from policies.scheduling.pollux_fit import (
    PER_NODE,
    GradParams,
    PerfParams,
    best_goodput,
    fit_perf_params,
    speedup_table,
)


class FittedViewJobModel(ProfileJobModel):
    """:class:`ProfileJobModel` whose :meth:`speedup` is the Pollux agent's fitted view.

    Args:
        app, batch_size, root: as for :class:`ProfileJobModel`.
        beyond_only: the fit only beyond the nodes the job has run on: the true speedup on as
            many nodes as it has run on, and beyond, that on the last such count times the
            fit's gain from there. The artifact's job runs the batches its fit picks, which
            soon gives it several micro-batches to fit; ours runs the true best batch, often
            one micro-batch a placement, which leaves the fit's compute term held at the
            artifact's guess. Where the job has run, the truth stands in for a fit that has
            seen enough; beyond, only the prior can say.

    Attributes:
        observed: step and sync time (s) per (nodes, replicas, micro-batch) the job has run on.
        params: the fitted model (``None`` before the first measurement: the view is linear).
        grad: the gradient statistics of the latest step run.
    """

    def __init__(
        self, app: str, batch_size: int = 0, root: str | None = None, beyond_only: bool = False
    ) -> None:
        super().__init__(app, batch_size, root)
        self.beyond_only = beyond_only
        self.observed: dict[tuple[int, int, int], tuple[float, float]] = {}
        self.params: PerfParams | None = None
        self.grad: GradParams | None = None
        self._running = False
        self._view_key: tuple[object, ...] = ()
        self._view: tuple[float, ...] = ()

    def advance(self, placement: tuple[int, ...], seconds: float) -> float | None:
        """See :meth:`ProfileJobModel.advance`; each configuration it runs is measured."""
        self._running = True
        try:
            return super().advance(placement, seconds)
        finally:
            self._running = False

    def goodput(self, placement: tuple[int, ...]) -> float:
        """See :meth:`ProfileJobModel.goodput`; while advancing, also what the agent measures
        there (as the artifact's ``Job.step`` measures each stretch it runs, epoch by epoch)."""
        if self._running:
            self._measure(placement)
        return super().goodput(placement)

    def _measure(self, placement: tuple[int, ...]) -> None:
        micro, accum = self.config(placement)
        app = self.app
        nodes, replicas = sum(1 for g in placement if g), sum(placement)
        self.grad = GradParams(*app.grad_stats(replicas * micro * (accum + 1), self.epoch))
        key = (nodes, replicas, micro)
        if key in self.observed:
            return
        self.observed[key] = app.step_time(placement, micro)
        cols = np.array([(*k, *v) for k, v in self.observed.items()], dtype=np.float64)
        step, sync = cols[:, 3], cols[:, 4]
        self.params = fit_perf_params(cols[:, 0], cols[:, 1], cols[:, 2], step - sync, step)

    def speedup(self, max_gpus: int) -> tuple[float, ...]:
        """The fitted goodput on 1..``max_gpus`` GPUs relative to 1 GPU (empty, i.e. linear,
        before the first measurement), at the best batch for each, as Pollux plans with."""
        if self.params is None or self.grad is None:
            return ()
        seen = max(nodes for nodes, _, _ in self.observed) if self.beyond_only else 0
        key = (self.params, self.grad, max_gpus, seen, self.epoch if seen else -1)
        if key != self._view_key:
            app = self.app
            self._view_key = key
            fitted = speedup_table(
                self.params,
                self.grad,
                max_gpus,
                (app.init_batch_size, app.max_batch_size),
                (app.min_local_bsz, app.max_local_bsz),
            )
            self._view = fitted if not seen else _join(super().speedup(max_gpus), fitted, seen)
        return self._view

    def fair_goodput(self, gpus: int) -> float:
        """The fitted goodput on ``gpus`` GPUs of **one** node, in :meth:`speedup`'s unit (1 GPU
        is 1): what the artifact's Pollux divides each job's goodput by, its fair-share
        baseline. petuum/adaptdl ``simulator/pollux.py`` ``Problem.__init__`` sets
        ``_base_goodput`` to ``GoodputFunction.optimize(num_nodes=fair_nodes,
        num_replicas=fair_replicas)`` with ``fair_nodes = ceil(nodes x dominant share)``, 1
        in the 16-node cluster of 1-GPU replicas, whatever ``fair_replicas`` is (several nodes'
        worth when few jobs run): no inter-node synchronisation in the baseline. Linear (the
        artifact's ``r / num_replicas``) before the first measurement. With ``beyond_only``,
        the view's own goodput there times the fit's one-node over packed ratio."""
        if self.params is None or self.grad is None:
            return float(gpus)
        app = self.app
        good = best_goodput(
            self.params,
            self.grad,
            np.array([1.0, 1.0, -(-gpus // PER_NODE)]),
            np.array([1.0, gpus, gpus], dtype=np.float64),
            (app.init_batch_size, app.max_batch_size),
            (app.min_local_bsz, app.max_local_bsz),
        )
        if good[0] <= 0:
            return float(gpus)
        if not self.beyond_only or not self._view or good[2] <= 0:
            return float(good[1] / good[0])
        view = self._view[min(gpus, len(self._view)) - 1]
        return float(view * good[1] / good[2])


def _join(true: tuple[float, ...], fitted: tuple[float, ...], nodes: int) -> tuple[float, ...]:
    """``true`` on up to ``nodes`` full nodes, then ``fitted`` scaled to meet it there."""
    last = min(nodes * PER_NODE, len(true))
    if last >= len(fitted) or fitted[last - 1] <= 0:
        return true
    scale = true[last - 1] / fitted[last - 1]
    return true[:last] + tuple(f * scale for f in fitted[last:])
