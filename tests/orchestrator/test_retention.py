"""Retention: ended jobs expire and `orch gc` removes exactly the expired ones, on a real Redis.

Jobs are aged by writing their ``updated_at`` back in time through a raw client (the store's
clock is Redis's, so this is the only way to have a job that ended a month ago in a test).
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import redis

from orchestrator.config import DEFAULT_RETENTION_S, Settings, format_duration, parse_duration
from orchestrator.spec import parse_spec
from orchestrator.storage import StorageLocation
from orchestrator.store import JobStore
from orchestrator.store.retention import job_keys
from orchestrator.store.states import JobState
from orchestrator.store.workdirs import GRACE_S
from orchestrator.tuner.study import study_name
from tests.orchestrator.test_store import make_spec

S = JobState
DAY = 86400.0

# (state reached, how many days ago it got there): every state, and ages either side of 30 days
CASES = [
    (S.QUEUED, 60),
    (S.PLACED, 45),
    (S.RUNNING, 90),
    (S.CANCELLING, 40),
    (S.TUNING, 31),
    (S.FINISHED, 31),
    (S.FAILED, 45),
    (S.CANCELLED, 400),
    (S.FINISHED, 29),
    (S.FAILED, 1),
    (S.CANCELLED, 0),
]
PATHS = {
    S.QUEUED: [],
    S.PLACED: [S.PLACED],
    S.RUNNING: [S.PLACED, S.RUNNING],
    S.CANCELLING: [S.PLACED, S.RUNNING, S.CANCELLING],
    S.TUNING: [S.PLACED, S.TUNING],
    S.FINISHED: [S.PLACED, S.RUNNING, S.FINISHED],
    S.FAILED: [S.PLACED, S.FAILED],
    S.CANCELLED: [S.CANCELLED],
}


def make_job(store: JobStore, redis_client: redis.Redis, state: JobState, days: float) -> str:
    """A job in ``state`` since ``days`` ago, with metrics, logs and a scaling curve."""
    job_id = store.submit(make_spec(f"j{state.value}{days:g}")).id
    for target in PATHS[state]:
        store.transition(job_id, target)
    store.put_metrics(job_id, {"p95_ms": 12.0})
    store.logs.append(job_id, 0, [("out", "hello")])
    store.scaling.record(job_id, 1, 10.0)
    now = float(redis_client.time()[0])
    redis_client.hset(store.keys.job(job_id), "updated_at", f"{now - days * DAY:.6f}")
    return job_id


def present_keys(store: JobStore, redis_client: redis.Redis, job_id: str) -> list[str]:
    keys = [*job_keys(store.keys, job_id), store.keys.logs(job_id, 0)]
    return [k for k in keys if redis_client.exists(k)]


@pytest.fixture
def jobs(store: JobStore, redis_client: redis.Redis) -> dict[str, tuple[JobState, float]]:
    return {make_job(store, redis_client, st, d): (st, d) for st, d in CASES}


def test_an_ended_job_s_keys_expire_after_the_retention_age_and_active_ones_never(
    store: JobStore, redis_client: redis.Redis, jobs: dict[str, tuple[JobState, float]]
) -> None:
    for job_id, (state, _) in jobs.items():
        ttls = [redis_client.ttl(k) for k in present_keys(store, redis_client, job_id)]
        assert len(ttls) >= 5  # record, events, metrics and history, scaling, logs
        if state in (S.FINISHED, S.FAILED, S.CANCELLED):
            # set at the end, before this job's metrics and logs were written: they keep it
            assert all(DEFAULT_RETENTION_S - 60 <= t <= DEFAULT_RETENTION_S for t in ttls[:2])
        else:
            assert all(t == -1 for t in ttls), state  # -1: no expiry


def test_gc_removes_exactly_the_ended_jobs_older_than_the_age(
    store: JobStore, redis_client: redis.Redis, jobs: dict[str, tuple[JobState, float]]
) -> None:
    expected = {
        j for j, (st, d) in jobs.items() if st in (S.FINISHED, S.FAILED, S.CANCELLED) and d > 30
    }
    assert len(expected) == 3
    dry = store.retention.sweep(30 * DAY, dry_run=True)
    assert set(dry.removed) == expected and dry.expired == [] and dry.keys == 0
    assert all(present_keys(store, redis_client, j) for j in jobs)  # a dry run writes nothing

    report = store.retention.sweep(30 * DAY)
    assert set(report.removed) == expected and report.kept == len(jobs) - len(expected)
    listed = {r.id for r in store.list()}
    assert listed == set(jobs) - expected
    for job_id, (state, days) in jobs.items():
        if job_id in expected:
            assert present_keys(store, redis_client, job_id) == []
            assert not redis_client.exists(store.keys.names(f"j{state.value}{days:g}"))
        else:
            assert store.get(job_id).state is state
            assert len(present_keys(store, redis_client, job_id)) == 7
            assert store.resolve(store.get(job_id).name) == job_id
    assert store.retention.sweep(30 * DAY).gone == []  # nothing more to do


def test_an_expired_job_leaves_nothing_behind_after_gc(
    redis_client: redis.Redis, namespace: str
) -> None:
    store = JobStore(redis_client, namespace, retention_s=1)
    try:
        job_id = store.submit(make_spec("short")).id
        active = store.submit(make_spec("busy")).id
        store.transition(job_id, S.CANCELLED)
        deadline = time.monotonic() + 30
        while redis_client.exists(store.keys.job(job_id)) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not redis_client.exists(store.keys.job(job_id))  # Redis expired it by itself
        store.put_metrics(job_id, {"loss": 1.0})  # a last report, after the end: no expiry
        assert redis_client.zscore(store.keys.jobs, job_id) is not None  # an index entry left
        report = store.retention.sweep(DEFAULT_RETENTION_S)
        assert report.expired == [job_id] and report.removed == [] and report.kept == 1
        assert present_keys(store, redis_client, job_id) == []
        assert redis_client.zscore(store.keys.jobs, job_id) is None
        assert not redis_client.exists(store.keys.names("short"))
        assert store.get(active).state is S.QUEUED
    finally:
        store.delete_namespace()


def _command_job(store: JobStore, digest: str) -> str:
    spec = {
        "name": "own",
        "team": "t",
        "class": "bulk",
        "workload": {"command": ["python", "train.py"], "working_dir": digest},
        "sla": {"throughput": {"min_samples_per_s": 1}},
        "run": {"steps": 5},
    }
    return store.submit(parse_spec(spec)).id


def test_gc_removes_a_working_dir_with_the_last_job_naming_it_and_after_its_grace(
    store: JobStore, redis_client: redis.Redis
) -> None:
    named = store.working_dirs.put(b"zip of the job's folder")
    orphan = store.working_dirs.put(b"a folder uploaded, its submission refused")
    fresh = store.working_dirs.put(b"a folder uploaded a moment ago")
    job_id = _command_job(store, named)
    long_ago = float(redis_client.time()[0]) - 2 * GRACE_S
    redis_client.zadd(store.keys.working_dirs, {named: long_ago, orphan: long_ago})

    dry = store.retention.sweep(30 * DAY, dry_run=True, working_dirs=store.working_dirs)
    assert dry.working_dirs == [orphan] and store.working_dirs.exists(orphan)
    report = store.retention.sweep(30 * DAY, working_dirs=store.working_dirs)
    assert report.working_dirs == [orphan] and not store.working_dirs.exists(orphan)
    assert store.working_dirs.get(named) == b"zip of the job's folder"  # its job is held
    assert store.working_dirs.exists(fresh)  # within its grace: its submission may be coming

    store.transition(job_id, S.CANCELLED)
    now = float(redis_client.time()[0])
    redis_client.hset(store.keys.job(job_id), "updated_at", f"{now - 31 * DAY:.6f}")
    report = store.retention.sweep(30 * DAY, working_dirs=store.working_dirs)
    assert report.removed == [job_id] and report.working_dirs == [named]
    assert not store.working_dirs.exists(named)
    assert redis_client.zrange(store.keys.working_dirs, 0, -1) == [fresh]
    # stored again (the same folder submitted again): a new grace period, the same digest
    assert store.working_dirs.put(b"zip of the job's folder") == named
    assert store.retention.sweep(30 * DAY, working_dirs=store.working_dirs).working_dirs == []


def test_gc_deletes_the_studies_of_the_jobs_it_removes(
    store: JobStore, redis_client: redis.Redis, redis_url: str
) -> None:
    import optuna

    old = make_job(store, redis_client, S.FINISHED, 40)
    young = make_job(store, redis_client, S.FINISHED, 2)
    journal = store.study_journal(redis_url)
    for job_id in (old, young, "a-name-tuned-without-a-job"):
        study = optuna.create_study(study_name=study_name(job_id), storage=journal.storage())
        study.optimize(lambda t: t.suggest_float("x", 0, 1), n_trials=2)
    report = store.retention.sweep(30 * DAY, journal=journal, study_name=study_name)
    assert report.removed == [old] and report.studies == 1
    names = set(optuna.get_all_study_names(journal.storage()))
    assert names == {study_name(young), study_name("a-name-tuned-without-a-job")}


def test_gc_deletes_the_checkpoints_of_the_jobs_it_removes(
    store: JobStore,
    redis_client: redis.Redis,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    root = StorageLocation(str(tmp_path / "checkpoints"))
    old, stuck, young = (make_job(store, redis_client, S.FINISHED, d) for d in (40, 50, 2))
    running = make_job(store, redis_client, S.RUNNING, 40)
    for job_id in (old, stuck, young, running):  # the layout workers/checkpoint.py writes
        step = Path((root / job_id).uri) / "step-000000007"
        step.mkdir(parents=True)
        (step / "__0_0.distcp").write_bytes(b"shard")
        (step.parent / "checkpoint.pt").write_bytes(b"record")

    dry = store.retention.sweep(30 * DAY, dry_run=True, checkpoints=root)
    assert set(dry.removed) == {old, stuck} and dry.checkpoints == 0
    assert all(Path((root / j).uri).exists() for j in (old, stuck, young, running))

    real_remove = StorageLocation.remove

    def remove(self: StorageLocation) -> bool:  # storage refusing one folder
        if self.uri.endswith(stuck):
            raise PermissionError("read-only bucket")
        return real_remove(self)

    monkeypatch.setattr(StorageLocation, "remove", remove)
    report = store.retention.sweep(30 * DAY, checkpoints=root)
    assert report.removed == [old] and report.checkpoints == 1
    assert report.checkpoint_errors == [f"{stuck}: PermissionError: read-only bucket"]
    assert not Path((root / old).uri).exists()
    # the job whose checkpoint stayed keeps its keys, for the next sweep to try again
    assert store.get(stuck).state is S.FINISHED
    assert all(Path((root / j).uri).exists() for j in (stuck, young, running))

    monkeypatch.undo()
    again = store.retention.sweep(30 * DAY, checkpoints=root)
    assert again.removed == [stuck] and again.checkpoints == 1 and not again.checkpoint_errors


def test_journal_entries_a_snapshot_holds_are_set_to_expire(
    store: JobStore, redis_client: redis.Redis, redis_url: str
) -> None:
    import optuna

    journal = store.study_journal(redis_url)
    study = optuna.create_study(study_name="s", storage=journal.storage())
    study.optimize(lambda t: t.suggest_float("x", 0, 1), n_trials=101)  # a snapshot at 100
    held = journal.replayed()
    assert held > 0
    assert store.retention.sweep(DAY, journal=journal, study_name=study_name).journal_aged == held
    assert redis_client.ttl(journal.entry_key(0)) > 0
    assert redis_client.ttl(journal.entry_key(held)) == -1  # not in the snapshot: kept
    assert store.retention.sweep(DAY, journal=journal, study_name=study_name).journal_aged == 0
    fresh = optuna.load_study(study_name="s", storage=journal.storage())
    assert len(fresh.trials) == 101


def test_the_retention_age_reads_durations() -> None:
    assert parse_duration("30d") == 30 * DAY and parse_duration("90m") == 5400
    assert parse_duration("3600") == 3600 and parse_duration(" 1.5h ") == 5400
    with pytest.raises(ValueError, match="30d, 12h"):
        parse_duration("a month")
    assert Settings.from_env(retention_s="12h").retention_s == 43200
    # said back as typed (orch gc): never 2.592e+06 s
    for text, said in (("30d", "30d"), ("2592000", "30d"), ("90m", "90m"), ("1.5h", "90m")):
        assert format_duration(parse_duration(text)) == said
    assert format_duration(3.5) == "3.5s" and format_duration(14 * DAY) == "2w"


def test_orch_gc_command(
    store: JobStore, redis_client: redis.Redis, redis_url: str, tmp_path: Path
) -> None:
    old = make_job(store, redis_client, S.FAILED, 3)
    kept = make_job(store, redis_client, S.RUNNING, 3)
    env = {
        **os.environ,
        "REDIS_URL": redis_url,
        "ORCH_NAMESPACE": store.namespace,
        "ORCH_DATA_DIR": str(tmp_path),
    }
    exe = [str(Path(sys.executable).parent / "orch"), "gc"]
    folders = Settings(data_dir=tmp_path, namespace=store.namespace).checkpoint_dir
    for job_id in (old, kept):
        Path((folders / job_id).uri).mkdir(parents=True)

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([*exe, *args], env=env, capture_output=True, text=True, timeout=60)

    dry = run("--older-than", "2d", "--dry-run")
    assert dry.returncode == 0, dry.stderr
    assert old in dry.stdout and kept not in dry.stdout and "would remove 1" in dry.stdout
    assert run().stdout.startswith("removed 0")  # the default age: 30 days
    done = run("--older-than", "2d")
    assert done.returncode == 0 and done.stdout.startswith("removed 1"), done.stderr
    assert [r.id for r in store.list()] == [kept]
    assert "1 checkpoint folders" in done.stdout
    assert not Path((folders / old).uri).exists() and Path((folders / kept).uri).exists()
    bad = run("--older-than", "soon")
    assert bad.returncode == 2 and "--older-than" in bad.stderr and "Traceback" not in bad.stderr
