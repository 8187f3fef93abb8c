"""The runtime contract: what the control loop relies on of every runtime, as one reusable
test class (as Optuna's ``testing/pytest_storages.py`` is for its storages).

:class:`~orchestrator.runtime.local.LocalRuntime` stands in for the Ray runtime in every control
test, so both must keep the same promises: a run reports ``STARTED`` before ``ENDED``, each
event carries the serial of the launch it belongs to (a relaunch of the same job included), a
stop ``at_once`` ends the run without waiting for a checkpoint, a graceful stop ends it
``STOPPED`` with a checkpoint written in the launch's checkpoint folder, a stop of a job with no
run does nothing, a resize in place is refused for a run that is not a service endpoint's (and
a job with no run), and :meth:`alive` holds a job from its launch until its end is polled.

An implementation's test class subclasses :class:`RuntimeContract` and gives a ``driver``
fixture (a :class:`Driver`): how to make its launches and how a run of it ends on its own.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol

import pytest

from orchestrator.runtime.base import EventKind, Launch, OutcomeKind, RunEvent, Runtime

TIMEOUT_S = 120.0
"""How long a contract test waits for an event (a loaded 2-core machine starts a gang in
seconds; nothing here is timed)."""


class Driver(Protocol):
    """One runtime under the contract, and what the contract cannot ask through the protocol."""

    runtime: Runtime

    def launch(self, name: str, serial: int, *, long: bool = False) -> Launch:
        """A 1-GPU run of job ``name``: a few steps, or (``long``) one that runs until stopped."""
        ...

    def finish(self, launch: Launch) -> None:
        """Let a short run end on its own (the Ray runtime's does; a local one is told to)."""
        ...

    def stepped(self, launch: Launch) -> bool:
        """Whether the run has done a step, so a graceful stop has work to keep."""
        ...


def until(what: str, ready: Callable[[], Any], timeout_s: float = TIMEOUT_S) -> Any:
    """Poll ``ready`` until it returns something true; fail naming ``what`` on timeout."""
    deadline = time.monotonic() + timeout_s
    while not (value := ready()):
        assert time.monotonic() < deadline, f"no {what} within {timeout_s:g} s"
        time.sleep(0.05)
    return value


class Events:
    """Everything a runtime's polls handed back, kept in order."""

    def __init__(self, runtime: Runtime) -> None:
        self.runtime = runtime
        self.seen: list[RunEvent] = []

    def of(self, job_id: str) -> list[RunEvent]:
        """The events of ``job_id`` so far (polling the runtime first)."""
        self.seen += self.runtime.poll()
        return [e for e in self.seen if e.job_id == job_id]

    def wait(self, job_id: str, kind: EventKind, serial: int) -> RunEvent:
        """The ``kind`` event of launch ``serial`` of ``job_id``, once polled."""

        def found() -> RunEvent | None:
            return next((e for e in self.of(job_id) if (e.kind, e.launch) == (kind, serial)), None)

        event: RunEvent = until(f"{kind.value} event of {job_id} #{serial}", found)
        return event


class RuntimeContract:
    """The contract's tests; a subclass provides the ``driver`` fixture."""

    def test_a_run_reports_started_then_ended_with_its_launch_serial(self, driver: Driver) -> None:
        rt, events = driver.runtime, Events(driver.runtime)
        launch = driver.launch("short", serial=7)
        rt.launch(launch)
        assert launch.job_id in rt.alive()
        events.wait(launch.job_id, EventKind.STARTED, 7)
        driver.finish(launch)
        end = events.wait(launch.job_id, EventKind.ENDED, 7)
        got = events.of(launch.job_id)
        assert [e.kind for e in got] == [EventKind.STARTED, EventKind.ENDED]
        assert {e.launch for e in got} == {7}
        assert got[0].at <= got[1].at
        assert end.outcome is not None and end.outcome.kind is OutcomeKind.FINISHED
        assert launch.job_id not in rt.alive()

    def test_a_stop_at_once_ends_the_run_without_a_checkpoint_wait(self, driver: Driver) -> None:
        rt, events = driver.runtime, Events(driver.runtime)
        launch = driver.launch("killed", serial=1, long=True)
        rt.launch(launch)
        events.wait(launch.job_id, EventKind.STARTED, 1)
        with pytest.raises(ValueError):  # not a service with an endpoint: relaunched instead
            rt.resize(launch.job_id, launch.nodes * 2)
        rt.stop(launch.job_id, at_once=True)
        end = events.wait(launch.job_id, EventKind.ENDED, 1)
        assert end.outcome is not None and end.outcome.kind is OutcomeKind.STOPPED
        assert launch.job_id not in rt.alive()

    def test_a_graceful_stop_ends_stopped_with_a_checkpoint_written(self, driver: Driver) -> None:
        rt, events = driver.runtime, Events(driver.runtime)
        launch = driver.launch("stopped", serial=3, long=True)
        folder = Path(str(launch.checkpoint_dir))
        rt.launch(launch)
        events.wait(launch.job_id, EventKind.STARTED, 3)
        until(f"a step of {launch.job_id}", lambda: driver.stepped(launch))
        assert not folder.exists() or not any(folder.iterdir())  # none before the stop
        rt.stop(launch.job_id)
        rt.stop(launch.job_id)  # idempotent
        end = events.wait(launch.job_id, EventKind.ENDED, 3)
        assert end.outcome is not None and end.outcome.kind is OutcomeKind.STOPPED
        assert folder.is_dir() and any(folder.iterdir()), "no checkpoint written on the stop"
        assert [e.kind for e in events.of(launch.job_id)] == [EventKind.STARTED, EventKind.ENDED]

    def test_a_relaunch_reports_under_its_own_serial(self, driver: Driver) -> None:
        rt, events = driver.runtime, Events(driver.runtime)
        first = driver.launch("again", serial=1, long=True)
        rt.launch(first)
        events.wait(first.job_id, EventKind.STARTED, 1)
        rt.stop(first.job_id, at_once=True)
        events.wait(first.job_id, EventKind.ENDED, 1)
        second = driver.launch("again", serial=2)
        assert second.job_id == first.job_id
        rt.launch(second)
        events.wait(second.job_id, EventKind.STARTED, 2)
        driver.finish(second)
        end = events.wait(second.job_id, EventKind.ENDED, 2)
        assert end.outcome is not None and end.outcome.kind is OutcomeKind.FINISHED
        assert [(e.kind, e.launch) for e in events.of(first.job_id)] == [
            (EventKind.STARTED, 1),
            (EventKind.ENDED, 1),
            (EventKind.STARTED, 2),
            (EventKind.ENDED, 2),
        ]

    def test_stopping_a_job_with_no_run_does_nothing(self, driver: Driver) -> None:
        rt = driver.runtime
        rt.stop("no-such-job")
        rt.stop("no-such-job", at_once=True)
        with pytest.raises(ValueError):
            rt.resize("no-such-job", (rt.nodes()[0].node_id,))
        assert rt.poll() == [] and rt.alive() == set()
        assert [n.gpus for n in rt.nodes()] and all(n.gpus > 0 for n in rt.nodes())
