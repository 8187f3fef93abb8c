"""A standby scheduler and fencing, on a real Redis.

Fencing: once a control loop holds the lease, its store's state writes carry the holder, and
the transition script refuses them when someone else holds the lease (a deposed scheduler that
has not noticed yet writes nothing). Standby: two schedulers on one namespace, each a real
process; the second waits, and when the first is killed with SIGKILL it takes over, requeues
the dead one's jobs and schedules.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
import redis

from orchestrator.store import JobStore, LeaseLost
from orchestrator.store.states import JobState
from tests.control.test_loop import job

ROOT = Path(__file__).resolve().parents[2]


def test_a_deposed_schedulers_state_writes_are_refused(
    store: JobStore, redis_client: redis.Redis
) -> None:
    job_id = store.submit(job("fenced")).id
    lease = store.lease("host:1:old", ttl_ms=60_000)
    lease.acquire(store.namespace)
    try:
        store.fence = lease.owner
        store.transition(job_id, JobState.PLACED, expect=JobState.QUEUED, message="placed")
        # another scheduler took over (the old one stalled past its TTL and has not noticed)
        redis_client.set(store.keys.scheduler_lease, "host:2:new")
        with pytest.raises(LeaseLost, match="held by host:2:new"):
            store.transition(job_id, JobState.RUNNING, expect=JobState.PLACED)
        assert store.get(job_id).state is JobState.PLACED  # nothing written
        user = JobStore(redis_client, store.namespace)  # a user's write is not fenced
        assert user.transition(job_id, JobState.CANCELLING).state is JobState.CANCELLING
    finally:
        lease.release()


_SCHEDULER = textwrap.dedent(
    """
    import sys, threading
    from pathlib import Path
    from orchestrator.config import Settings
    from orchestrator.control.loop import ControlLoop
    from orchestrator.runtime.local import LocalRuntime
    from orchestrator.services import make_policy
    from orchestrator.store import JobStore

    url, ns, data = sys.argv[1:4]
    settings = Settings(redis_url=url, namespace=ns, data_dir=Path(data), standby=True,
                        lease_ttl_ms=1500, scheduler_interval_s=0.1)
    store = JobStore.from_url(url, ns)
    loop = ControlLoop(settings, store, LocalRuntime([("n0", 2)]), make_policy("shared"))
    stop = threading.Event()
    print("waiting", flush=True)
    if loop.acquire(standby=stop):
        print("active", loop.owner, flush=True)
        loop.serve(stop)
    """
)


def _start(redis_url: str, namespace: str, data: Path) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-c", _SCHEDULER, redis_url, namespace, str(data)],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )


def _line(proc: subprocess.Popen[str]) -> str:
    assert proc.stdout is not None
    return proc.stdout.readline().strip()


def _until(check: object, timeout_s: float) -> float:
    start = time.monotonic()
    while not check():  # type: ignore[operator]
        assert time.monotonic() - start < timeout_s, "timed out"
        time.sleep(0.05)
    return time.monotonic() - start


def test_a_standby_takes_over_when_the_active_scheduler_is_killed(
    store: JobStore, redis_url: str, tmp_path: Path
) -> None:
    active = _start(redis_url, store.namespace, tmp_path / "a")
    standby = None
    try:
        assert _line(active) == "waiting"
        owner = _line(active).split()[-1]  # "active <owner>"
        first = store.submit(job("first")).id
        _until(lambda: store.get(first).state is JobState.RUNNING, 20)
        standby = _start(redis_url, store.namespace, tmp_path / "b")
        assert _line(standby) == "waiting"
        time.sleep(2.0)  # more than a lease TTL: the standby is still waiting
        assert store.lease_holder() == owner
        active.send_signal(signal.SIGKILL)
        active.wait(10)
        took = _until(lambda: store.lease_holder() not in (None, owner), 10)
        assert took < 1.3 * 1.5 + 1.0  # within about a lease TTL of the kill
        assert _line(standby).startswith("active")
        # the dead scheduler's job was requeued and runs again under the new one; a new job
        # is scheduled too
        second = store.submit(job("second")).id
        for job_id in (first, second):
            _until(lambda j=job_id: store.get(j).state is JobState.RUNNING, 20)
        assert "requeued" in " ".join(e.get("message", "") for e in store.events(first))
    finally:
        for proc in (active, standby):
            if proc is not None and proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
                proc.kill()
                proc.wait(10)
