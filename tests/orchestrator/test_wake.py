"""The wake channel: submissions and cancels wake a subscriber (the control loop), on real Redis."""

from __future__ import annotations

import threading
import time

from orchestrator.spec import parse_spec
from orchestrator.store import JobStore
from orchestrator.store.states import JobState

SPEC = parse_spec(
    {
        "name": "wake",
        "team": "t",
        "class": "interactive",
        "workload": "mlp",
        "sla": {"latency": {"max_ms": 50}},
        "run": {"steps": 5},
    }
)


def test_a_submission_and_a_cancel_each_wake_the_subscriber_once(store: JobStore) -> None:
    stop = threading.Event()
    wakeups = store.wakeups()
    try:
        assert not wakeups.wait(0.05, stop)  # nothing published yet
        queued = store.submit(SPEC).id
        running = store.submit(SPEC).id
        # both deliveries reach the subscription's socket before the wait (under load the second
        # could otherwise land just after the first wait drained, and be counted as a new one)
        time.sleep(0.5)
        assert wakeups.wait(10, stop)  # both submissions, taken as one wake-up
        assert not wakeups.wait(0.05, stop)
        store.cancel(queued)  # a queued job is cancelled at once: nothing for the loop to do
        assert not wakeups.wait(0.05, stop)
        store.transition(running, JobState.PLACED, expect=JobState.QUEUED)
        store.cancel(running)  # cancelling: the loop must stop its run
        assert wakeups.wait(10, stop)
        stop.set()
        assert not wakeups.wait(10, stop)  # a stop ends the wait at once
    finally:
        wakeups.close()
