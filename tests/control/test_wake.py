"""``ControlLoop.serve`` wakes on submissions and cancels instead of waiting a polling interval
(real Redis, the in-process runtime)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from pathlib import Path

from orchestrator.config import Settings
from orchestrator.control.loop import ControlLoop
from orchestrator.runtime.local import LocalRuntime
from orchestrator.services import make_policy
from orchestrator.spec import parse_spec
from orchestrator.store import JobStore

INTERVAL_S = 30.0  # rounds this far apart: only a wake-up explains a reaction within TIMEOUT_S
TIMEOUT_S = 10.0


def until(what: str, ready: Callable[[], object]) -> None:
    deadline = time.monotonic() + TIMEOUT_S
    while not ready():
        assert time.monotonic() < deadline, f"no {what} within {TIMEOUT_S} s"
        time.sleep(0.02)


def test_a_submission_and_a_cancel_are_acted_on_between_polling_rounds(
    store: JobStore, tmp_path: Path
) -> None:
    settings = Settings(
        redis_url="unused",
        namespace=store.namespace,
        data_dir=tmp_path,
        scheduler_interval_s=INTERVAL_S,
    )
    rt = LocalRuntime([("n0", 1)])
    loop = ControlLoop(settings, store, rt, make_policy("gang"))
    loop.lease.acquire(store.namespace)
    stop = threading.Event()
    thread = threading.Thread(target=loop.serve, args=(stop,), daemon=True)
    thread.start()
    try:
        until("first round", lambda: store.pool_view.read() is not None)
        spec = parse_spec(
            {
                "name": "woken",
                "team": "t",
                "class": "interactive",
                "workload": "mlp",
                "sla": {"latency": {"max_ms": 50}},
                "run": {"steps": 5},
            }
        )
        job_id = store.submit(spec).id
        until("launch after the submission", lambda: [x.job_id for x in rt.launches] == [job_id])
        store.cancel(job_id)
        until("stop after the cancel", lambda: rt.stops == [job_id])
    finally:
        stop.set()
        thread.join(TIMEOUT_S)
    assert not thread.is_alive()  # a stop also ends the wait at once
