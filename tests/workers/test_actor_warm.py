"""A warm pool's worker actor, called directly: warmed up before it has a job, then bound to
one (under Ray, see tests/e2e/test_warm.py)."""

from __future__ import annotations

import gc
import os
from collections.abc import Iterator
from typing import Any

import pytest

from tests.workers.helpers import tiny
from workers.actor import WorkerActor


class Reports:
    """A reporter factory collecting the reports."""

    def __init__(self) -> None:
        self.reports: list[dict[str, Any]] = []

    def __call__(self) -> Any:
        return self.reports.append


@pytest.fixture
def refrozen() -> Iterator[None]:
    """After the test, freeze again what the session froze once collected (tests/conftest.py),
    which the test's ``gc.unfreeze`` thawed: the test's own objects are gone by then."""
    yield
    gc.collect()
    gc.freeze()


@pytest.mark.usefixtures("refrozen")
def test_a_warmed_up_actor_bound_to_a_job_runs_it_and_says_it_started_warm() -> None:
    actor = WorkerActor("", 0, 1, num_threads=1)
    try:
        info = actor.warm_up()
    finally:
        gc.unfreeze()  # warm_up freezes what is alive: in a worker, not in the test process
    assert info["pid"] == os.getpid() and info["warm_up_s"] > 0
    sink = Reports()
    assert actor.bind("job-w", reporter_factory=sink, log_sink_factory=None, num_threads=1) > 0
    result = actor.run(tiny("mlp", steps=2).to_dict(), None, None)
    assert result["status"] == "finished"
    assert sink.reports and all(r["job_id"] == "job-w" and r["warm_start"] for r in sink.reports)


def test_a_fresh_actor_reports_a_cold_start() -> None:
    sink = Reports()
    WorkerActor("job-c", 0, 1, reporter_factory=sink).run(tiny("mlp").to_dict(), None, None)
    assert sink.reports and not any(r["warm_start"] for r in sink.reports)
