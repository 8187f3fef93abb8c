"""The job store against a real Redis: records, the state machine, queues, races, metrics."""

from __future__ import annotations

import pickle
import threading
from typing import Any

import pytest
import redis

from orchestrator.config import Settings
from orchestrator.errors import AmbiguousJob, IllegalTransition, JobNotFound, StoreError
from orchestrator.spec import JobSpec, parse_spec
from orchestrator.store import (
    ACTIVE,
    TERMINAL,
    TRANSITIONS,
    JobState,
    JobStore,
    Keys,
    MetricsSink,
    connect,
    is_legal,
    open_url,
    sources,
)

S = JobState


def make_spec(name: str = "train", job_class: str = "bulk", gpus: int = 1) -> JobSpec:
    """A valid job of either class."""
    sla: dict[str, Any] = (
        {"throughput": {"min_samples_per_s": 10}}
        if job_class == "bulk"
        else {"latency": {"max_ms": 50}}
    )
    data = {
        "name": name,
        "team": "vision",
        "class": job_class,
        "workload": "mlp",
        "sla": sla,
        "resources": {"gpus": gpus},
        "run": {"steps": 10},
    }
    return parse_spec(data)


# ---- pure parts ------------------------------------------------------------------------------


def test_transition_table() -> None:
    assert set(TRANSITIONS) == set(JobState)
    assert {S.FINISHED, S.FAILED, S.CANCELLED} == TERMINAL
    assert set(JobState) - TERMINAL == ACTIVE
    assert is_legal(S.QUEUED, S.PLACED)
    assert is_legal("running", "queued")
    assert not is_legal(S.QUEUED, S.FINISHED)
    assert not is_legal(S.FINISHED, S.RUNNING)
    assert not is_legal("queued", "nonsense")
    assert sources(S.QUEUED) == {S.SUBMITTED, S.PLACED, S.TUNING, S.RUNNING}
    assert sources(S.SUBMITTED) == set()


def test_key_layout() -> None:
    k = Keys("ns")
    assert k.job("a-1") == "ns:job:a-1"
    assert k.jobs == "ns:jobs"
    assert k.queue("bulk") == "ns:queue:bulk" == k.queue_prefix + "bulk"
    assert k.events("a-1") == "ns:events:a-1"
    assert k.metrics("a-1") == "ns:metrics:a-1"
    assert k.metrics_stream("a-1") == "ns:metrics-stream:a-1"
    assert k.seq == "ns:seq"
    assert k.names("a") == "ns:names:a"
    assert k.key("pool", "gpus") == "ns:pool:gpus"
    assert Keys("a*b").pattern == "a\\*b:*"


# ---- submit and read ---------------------------------------------------------------------------


def test_submit_writes_record_events_and_fifo_queue(store: JobStore) -> None:
    spec = make_spec("train", gpus=2)
    first = store.submit(spec, by="ana")
    second = store.submit(make_spec("train"))
    chat = store.submit(make_spec("chat", "interactive"))

    assert first.id.startswith("train-") and len(first.id) == len("train-") + 6
    got = store.get(first.id)
    assert got == first
    assert (got.name, got.team, got.job_class, got.state) == ("train", "vision", "bulk", S.QUEUED)
    assert (got.gpus, got.attempts, got.message, got.by) == (2, 0, "", "ana")
    assert got.spec == spec
    assert got.submitted_at == got.updated_at > 0

    raw = store.client.hgetall(store.keys.job(first.id))
    assert {"id", "name", "team", "class", "state", "spec", "submitted_at", "updated_at"} <= set(
        raw
    )
    assert {"seq", "gpus", "attempts", "message"} <= set(raw)

    events = store.events(first.id)
    assert [e["event"] for e in events] == ["submitted", "queued"]
    assert events[0]["message"] == "by ana"
    assert events[1]["from"] == "submitted"
    assert all(e["ts"] == got.submitted_at for e in events)

    assert store.queued("bulk") == [first.id, second.id]
    assert store.queued("interactive") == [chat.id]
    assert [r.id for r in store.list()] == [first.id, second.id, chat.id]
    assert first.seq < second.seq < chat.seq


def test_list_filters_by_state_and_keeps_the_latest(store: JobStore) -> None:
    ids = [store.submit(make_spec(f"j{i}")).id for i in range(5)]
    store.transition(ids[1], S.PLACED)
    store.transition(ids[3], S.CANCELLED)
    assert [r.id for r in store.list(limit=2)] == ids[3:]
    assert [r.id for r in store.list(states=[S.QUEUED])] == [ids[0], ids[2], ids[4]]
    assert [r.id for r in store.list(states=["queued", "placed"], limit=2)] == [ids[2], ids[4]]
    assert store.list(limit=0) == []


def test_resolve_by_id_or_unique_name(store: JobStore) -> None:
    a = store.submit(make_spec("alpha"))
    b1 = store.submit(make_spec("beta"))
    b2 = store.submit(make_spec("beta"))
    assert store.resolve(a.id) == a.id
    assert store.resolve("alpha") == a.id
    with pytest.raises(AmbiguousJob) as err:
        store.resolve("beta")
    assert err.value.matches == [b1.id, b2.id]
    with pytest.raises(JobNotFound):
        store.resolve("gamma")


def test_missing_job_raises_job_not_found(store: JobStore) -> None:
    with pytest.raises(JobNotFound):
        store.get("nope-000000")
    with pytest.raises(JobNotFound):
        store.transition("nope-000000", S.PLACED)
    with pytest.raises(JobNotFound):
        store.events("nope-000000")
    with pytest.raises(JobNotFound):
        store.incr_attempts("nope-000000")
    # Refusals must not leave stray keys behind.
    assert list(store.client.scan_iter(match=store.keys.pattern)) == []


# ---- transitions -------------------------------------------------------------------------------


def test_transition_lifecycle_keeps_queue_and_events(store: JobStore) -> None:
    first = store.submit(make_spec("a"))
    later = store.submit(make_spec("b"))

    placed = store.transition(
        first.id, S.PLACED, expect=S.QUEUED, message="on node-1", fields={"placement": {"n": 1}}
    )
    assert placed.state == S.PLACED and placed.placement == {"n": 1}
    assert placed.message == "on node-1" and placed.updated_at >= first.updated_at
    assert store.queued("bulk") == [later.id]

    # Requeued (placement failed): back in the queue at its original FIFO position.
    requeued = store.transition(
        first.id, S.QUEUED, message="placement failed", fields={"placement": None}
    )
    assert requeued.placement is None
    assert store.queued("bulk") == [first.id, later.id]

    store.transition(first.id, S.PLACED, expect=[S.QUEUED])
    assert store.incr_attempts(first.id) == 1
    store.transition(first.id, S.RUNNING, fields={"started_at": "1.5"})
    done = store.transition(first.id, S.FINISHED, fields={"result": {"steps": 10}})
    assert done.terminal and done.result == {"steps": 10}
    assert done.fields["started_at"] == "1.5" and done.attempts == 1
    assert store.get(first.id) == done

    events = store.events(first.id)
    assert [(e["from"], e["event"]) for e in events] == [
        ("", "submitted"),
        ("submitted", "queued"),
        ("queued", "placed"),
        ("placed", "queued"),
        ("queued", "placed"),
        ("placed", "running"),
        ("running", "finished"),
    ]
    assert events[2]["message"] == "on node-1"
    assert [e["ts"] for e in events] == sorted(e["ts"] for e in events)


@pytest.mark.parametrize(
    ("path", "target"),
    [
        ([], S.FINISHED),  # queued -> finished
        ([], S.RUNNING),  # queued -> running (must be placed first)
        ([S.PLACED, S.RUNNING, S.FINISHED], S.RUNNING),  # terminal
        ([S.CANCELLED], S.QUEUED),  # terminal
    ],
)
def test_illegal_transition_is_refused_and_changes_nothing(
    store: JobStore, path: list[JobState], target: JobState
) -> None:
    job = store.submit(make_spec())
    for state in path:
        store.transition(job.id, state)
    before = store.client.hgetall(store.keys.job(job.id))
    events_before = store.events(job.id)
    queue_before = store.queued("bulk")

    with pytest.raises(IllegalTransition) as err:
        store.transition(job.id, target, fields={"placement": {"x": 1}})
    assert (err.value.job_id, err.value.target) == (job.id, target.value)
    assert err.value.current == (path[-1].value if path else "queued")

    assert store.client.hgetall(store.keys.job(job.id)) == before
    assert store.events(job.id) == events_before
    assert store.queued("bulk") == queue_before


def test_expect_refuses_a_legal_transition_from_another_state(store: JobStore) -> None:
    job = store.submit(make_spec())
    # queued -> cancelled is legal, but the caller believes the job is placed.
    with pytest.raises(IllegalTransition):
        store.transition(job.id, S.CANCELLED, expect=S.PLACED)
    with pytest.raises(IllegalTransition):
        store.transition(job.id, S.CANCELLED, expect=[])
    assert store.get(job.id).state == S.QUEUED
    assert store.transition(job.id, S.CANCELLED, expect=[S.PLACED, "queued"]).state == S.CANCELLED
    assert store.queued("bulk") == []


def test_store_owned_fields_cannot_be_set(store: JobStore) -> None:
    job = store.submit(make_spec())
    with pytest.raises(ValueError, match="state"):
        store.transition(job.id, S.PLACED, fields={"state": "finished"})
    assert store.get(job.id).state == S.QUEUED


def _race(stores: list[JobStore], job_id: str) -> list[str]:
    """Every store tries queued -> placed at once; returns "won" or the state each one saw."""
    barrier = threading.Barrier(len(stores))
    outcomes: list[str] = []
    lock = threading.Lock()

    def attempt(s: JobStore) -> None:
        barrier.wait()
        try:
            s.transition(job_id, S.PLACED, expect=S.QUEUED)
            result = "won"
        except IllegalTransition as err:
            result = err.current
        with lock:
            outcomes.append(result)

    threads = [threading.Thread(target=attempt, args=(s,)) for s in stores]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return outcomes


def test_concurrent_transitions_have_exactly_one_winner(redis_url: str, store: JobStore) -> None:
    n = 8
    clients = [open_url(redis_url) for _ in range(n)]  # one connection per racer
    stores = [JobStore(c, store.namespace) for c in clients]
    try:
        for i in range(5):
            job_id = store.submit(make_spec(f"race{i}")).id
            assert sorted(_race(stores, job_id)) == ["placed"] * (n - 1) + ["won"]
            assert [e["event"] for e in store.events(job_id)] == ["submitted", "queued", "placed"]
        assert store.queued("bulk") == []
    finally:
        for c in clients:
            c.close()


def test_namespaces_isolate_stores_on_one_redis(redis_client: redis.Redis, store: JobStore) -> None:
    other = JobStore(redis_client, store.namespace + "-b")
    try:
        mine = store.submit(make_spec("same"))
        theirs = other.submit(make_spec("same"))
        assert [r.id for r in store.list()] == [mine.id]
        assert [r.id for r in other.list()] == [theirs.id]
        assert store.queued("bulk") == [mine.id] and other.queued("bulk") == [theirs.id]
        assert store.resolve("same") == mine.id and other.resolve("same") == theirs.id
        with pytest.raises(JobNotFound):
            store.get(theirs.id)
        with pytest.raises(JobNotFound):
            other.transition(mine.id, S.PLACED)
        assert mine.seq == theirs.seq == 1  # each namespace counts on its own
        store.delete_namespace()
        assert store.list() == []
        assert other.get(theirs.id).state == S.QUEUED
    finally:
        other.delete_namespace()


# ---- metrics -----------------------------------------------------------------------------------


def test_metrics_latest_values_and_capped_history(store: JobStore) -> None:
    job = store.submit(make_spec())
    assert store.metrics(job.id) == {} and store.metrics_history(job.id) == []
    store.put_metrics(job.id, {"step": 1, "loss": 2.5, "tags": ["a"]})
    store.put_metrics(job.id, {"step": 2, "loss": 1.25})
    store.put_metrics(job.id, {})
    assert store.metrics(job.id) == {"step": 2, "loss": 1.25, "tags": ["a"]}
    history = store.metrics_history(job.id, count=10)
    assert [h["step"] for h in history] == [1, 2]
    assert history[0]["ts"] <= history[1]["ts"]
    assert [h["step"] for h in store.metrics_history(job.id, count=1)] == [2]

    for i in range(1500):
        store.put_metrics(job.id, {"step": i})
    length = store.client.xlen(store.keys.metrics_stream(job.id))
    assert 1000 <= length < 1500


def test_metrics_sink_pickles_writes_and_survives_a_dead_redis(
    redis_url: str, store: JobStore
) -> None:
    job = store.submit(make_spec())
    sink = MetricsSink(redis_url, store.namespace, job.id)
    remote = pickle.loads(pickle.dumps(sink))  # as Ray ships it to a worker
    remote({"step": 1, "samples_per_s": 12.5})
    assert store.metrics(job.id) == {"step": 1, "samples_per_s": 12.5}
    again = pickle.loads(pickle.dumps(remote))  # a connected sink pickles too
    again({"step": 2})
    assert store.metrics(job.id)["step"] == 2
    remote.close()
    again.close()

    dead = MetricsSink("redis://127.0.0.1:1/0", store.namespace, job.id)
    dead({"step": 3})
    dead({"step": 4})
    assert dead.dropped == 2


# ---- connect -----------------------------------------------------------------------------------


def test_connect_with_a_url(redis_url: str) -> None:
    client = connect(Settings(redis_url=redis_url))
    assert client.ping()
    client.close()


def test_connect_to_an_unreachable_url_names_it() -> None:
    with pytest.raises(StoreError, match=r"redis://127\.0\.0\.1:1/0"):
        connect(Settings(redis_url="redis://127.0.0.1:1/0"))
    with pytest.raises(StoreError) as err:
        connect(Settings(redis_url="redis://:secret@127.0.0.1:1/0"))
    assert "secret" not in str(err.value) and "***" in str(err.value)
    with pytest.raises(StoreError, match="nonsense://x"):
        open_url("nonsense://x")


def test_annotate_sets_the_message_without_an_event(store: JobStore) -> None:
    rec = store.submit(_spec_for_annotate())
    before = store.events(rec.id)
    store.annotate(rec.id, "waiting: needs 4 GPUs; 2 free")
    after = store.get(rec.id)
    assert after.message == "waiting: needs 4 GPUs; 2 free" and after.state is JobState.QUEUED
    assert store.events(rec.id) == before
    with pytest.raises(JobNotFound):
        store.annotate("no-such-job", "x")
    assert not store.client.exists(store.keys.job("no-such-job"))


def _spec_for_annotate() -> JobSpec:
    return parse_spec(
        {
            "name": "note",
            "team": "t",
            "class": "bulk",
            "workload": "mlp",
            "sla": {"throughput": {"min_samples_per_s": 1}},
            "run": {"steps": 1, "warmup_steps": 0},
        }
    )


def test_get_many_keeps_order_and_skips_missing(store: JobStore) -> None:
    a = store.submit(_spec_for_annotate())
    b = store.submit(_spec_for_annotate())
    got = store.get_many([b.id, "gone-000000", a.id])
    assert [r.id for r in got] == [b.id, a.id]


def test_submit_many_writes_whole_jobs_in_fifo_order(store: JobStore) -> None:
    ids = store.submit_many([_spec_for_annotate() for _ in range(7)], by="bench")
    assert len(set(ids)) == 7
    assert store.queued("bulk") == ids
    for job_id in ids:
        rec = store.get(job_id)
        assert rec.state is JobState.QUEUED and rec.by == "bench"
        assert [e["event"] for e in store.events(job_id)] == ["submitted", "queued"]


def test_queue_version_changes_exactly_when_a_queue_does(store: JobStore) -> None:
    v0 = store.queue_version()
    a = store.submit(_spec_for_annotate())
    v1 = store.queue_version()
    assert v1 != v0
    store.annotate(a.id, "waiting")  # not a queue change
    assert store.queue_version() == v1
    store.transition(a.id, JobState.PLACED)  # leaves the queue
    v2 = store.queue_version()
    assert v2 != v1
    store.transition(a.id, JobState.RUNNING)  # not a queue change
    assert store.queue_version() == v2
    store.transition(a.id, JobState.QUEUED)  # back in the queue
    assert store.queue_version() != v2


def test_cancelling_lists_only_jobs_being_cancelled(store: JobStore) -> None:
    a, b = (store.submit(_spec_for_annotate()).id for _ in range(2))
    for job_id in (a, b):
        store.transition(job_id, JobState.PLACED)
        store.transition(job_id, JobState.RUNNING)
    store.transition(b, JobState.CANCELLING)
    assert store.cancelling([a, b, "gone-000000"]) == [b]
    assert store.cancelling([]) == []
