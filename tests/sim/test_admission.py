"""The admission desk in the simulator (issue 26): the verdicts a plan gives deadline jobs."""

from __future__ import annotations

import math

import pytest

from orchestrator.sim import SimConfig, Simulator, TraceJob, uniform_pool
from policies import SCHEDULING_POLICIES


def test_the_simulator_judges_deadline_jobs_on_a_plan() -> None:
    # 4 GPUs; at t=0 two rigid 4-GPU jobs of 1,000 s: 'soon' due at 1,500, 'later' at 2,000,
    # and one without a deadline. The plan runs 'soon' first: 30 s + 1.1 x 1,000 s = 1,130 s;
    # 'later' could start at 1,130 only, done at 2,260: declined, best effort
    trace = [
        TraceJob("later", 0.0, team="a", gpus=4, duration=1000.0, deadline=2000.0),
        TraceJob("soon", 0.0, team="a", gpus=4, duration=1000.0, deadline=1500.0),
        TraceJob("free", 0.0, team="a", gpus=4, duration=100.0),
    ]
    sim = Simulator(
        trace,
        SCHEDULING_POLICIES.create("shared"),
        uniform_pool(1, 4),
        config=SimConfig(interval_s=60.0, plan_admission=True),
    )
    result = sim.run()
    verdicts = {v.job_id: (t, v) for t, v in sim.admissions}
    assert set(verdicts) == {"soon", "later"}
    t, soon = verdicts["soon"]
    assert t == 0.0 and soon.admitted and soon.earliest == pytest.approx(1130.0)
    _, later = verdicts["later"]
    assert not later.admitted and later.earliest == pytest.approx(2260.0)
    assert later.start == pytest.approx(1130.0)
    assert "260 s after its deadline" in later.reason
    # the policy agrees: 'soon' (EDF, in the class) first, and it meets its deadline
    done = {r.name: r.completed_at for r in result.records}
    assert done["soon"] is not None and done["soon"] <= 1500.0
    assert math.isfinite(later.earliest)
