"""Job dependencies (``depends_on``): resolved at submission on the real Redis, nothing written
for a wrong one; held by the control loop (on the in-process runtime) until they finish, failed
when one never will."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from orchestrator.config import Settings
from orchestrator.control.loop import ControlLoop
from orchestrator.errors import SpecError
from orchestrator.runtime.base import OutcomeKind
from orchestrator.runtime.local import LocalRuntime
from orchestrator.services import make_policy
from orchestrator.spec import parse_spec
from orchestrator.store import JobStore
from orchestrator.store.states import JobState
from tests.control.test_loop import job

S = JobState


@pytest.fixture
def make_loop(store: JobStore, tmp_path: Path) -> Iterator[Any]:
    loops: list[ControlLoop] = []

    def make(nodes: list[tuple[str, int]]) -> tuple[ControlLoop, LocalRuntime]:
        settings = Settings(redis_url="unused", namespace=store.namespace, data_dir=tmp_path)
        rt = LocalRuntime(nodes)
        loop = ControlLoop(settings, store, rt, make_policy("gang"))
        loop.lease.acquire(store.namespace)
        loops.append(loop)
        return loop, rt

    yield make
    for loop in loops:
        loop.lease.release()


def test_a_later_job_of_a_submission_names_an_earlier_one_and_a_stored_one(
    store: JobStore,
) -> None:
    old = store.submit(job("prep")).id
    store.transition(old, S.CANCELLED)
    etl = store.submit(job("etl")).id
    ids = store.submit_many(
        [job("prep"), job("train", depends_on=["prep", "etl"]), job("eval", depends_on=["train"])]
    )
    # "prep" is this submission's (the stored one was cancelled and is not looked at)
    assert store.get(ids[1]).fields["after"] == f"{ids[0]},{etl}"
    assert store.get(ids[2]).fields["after"] == ids[1]
    assert store.get(etl).fields["after"] == ""


@pytest.mark.parametrize(
    ("refs", "problem"),
    [
        (["nope"], "depends_on 'nope': no job of team 't' has this id or name"),
        (["other"], "depends_on 'other': no job of team 't' has this id or name"),
        (["gone"], "so this job could never start"),
        (["twice"], "2 jobs have this name"),
    ],
)
def test_a_wrong_dependency_is_refused_and_nothing_is_written(
    store: JobStore, refs: list[str], problem: str
) -> None:
    theirs = job("other")
    store.submit(theirs.model_copy(update={"team": "u"}))  # another team's: not told apart
    store.transition(store.submit(job("gone")).id, S.FAILED)
    store.submit(job("twice"))
    store.submit(job("twice"))
    before = {r.id for r in store.list()}
    with pytest.raises(SpecError, match=problem):
        store.submit_many([job("first"), job("train", depends_on=refs)])
    assert {r.id for r in store.list()} == before


def test_depends_on_is_checked_in_the_spec() -> None:
    with pytest.raises(Exception, match="depends_on: names x more than once"):
        job("a", depends_on=["x", "x"])
    with pytest.raises(Exception, match="depends_on"):
        job("a", depends_on=["Bad Name!"])
    with pytest.raises(Exception, match="depends_on"):
        job("a", depends_on=[f"j{i}" for i in range(17)])
    assert parse_spec(job("a").model_dump(mode="json", by_alias=True)).depends_on == []


def test_the_loop_holds_a_job_until_its_dependencies_finish(
    store: JobStore, make_loop: Any
) -> None:
    loop, rt = make_loop([("n0", 2)])
    prep, train = store.submit_many([job("prep"), job("train", depends_on=["prep"])])
    loop.round()
    assert [launch.job_id for launch in rt.launches] == [prep]  # a GPU is free: train waits
    rec = store.get(train)
    assert rec.state is S.QUEUED and rec.message == f"waiting: after {prep} (queued)"
    loop.round()
    loop.round()  # the reason follows the dependency's state
    assert store.get(train).message == f"waiting: after {prep} (running)"
    rt.end(prep, OutcomeKind.FINISHED, result={"samples_per_s": 10.0, "world_size": 1})
    loop.round()  # reaped: prep finished; train is in this round's snapshot
    assert store.get(prep).state is S.FINISHED
    assert [launch.job_id for launch in rt.launches] == [prep, train]


def test_a_job_fails_when_one_it_depends_on_is_cancelled_or_fails(
    store: JobStore, make_loop: Any
) -> None:
    loop, _ = make_loop([("n0", 1)])
    a, b, after_a, after_both = store.submit_many(
        [job("a"), job("b"), job("x", depends_on=["a"]), job("y", depends_on=["a", "b"])]
    )
    loop.round()  # a placed on the one GPU
    store.cancel(b)
    loop.round()
    rec = store.get(after_both)
    assert rec.state is S.FAILED
    assert rec.message == f"a job it depends on will never finish: {b} cancelled"
    assert store.get(after_a).state is S.QUEUED  # a still runs
    store.cancel(a)  # running: the loop stops it, then it is cancelled
    for _ in range(3):
        loop.round()
    assert store.get(a).state is S.CANCELLED
    rec = store.get(after_a)
    assert rec.state is S.FAILED and rec.message.endswith(f"{a} cancelled")


def test_orch_show_lists_what_a_job_starts_after(store: JobStore) -> None:
    from tests.orchestrator.test_views import render_show

    prep, train = store.submit_many([job("prep"), job("train", depends_on=["prep"])])
    assert re.search(rf"│ after +{prep} ", render_show(store, train, width=120))
