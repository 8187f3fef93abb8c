"""The Pollux agent's fitted view of a job: true speed unchanged, the speedup shown fitted.

yolov3 is the case of issue 26: truly, 8 GPUs on two nodes are slower than 4 on one in its
early epochs; seen on one node only, the fitted model's prior says 8 are faster.
"""

from __future__ import annotations

import pytest

from orchestrator.sim.models import ProfileJobModel
from orchestrator.sim.pollux_view import FittedViewJobModel
from tests.sim.test_fidelity import HAVE_TRACES

pytestmark = pytest.mark.skipif(not HAVE_TRACES, reason="Pollux traces not found")

RUNS = [((1,), 600.0), ((2,), 600.0), ((4,), 600.0), ((4, 4), 600.0), ((4, 4, 4, 4), 900.0)]


def test_the_job_runs_at_its_true_speed() -> None:
    fitted, true = FittedViewJobModel("yolov3"), ProfileJobModel("yolov3")
    for placement, seconds in RUNS * 3:
        fitted.speedup(16)  # asking for the view changes nothing
        assert fitted.advance(placement, seconds) == true.advance(placement, seconds)
        assert fitted.state() == true.state()
        assert fitted.remaining_time(placement) == true.remaining_time(placement)


def test_linear_until_measured_then_the_prior_beyond_the_nodes_run_on() -> None:
    job = FittedViewJobModel("yolov3")
    assert job.speedup(16) == ()  # nothing measured: linear, as the artifact's speedup_fn
    for placement, seconds in RUNS[:3]:  # 1, 2, then 4 GPUs, all on one node
        job.advance(placement, seconds)
    assert {nodes for nodes, _, _ in job.observed} == {1}
    view = job.speedup(16)
    truth = ProfileJobModel("yolov3")
    truth.epoch = job.epoch
    true = truth.speedup(16)
    assert true[7] < true[3]  # truly: 8 GPUs on 2 nodes lose to 4 on one
    assert view[7] > view[3]  # the fit's prior: inter-node costs 1.1 x intra-node
    assert view[3] == pytest.approx(true[3], rel=0.1)  # where it ran, about the truth
    job.advance((4, 4), 600.0)  # measured on 2 nodes: the prior gives way
    assert job.speedup(16)[7] < job.speedup(16)[3]


def test_the_view_is_cached_until_a_measurement_changes_it() -> None:
    job = FittedViewJobModel("yolov3")
    job.advance((2,), 60.0)
    view = job.speedup(8)
    assert job.speedup(8) is view  # the simulator rebuilds a job's view only on a new tuple
    job.advance((2,), 1.0)  # the same configuration, the same epoch: nothing new
    assert job.speedup(8) is view


def test_beyond_only_keeps_the_truth_where_the_job_ran() -> None:
    job = FittedViewJobModel("yolov3", beyond_only=True)
    for placement, seconds in RUNS[:3]:
        job.advance(placement, seconds)
    truth = ProfileJobModel("yolov3")
    truth.epoch = job.epoch
    true, view = truth.speedup(16), job.speedup(16)
    assert view[:4] == true[:4]  # one node, run on: the true speedup
    assert view[7] > view[3] > true[7]  # two nodes, not run on: the prior's gain from 4


def test_the_fair_share_baseline_sits_on_one_node() -> None:
    job = FittedViewJobModel("yolov3")
    assert job.fair_goodput(8) == 8.0  # nothing measured: linear (the artifact's r / replicas)
    for placement, seconds in RUNS[:4]:  # up to two nodes: the fit knows inter-node costs more
        job.advance(placement, seconds)
    view = job.speedup(16)
    assert job.fair_goodput(1) == pytest.approx(1.0)
    assert job.fair_goodput(4) == pytest.approx(view[3])  # one node either way
    assert job.fair_goodput(8) > view[7]  # 8 GPUs on one node: no inter-node sync
