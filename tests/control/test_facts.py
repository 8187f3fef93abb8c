"""Work left from a run's progress report (pure arithmetic on the reported fields)."""

from __future__ import annotations

import pytest

from orchestrator.control.facts import PROGRESS, remaining_s


def test_work_left_is_at_the_step_rate_without_data_wait() -> None:
    # 60 steps of 32 samples left at 64 samples/s
    p = {"total_steps": 100, "step": 40, "global_batch": 32, "samples_per_s": 64.0}
    assert remaining_s(p) == pytest.approx(30.0)


def test_data_wait_slows_the_wall_clock_rate() -> None:
    # a quarter of the time making data: 64 samples/s of steps is 48 samples/s of wall clock
    p = {
        "total_steps": 100,
        "step": 40,
        "global_batch": 32,
        "samples_per_s": 64.0,
        "data_wait_share": 0.25,
    }
    assert remaining_s(p) == pytest.approx(40.0)
    assert remaining_s({**p, "data_wait_share": 1.0}) is None  # no step time: no rate
    assert "data_wait_share" in PROGRESS


def test_a_run_for_a_set_time_reports_its_time_left() -> None:
    assert remaining_s({"time_left_s": 12.5, "samples_per_s": 1.0}) == 12.5
    assert remaining_s({"step": 3}) is None
