"""The worker actor, called directly (the orchestrator's tests run it under real Ray)."""

from __future__ import annotations

import ipaddress
import pickle
import threading
import time
from pathlib import Path
from typing import Any

from tests.workers.helpers import tiny
from workers.actor import WorkerActor

REPORTS: list[dict[str, Any]] = []


class ListReporter:
    """A picklable reporter factory, as the orchestrator's Redis reporter will be."""

    def __call__(self) -> Any:
        return REPORTS.append


def test_run_returns_the_result_dict(tmp_path: Path) -> None:
    actor = WorkerActor("job-1", 0, 1)
    result = actor.run(tiny("mlp", steps=2).to_dict(), None, str(tmp_path))
    assert result["status"] == "finished" and result["steps_done"] == 2
    assert (tmp_path / "checkpoint.pt").exists()


def test_rank0_reports_with_the_job_id() -> None:
    REPORTS.clear()
    factory = pickle.loads(pickle.dumps(ListReporter()))
    WorkerActor("job-2", 0, 1, reporter_factory=factory).run(tiny("mlp").to_dict(), None, None)
    assert REPORTS and all(r["job_id"] == "job-2" for r in REPORTS)
    assert REPORTS[-1]["status"] == "finished"


def test_other_ranks_do_not_report() -> None:
    actor = WorkerActor("job-3", 1, 2, reporter_factory=ListReporter())
    assert actor._make_report(None) is None


def test_request_stop_during_run_stops_it(tmp_path: Path) -> None:
    actor = WorkerActor("job-4", 0, 1)
    results: list[dict[str, Any]] = []
    config = tiny("mlp", steps=None, duration_s=60.0).to_dict()
    runner = threading.Thread(target=lambda: results.append(actor.run(config, None, str(tmp_path))))
    runner.start()
    time.sleep(0.5)
    actor.request_stop()
    runner.join(timeout=30)
    assert results[0]["status"] == "stopped"
    steps = results[0]["steps_done"]  # none, if set-up outlasted the wait on a loaded machine
    assert results[0]["checkpoint_path"] == str(tmp_path / f"step-{steps:09d}")


def test_request_stop_before_run_stops_at_once() -> None:
    actor = WorkerActor("job-5", 0, 1)
    actor.request_stop()
    result = actor.run(tiny("mlp", steps=10).to_dict(), None, None)
    assert result["status"] == "stopped" and result["steps_done"] == 0


def test_node_address_is_an_ip_and_a_port() -> None:
    ip, port = WorkerActor("job-6", 0, 1).node_address()
    ipaddress.ip_address(ip)
    assert 0 < port < 65536
