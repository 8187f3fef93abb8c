"""A frozen scheduler and its standby (issue 28): SIGSTOP the active scheduler while its jobs
run; the standby takes over and restarts them; the frozen one's workers see their lease
generation is no longer current and stop without writing a checkpoint or a report; SIGCONT
the old one, which finds its lease gone and stops. Every job finishes exactly once."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

from orchestrator.store import JobStore
from orchestrator.store.states import JobState
from tests.e2e.conftest import ROOT
from tests.e2e.jobs import HOLDER, mlp_job

_SCHEDULER = textwrap.dedent(
    """
    import sys, time
    from pathlib import Path
    from orchestrator.config import Settings
    from orchestrator.services import serve_in_background

    url, ray, ns, data = sys.argv[1:5]
    settings = Settings(redis_url=url, ray_address=ray, namespace=ns, data_dir=Path(data),
                        standby=True, lease_ttl_ms=1500, scheduler_interval_s=0.2,
                        warm_workers=0, policy="gang")
    running = serve_in_background(settings)
    while not running.scheduler.lease.held:
        time.sleep(0.05)
    print("active", flush=True)
    running.thread.join()
    """
)


def _start(args: list[str], log: Path) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-c", _SCHEDULER, *args],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        stdout=subprocess.PIPE,
        stderr=log.open("w"),
        text=True,
    )


def _until(check: Any, what: str, timeout_s: float = 120) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.2)


def test_a_frozen_schedulers_jobs_finish_exactly_once(
    ray_cluster: Any, redis_url: str, store: JobStore, tmp_path: Path
) -> None:
    args = [redis_url, ray_cluster.address, store.namespace, str(tmp_path / "data")]
    active = _start(args, tmp_path / "active.log")
    standby = None
    try:
        assert active.stdout is not None and active.stdout.readline().strip() == "active"
        jobs = [
            store.submit(
                mlp_job(f"frozen-{i}", workload=HOLDER, duration_s=25, checkpoint_every=20)
            ).id
            for i in range(2)
        ]
        _until(lambda: all(store.get(j).state is JobState.RUNNING for j in jobs), "running")
        _until(lambda: all(int(store.metrics(j).get("step") or 0) >= 20 for j in jobs), "steps")
        standby = _start(args, tmp_path / "standby.log")
        active.send_signal(signal.SIGSTOP)  # frozen: its workers (Ray actors) run on
        assert standby.stdout is not None and standby.stdout.readline().strip() == "active"
        time.sleep(8)  # the old workers overlap the new runs for a while
        active.send_signal(signal.SIGCONT)  # it finds its lease gone and stops acting
        done = {JobState.FINISHED, JobState.FAILED}
        _until(lambda: all(store.get(j).state in done for j in jobs), "the end", 300)
        for job_id in jobs:
            rec = store.get(job_id)
            assert rec.state is JobState.FINISHED, rec.message
            ended = [e for e in store.events(job_id) if e.get("event") in {"finished", "failed"}]
            assert len(ended) == 1, ended
            # the standby restarted it: two runs of the job overlapped
            assert "requeued" in " ".join(e.get("message", "") for e in store.events(job_id))
        steps = {j: int(store.metrics(j)["step"]) for j in jobs}
        time.sleep(3)  # the stale copies, if any were still going, would report now
        for job_id in jobs:
            assert store.get(job_id).state is JobState.FINISHED
            assert int(store.metrics(job_id)["step"]) == steps[job_id]
    finally:
        for proc in (active, standby):
            if proc is not None and proc.poll() is None:
                proc.send_signal(signal.SIGCONT)
                proc.send_signal(signal.SIGTERM)
                try:
                    proc.wait(30)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait(10)
