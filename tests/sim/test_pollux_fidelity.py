"""The reproduced Pollux passes the fidelity gate on the first jobs of a published workload.

The full gate (every workload, loads 0.5 and 1.0, within 10% of the published mean JCT) is
``bench/scheduler/pollux.py``; this is the same gate on the first twelve jobs of workload 6 at
load 0.5, whose published JCTs are in the artifact's result file
``simulator/results-jobload/pollux-0.5/summary.json`` (petuum/adaptdl, branch osdi21-artifact).
"""

from __future__ import annotations

import pytest

from orchestrator.sim import Simulator, pollux_workload, uniform_pool
from policies.scheduling import PolluxSchedulingPolicy
from tests.sim.test_fidelity import HAVE_TRACES

pytestmark = pytest.mark.skipif(not HAVE_TRACES, reason="Pollux traces not found")

PUBLISHED_JCT = {
    "cifar10-0": 732,
    "ncf-1": 112,
    "ncf-2": 120,
    "ncf-3": 133,
    "ncf-4": 122,
    "bert-5": 1395,
    "ncf-6": 107,
    "ncf-7": 94,
    "cifar10-8": 744,
    "cifar10-9": 758,
    "cifar10-10": 767,
    "cifar10-11": 730,
}
"""Published Pollux JCT (s) of workload 6's first twelve jobs at load 0.5."""


def test_pollux_reproduces_the_published_jcts_of_a_workloads_first_jobs() -> None:
    jobs = pollux_workload("workload-6", load=0.5, adaptive=True)[: len(PUBLISHED_JCT)]
    assert [j.name for j in jobs] == list(PUBLISHED_JCT)
    result = Simulator(jobs, PolluxSchedulingPolicy(), uniform_pool(16, 4)).run()
    jct = {r.name: r.completed_at - r.submit_time for r in result.records if r.completed_at}
    assert jct.keys() == PUBLISHED_JCT.keys()
    mean = sum(jct.values()) / len(jct)
    published = sum(PUBLISHED_JCT.values()) / len(PUBLISHED_JCT)
    assert abs(mean / published - 1) <= 0.10
    for name, seconds in jct.items():  # and job by job, not only on average
        assert abs(seconds / PUBLISHED_JCT[name] - 1) <= 0.10, name
