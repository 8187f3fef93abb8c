"""The mixed benchmark's inputs: the interactive generator, the team rule, the Philly window."""

from __future__ import annotations

import pytest

from orchestrator.sim.synthetic import SIZES, concurrent_gpus, interactive_sessions
from orchestrator.sim.trace import TraceJob, philly_window
from orchestrator.teams import teams_from_usage
from tests.sim.test_fidelity import HAVE_TRACES


def test_sessions_are_seeded_and_match_the_asked_load() -> None:
    a = interactive_sessions(86400.0 * 4, 50.0, {"x": 1.0, "y": 3.0}, seed=3)
    assert a == interactive_sessions(86400.0 * 4, 50.0, {"x": 1.0, "y": 3.0}, seed=3)
    assert a != interactive_sessions(86400.0 * 4, 50.0, {"x": 1.0, "y": 3.0}, seed=4)
    load = sum(j.gpus * j.duration for j in a) / (86400.0 * 4)
    assert 40 < load < 60
    assert {j.gpus for j in a} <= set(SIZES)
    assert all(j.job_class == "interactive" and j.wait_target == 60.0 for j in a)
    share_y = sum(j.team == "y" for j in a) / len(a)
    assert 0.65 < share_y < 0.85


def test_concurrent_gpus_percentile() -> None:
    def s(t: float, g: int, d: float) -> TraceJob:
        return TraceJob(name=f"{t}", submit_time=t, job_class="interactive", gpus=g, duration=d)

    # 0..10: 1 GPU; 10..20: 3 GPUs; 20..100: none; 100..200: 1 GPU
    jobs = [s(0, 1, 20), s(10, 2, 10), s(100, 1, 100)]
    assert concurrent_gpus(jobs, 40) == 0
    assert concurrent_gpus(jobs, 50) == 1
    assert concurrent_gpus(jobs, 99) == 3


def test_teams_from_usage_rule() -> None:
    cfg = teams_from_usage({"a": 300.0, "b": 100.0, "c": 0.1}, pool_gpus=100)
    by = {t.name: t for t in cfg.teams}
    assert by["a"].guaranteed_gpus == 37 and by["b"].guaranteed_gpus == 12
    assert by["a"].weight == 75.0 and by["c"].weight == 1.0
    assert sum(t.guaranteed_gpus for t in cfg.teams) <= 50


@pytest.mark.skipif(not HAVE_TRACES, reason="Pollux traces not found")
def test_philly_window_speeds_up_arrivals() -> None:
    one = philly_window("2017-10-16", 0.25)
    two = philly_window("2017-10-16", 0.25, speed=2.0)
    assert len(one) == len(two) > 100
    assert two[-1].submit_time == pytest.approx(one[-1].submit_time / 2)
    assert all(0 <= j.submit_time < 0.25 * 86400 for j in one)
