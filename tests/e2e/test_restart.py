"""`orch up` killed mid-job (SIGKILL): the next one loses no job and starts none twice."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from orchestrator.store import JobStore
from orchestrator.store.states import JobState
from tests.e2e.conftest import ROOT
from tests.e2e.jobs import RESUMED_ONCE, mlp_job, state_events


def _up(env: dict[str, str], log: Path) -> subprocess.Popen[bytes]:
    exe = Path(sys.executable).parent / "orch"
    return subprocess.Popen(
        [str(exe), "up"], env=env, cwd=ROOT, stdout=log.open("wb"), stderr=subprocess.STDOUT
    )


def _wait(store: JobStore, job_id: str, pred: Any, what: str, timeout_s: float = 120) -> None:
    deadline = time.monotonic() + timeout_s
    while not pred():
        assert time.monotonic() < deadline, f"{job_id}: timed out waiting for {what}"
        time.sleep(0.2)


def test_killed_scheduler_process_loses_no_job(
    ray_cluster: Any, redis_url: str, store: JobStore, tmp_path: Path
) -> None:
    env = {
        **os.environ,
        "REDIS_URL": redis_url,
        "RAY_ADDRESS": ray_cluster.address,
        "ORCH_NAMESPACE": store.namespace,
        "ORCH_DATA_DIR": str(tmp_path),
        "ORCH_SCHEDULER_INTERVAL_S": "0.2",
    }
    first = _up(env, tmp_path / "first.log")
    job_id = store.submit(mlp_job("survivor", steps=3000, checkpoint_every=25)).id
    try:
        _wait(
            store,
            job_id,
            lambda: int(store.metrics(job_id).get("step", 0)) >= 50,
            "50 steps",
        )
    finally:
        first.send_signal(signal.SIGKILL)
        first.wait(30)
    assert store.get(job_id).state is JobState.RUNNING  # what the dead scheduler left behind

    second = _up(env, tmp_path / "second.log")
    try:
        _wait(
            store,
            job_id,
            lambda: store.get(job_id).terminal,
            "the end",
            timeout_s=240,
        )
    finally:
        second.send_signal(signal.SIGTERM)
        second.wait(60)
    rec = store.get(job_id)
    assert rec.state is JobState.FINISHED, (rec.message, (tmp_path / "second.log").read_text())
    assert rec.result and rec.result["steps_done"] == 3000
    assert rec.result["resumed_from_step"] >= 25
    assert [e["event"] for e in state_events(store.events(job_id))] == RESUMED_ONCE
    assert second.returncode == 0
