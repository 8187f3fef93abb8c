"""The simulator reproduces the published Tiresias result (Pollux OSDI'21 artifact)."""

from __future__ import annotations

import pytest

from orchestrator.sim import Simulator, TraceError, pollux_workload, uniform_pool
from orchestrator.sim.profiles import traces_dir
from policies.scheduling import TiresiasSchedulingPolicy

try:
    traces_dir()
    HAVE_TRACES = True
except TraceError:
    HAVE_TRACES = False

pytestmark = pytest.mark.skipif(not HAVE_TRACES, reason="Pollux traces not found")


@pytest.mark.parametrize(("name", "published"), [("workload-3", 1870), ("workload-5", 1425)])
def test_tiresias_mean_jct_matches_published_at_half_load(name: str, published: float) -> None:
    jobs = pollux_workload(name, load=0.5)
    result = Simulator(jobs, TiresiasSchedulingPolicy(), uniform_pool(16, 4)).run()
    mean = result.summary()["bulk_mean_jct"]
    assert abs(mean - published) / published < 0.01


def test_missing_traces_give_a_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ORCH_POLLUX_TRACES", "/nonexistent")
    with pytest.raises(TraceError, match="ORCH_POLLUX_TRACES"):
        traces_dir()
