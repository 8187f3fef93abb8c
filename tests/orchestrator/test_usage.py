"""``orch usage``: GPU-seconds per job and per team over a window, as each principal may read."""

from __future__ import annotations

import time

import pytest

from orchestrator.api import operations
from orchestrator.api.identity import Principal
from orchestrator.errors import Forbidden
from orchestrator.spec import parse_spec
from orchestrator.store import JobStore
from orchestrator.store.states import JobState
from orchestrator.store.tokens import Role


def _job(store: JobStore, name: str, team: str, end: JobState | None, **fields: object) -> str:
    spec = parse_spec(
        {
            "name": name,
            "team": team,
            "class": "bulk",
            "workload": "mlp",
            "sla": {"throughput": {"min_samples_per_s": 1}},
            "run": {"steps": 10},
        }
    )
    job_id = store.submit(spec).id
    store.transition(job_id, JobState.PLACED, fields={"placement": {"nodes": ["n0", "n0"]}})
    store.transition(job_id, JobState.RUNNING, fields={"started_at": time.time() - 10})
    if end is not None:
        store.transition(job_id, end, fields=fields)
    return job_id


def test_the_window_and_the_readers_team_bound_the_report(store: JobStore) -> None:
    old = _job(store, "old", "vision", JobState.FINISHED, attained_gpu_s=50.0, finished_at=100.0)
    recent = _job(
        store, "recent", "vision", JobState.FAILED, attained_gpu_s=30.0, finished_at=time.time()
    )
    running = _job(store, "running", "speech", None)
    admin = operations.usage(store, Principal.local(), since=1000.0)
    got = {r.id: r.gpu_s for r in admin.jobs}
    assert old not in got and got[recent] == 30.0
    assert got[running] == pytest.approx(20.0, abs=2.0)  # two GPUs for ~10 s, up to now
    assert admin.teams["vision"] == 30.0 and set(admin.teams) == {"vision", "speech"}

    member = Principal("ann", Role.MEMBER, "vision")
    mine = operations.usage(store, member, since=0.0)
    assert {r.id for r in mine.jobs} == {old, recent} and mine.teams == {"vision": 80.0}
    with pytest.raises(Forbidden):
        operations.usage(store, member, since=0.0, team="speech")


def test_ended_runs_count_for_their_time_in_the_window() -> None:
    # two runs: 100-200 (before the window), 300-400 (half in it); 40 GPU-seconds in all
    events = [
        {"event": "queued", "ts": 50.0},
        {"event": "placed", "ts": 100.0},
        {"event": "running", "ts": 110.0},
        {"event": "sla-violated", "ts": 150.0},  # no state change
        {"event": "queued", "ts": 200.0},
        {"event": "placed", "ts": 300.0},
        {"event": "running", "ts": 310.0},
        {"event": "finished", "ts": 400.0},
    ]
    assert operations.gpu_s_since(40.0, events, since=350.0) == pytest.approx(10.0)
    assert operations.gpu_s_since(40.0, events, since=0.0) == pytest.approx(40.0)
    assert operations.gpu_s_since(40.0, events, since=500.0) == 0.0
    assert operations.gpu_s_since(40.0, [], since=350.0) == 40.0  # nothing known: all of it


def test_a_job_that_never_ran_or_ran_before_the_window_is_not_in_it(store: JobStore) -> None:
    spec = parse_spec(
        {
            "name": "waits",
            "team": "nlp",
            "class": "bulk",
            "workload": "mlp",
            "sla": {"throughput": {"min_samples_per_s": 1}},
            "run": {"steps": 10},
        }
    )
    queued = store.submit(spec).id
    report = operations.usage(store, Principal.local(), since=time.time() - 3600)
    assert queued not in {r.id for r in report.jobs} and "nlp" not in report.teams


def test_another_teams_usage_is_refused_in_plain_words(store: JobStore) -> None:
    member = Principal("ann", Role.MEMBER, "vision")
    with pytest.raises(Forbidden) as refused:
        operations.usage(store, member, since=0.0, team="nlp")
    assert "the jobs of team 'nlp'" in str(refused.value) and "''s" not in str(refused.value)
