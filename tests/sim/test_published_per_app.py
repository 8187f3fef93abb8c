"""The published per-application JCTs of the Pollux benchmark cover the workloads' jobs.

``bench/data/pollux/published-per-app.json`` (derived from the artifact's per-job result files
by ``bench/scheduler/published_per_app.py``) gives, per policy, load, workload and application,
the job count and the sum of the published JCTs; the benchmark checks its per-workload means
against the published table itself. Here: each count is that application's number of jobs in
the workload file the simulator reads.
"""

from __future__ import annotations

from collections import Counter

import pytest

from bench.scheduler.per_app import load_published
from orchestrator.sim import pollux_workload
from tests.sim.test_fidelity import HAVE_TRACES

pytestmark = pytest.mark.skipif(not HAVE_TRACES, reason="Pollux traces not found")


def test_published_job_counts_per_application_match_the_workloads() -> None:
    published = load_published()
    assert {(p, load) for p, load, _ in published} == {
        (p, load) for p in ("pollux", "tiresias") for load in (1.0, 0.5)
    }
    for (_, load, workload), apps in published.items():
        jobs = pollux_workload(f"workload-{workload}", load)
        assert Counter(j.app for j in jobs) == {app: n for app, (n, _) in apps.items()}
        assert all(total > 0 for _, total in apps.values())
