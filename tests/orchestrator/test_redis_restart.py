"""The embedded Redis killed under a running scheduler: restarted, and the jobs carry on.

A real embedded server (its own data directory), a control loop serving in a thread on the
in-process runtime, and the watchdog ``orch up`` runs. SIGKILL the server: the watchdog brings
it back on the same port with its data, the loop's rounds fail meanwhile and resume, its lease
is renewed (or taken back), and a job submitted afterwards is scheduled beside the one that
was running.
"""

from __future__ import annotations

import os
import signal
import threading
import time
from pathlib import Path

from orchestrator.config import Settings
from orchestrator.control.loop import ControlLoop
from orchestrator.runtime.local import LocalRuntime
from orchestrator.services import make_policy
from orchestrator.store import EmbeddedRedis, JobStore
from orchestrator.store.states import JobState
from orchestrator.store.watchdog import RedisWatchdog
from tests.control.test_loop import job


def _until(check: object, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            if check():  # type: ignore[operator]
                return
        except Exception:  # Redis down for a moment: look again
            pass
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.1)


def test_the_embedded_redis_is_restarted_and_the_scheduler_carries_on(tmp_path: Path) -> None:
    server = EmbeddedRedis(tmp_path)
    url = server.ensure_running()
    settings = Settings(
        redis_url=url,
        namespace="restart",
        data_dir=tmp_path,
        scheduler_interval_s=0.1,
        lease_ttl_ms=3000,
    )
    store = JobStore.from_url(url, settings.namespace)
    loop = ControlLoop(settings, store, LocalRuntime([("n0", 2)]), make_policy("shared"))
    stop = threading.Event()
    watchdog = RedisWatchdog(tmp_path, stop, every_s=0.2)
    watchdog.start()
    loop.acquire()
    errors: list[BaseException] = []

    def serve() -> None:
        try:
            loop.serve(stop)
        except BaseException as err:
            errors.append(err)

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        first = store.submit(job("first")).id
        _until(lambda: store.get(first).state is JobState.RUNNING, 20)
        time.sleep(1.5)  # past the append-only file's fsync (every second)
        pid = int((tmp_path / "redis" / "redis.pid").read_text())
        os.kill(pid, signal.SIGKILL)
        _until(lambda: watchdog.restarts >= 1 and server.url() == url, 20)
        second = _submit_when_up(store)
        _until(lambda: store.get(second).state is JobState.RUNNING, 30)
        assert store.get(first).state is JobState.RUNNING  # it never stopped
        assert thread.is_alive() and not errors
        assert store.lease_holder() == loop.owner
    finally:
        stop.set()
        thread.join(30)
        server.stop()


def _submit_when_up(store: JobStore) -> str:
    deadline = time.monotonic() + 20
    while True:
        try:
            return store.submit(job("second")).id
        except Exception:
            assert time.monotonic() < deadline, "Redis did not come back"
            time.sleep(0.2)
