"""A service's run on Ray (``orchestrator.runtime.service_run``) without Ray: its replicas are
stand-ins that report what a one-GPU run reports, so what the service run decides (which
replicas a resize keeps, who writes the reports, when it says a resize is done, how it ends)
is checked alone; the Ray runtime's real replicas are exercised end to end
(``tests/e2e/test_service_scale_in_place.py``)."""

from __future__ import annotations

from typing import Any

import pytest

from orchestrator.runtime.base import EventKind, Launch, Outcome, OutcomeKind
from orchestrator.runtime.service_run import MAX_REPLACEMENTS, ServiceRun, replicas_to_keep
from orchestrator.spec import parse_spec
from orchestrator.storage import StorageLocation

SPEC = {
    "name": "svc",
    "team": "t",
    "class": "interactive",
    "workload": {"name": "infer", "args": {"model": "mlp"}},
    "sla": {"latency": {"percentile": 99, "max_ms": 20}},
    "resources": {"gpus": {"min": 1, "max": 3}},
    "run": {"micro_batch": 8, "duration_s": 60},
    "serve": {"rate_rps": 100, "endpoint": True},
}


class FakeReplica:
    """What the service run asks of a replica's one-GPU run, recorded."""

    def __init__(self, launch: Launch, number: int, reports: bool, emit: Any) -> None:
        self.launch, self.number, self.emit = launch, number, emit
        self.reports = reports
        self.started = self.stopped = False
        self.handed: list[bool] = []

    def start(self) -> None:
        self.started = True

    def has_settled(self) -> bool:
        return True

    def request_stop(self, at_once: bool = False) -> None:
        self.stopped = True

    def hand_reports(self, factory: Any) -> None:
        self.handed.append(factory is not None)
        self.reports = factory is not None

    # what the real run would report
    def up(self) -> None:
        self.emit(EventKind.STARTED, None)

    def end(self, kind: OutcomeKind = OutcomeKind.STOPPED, **result: Any) -> None:
        self.emit(EventKind.ENDED, Outcome(kind, kind.value, dict(result)))


class Harness:
    def __init__(self, nodes: tuple[str, ...]) -> None:
        self.replicas: list[FakeReplica] = []
        self.events: list[tuple[EventKind, Outcome | None, tuple[str, ...]]] = []
        launch = Launch(
            "svc", "run", parse_spec(SPEC), nodes, "PACK", 7, StorageLocation("/tmp/s"), True
        )
        self.run = ServiceRun(launch, self._emit, _factory, self._make)  # type: ignore[arg-type]
        self.run.start()

    def _emit(self, kind: EventKind, outcome: Outcome | None, nodes: tuple[str, ...]) -> None:
        self.events.append((kind, outcome, nodes))

    def _make(self, launch: Launch, number: int, reports: bool, emit: Any) -> FakeReplica:
        r = FakeReplica(launch, number, reports, emit)
        self.replicas.append(r)
        return r

    def kinds(self) -> list[EventKind]:
        return [e[0] for e in self.events]

    def reporters(self) -> list[int]:
        return [r.number for r in self.replicas if r.reports]


def _factory() -> Any:
    return print


def test_replicas_kept_by_a_resize_are_the_reporting_then_the_started_ones() -> None:
    # (node, reports, started), oldest first
    replicas = [("a", False, True), ("a", True, True), ("a", False, False), ("b", False, True)]
    assert replicas_to_keep(replicas, ("a", "b", "c")) == ([1, 3], ["c"])
    assert replicas_to_keep(replicas, ("a", "a")) == ([0, 1], [])
    assert replicas_to_keep(replicas, ("b", "b")) == ([3], ["b"])


def test_each_replica_is_a_world_of_one_on_one_gpu_and_only_the_first_reports() -> None:
    h = Harness(("a", "b"))
    assert [r.launch.nodes for r in h.replicas] == [("a",), ("b",)]
    assert all(r.started for r in h.replicas)
    assert h.reporters() == [0]
    serve = h.replicas[0].launch.spec.serve
    assert serve is not None and serve.start_at is not None  # every replica ends with the first
    assert h.replicas[1].launch.spec.serve == serve
    h.replicas[0].up()
    assert h.kinds() == []  # a gang's start: once every first replica is up
    h.replicas[1].up()
    assert h.kinds() == [EventKind.STARTED]
    assert h.run.nodes == ("a", "b")


def test_a_scale_up_is_done_once_its_new_replicas_are_up() -> None:
    h = Harness(("a",))
    h.replicas[0].up()
    h.run.resize(("a", "a", "b"))
    assert [r.launch.nodes for r in h.replicas[1:]] == [("a",), ("b",)]
    assert all(r.started for r in h.replicas) and not h.replicas[0].stopped
    assert h.run.nodes == ("a", "a", "b")
    with pytest.raises(ValueError, match="under way"):
        h.run.resize(("a",))
    h.replicas[1].up()
    assert h.kinds() == [EventKind.STARTED]
    h.replicas[2].up()
    assert h.events[-1] == (EventKind.RESIZED, None, ("a", "a", "b"))
    assert h.reporters() == [0]


def test_a_scale_down_drains_the_others_first_and_is_done_once_their_gpus_are_free() -> None:
    h = Harness(("a", "a", "b"))
    for r in h.replicas:
        r.up()
    h.run.resize(("a", "b"))
    assert [r.stopped for r in h.replicas] == [False, True, False]  # not the reporting one
    assert h.run.nodes == ("a", "a", "b")  # draining: still held
    assert h.kinds() == [EventKind.STARTED]
    h.replicas[1].end()
    assert h.events[-1] == (EventKind.RESIZED, None, ("a", "b"))
    assert h.run.nodes == ("a", "b", "a")  # the freed GPU cools until the runtime's poll
    assert h.run.take_freed() == ["a"] and h.run.nodes == ("a", "b")
    assert h.reporters() == [0]


def test_when_the_reporting_replicas_gpu_is_given_back_a_staying_replica_reports() -> None:
    h = Harness(("a", "b"))
    for r in h.replicas:
        r.up()
    h.run.resize(("b",))
    assert h.replicas[0].stopped and h.replicas[0].handed == [False]
    assert h.replicas[1].handed == [True]
    assert h.reporters() == [1]
    h.replicas[0].end(status="stopped")
    assert h.events[-1] == (EventKind.RESIZED, None, ("b",))


def test_a_lost_replica_is_replaced_on_its_gpu_while_the_others_serve() -> None:
    """Issue 36 left "a lost replica ends the whole service": now another replica takes its
    GPU (the grant does not change), the others never stop, and the run ends only when every
    replica is over."""
    h = Harness(("a", "b"))
    for r in h.replicas:
        r.up()
    h.replicas[1].end(OutcomeKind.LOST)
    kind, outcome, nodes = h.events[-1]
    assert kind is EventKind.REPLACED and nodes == ("b",)
    assert outcome is not None and "replaced (1 of 3)" in outcome.message
    fresh = h.replicas[-1]
    assert fresh.launch.nodes == ("b",) and fresh.started and not fresh.reports
    assert not h.replicas[0].stopped and h.reporters() == [0]  # serving throughout
    assert h.run.nodes == ("a", "b")  # the GPU stays the service's: none freed
    assert h.run.take_freed() == []
    fresh.up()
    h.run.resize(("a", "b", "b"))  # a resize works as before
    assert EventKind.ENDED not in h.kinds()


def test_a_lost_reporting_replica_hands_the_reports_to_a_staying_one() -> None:
    h = Harness(("a", "b"))
    for r in h.replicas:
        r.up()
    h.replicas[0].end(OutcomeKind.FAILED)
    assert h.replicas[1].handed == [True]  # replica 1 writes the job's reports now
    h.replicas[-1].up()
    assert h.replicas[-1].handed == [] and h.replicas[1].handed == [True]


def test_past_its_replacements_a_failing_replica_ends_the_run_as_a_gangs_rank_does() -> None:
    h = Harness(("a", "b"))
    for r in h.replicas:
        r.up()
    for _ in range(MAX_REPLACEMENTS):
        h.replicas[-1].end(OutcomeKind.FAILED)
        h.replicas[-1].up()
    assert h.kinds().count(EventKind.REPLACED) == MAX_REPLACEMENTS
    h.replicas[-1].end(OutcomeKind.LOST)
    assert h.replicas[0].stopped  # drained
    with pytest.raises(ValueError, match="ending"):
        h.run.resize(("a", "b", "b"))
    h.replicas[0].end(status="stopped", p99_ms=3.0)
    kind, outcome, _ = h.events[-1]
    assert kind is EventKind.ENDED and outcome is not None
    assert outcome.kind is OutcomeKind.LOST and outcome.result["p99_ms"] == 3.0


def test_a_stopped_service_ends_once_every_replica_has_freed_its_gpu() -> None:
    h = Harness(("a", "b"))
    for r in h.replicas:
        r.up()
    h.run.request_stop()
    assert all(r.stopped for r in h.replicas)
    h.replicas[0].end(status="stopped", served=5)
    assert h.kinds() == [EventKind.STARTED]
    h.replicas[1].end(status="stopped", served=6)
    kind, outcome, _ = h.events[-1]
    assert kind is EventKind.ENDED and outcome is not None
    assert outcome.kind is OutcomeKind.STOPPED and outcome.result["served"] == 5  # the reporter's


def test_a_service_whose_duration_is_over_finishes() -> None:
    h = Harness(("a", "b"))
    for r in h.replicas:
        r.up()
    h.replicas[0].end(OutcomeKind.FINISHED, status="finished")
    h.replicas[1].end(OutcomeKind.FINISHED, status="finished")
    kind, outcome, _ = h.events[-1]
    assert kind is EventKind.ENDED and outcome is not None and outcome.kind is OutcomeKind.FINISHED
    assert h.reporters() == [0]  # no hand-over at the end
