"""A service's endpoint, the parts that need no replica: the latency buckets and what is
judged on them, the request checks of the ingress, the replica's answers, and the queue's
round trip through a real Redis."""

from __future__ import annotations

import math
import random
import time
from typing import Any

import pytest
import torch

from orchestrator.api.routers.services import _payload
from orchestrator.sla import evaluate_sla
from orchestrator.spec import parse_spec
from orchestrator.store.ingress import (
    GAMMA,
    OUTCOMES,
    WINDOW_S,
    ReplicaQueue,
    bucket_of,
    figures_of,
    quantile,
    record_commands,
    service_keys,
    with_service_figures,
)
from workers.serve_endpoint import answer_of, clean_answer, clean_facts, decode, sample_facts


def test_a_percentile_from_the_buckets_is_within_their_relative_error() -> None:
    rng = random.Random(7)
    values = [rng.lognormvariate(2.0, 1.0) for _ in range(20_000)]
    buckets: dict[int, int] = {}
    for v in values:
        b = bucket_of(v)
        buckets[b] = buckets.get(b, 0) + 1
    values.sort()
    for q in (0.5, 0.95, 0.99):
        exact = values[math.ceil(q * len(values)) - 1]
        got = quantile(buckets, q)
        assert got is not None and abs(got - exact) / exact <= GAMMA - 1
    assert quantile({}, 0.99) is None


def _hash(cmds: list[tuple[Any, ...]], into: dict[str, dict[str, str]]) -> None:
    """Apply recorded HINCRBYs to plain dicts (what Redis would hold)."""
    for cmd in cmds:
        if cmd[0] == "HINCRBY":
            h = into.setdefault(cmd[1], {})
            h[str(cmd[2])] = str(int(h.get(str(cmd[2]), "0")) + int(cmd[3]))


def test_windows_meet_the_sla_only_within_the_ceiling_and_without_failures() -> None:
    keys = service_keys("ns", "svc")
    stored: dict[str, dict[str, str]] = {}
    t0 = 1_000_000.0
    for i in range(100):  # window 0: fast
        _hash(record_commands(keys, "ok", 5.0, t0 + i * 0.01), stored)
    for i in range(100):  # window 1: slow
        _hash(record_commands(keys, "ok", 500.0, t0 + WINDOW_S + i * 0.01), stored)
    _hash(record_commands(keys, "ok", 5.0, t0 + 2 * WINDOW_S), stored)  # window 2: a timeout
    _hash(record_commands(keys, "timeout", None, t0 + 2 * WINDOW_S), stored)
    _hash(record_commands(keys, "refused", None, t0 + 3 * WINDOW_S), stored)  # window 3
    _hash(record_commands(keys, "unavailable", None, t0 + 4 * WINDOW_S), stored)  # window 4
    windows = [v for k, v in sorted(stored.items()) if k.startswith(keys["win"])]
    f = figures_of(stored[keys["life"]], windows, ceiling=(0.99, 100.0))
    assert f.counts == {"ok": 201, "error": 0, "timeout": 1, "unavailable": 1, "refused": 1}
    assert f.requests == 204
    # judged: the fast window, the slow one, the timeout's, the 503's (refusals alone: none)
    assert f.windows == 4 and f.windows_met == 1
    assert f.attainment == 0.25
    assert f.p50_ms is not None and abs(f.p50_ms - 5.0) <= 0.05
    assert f.p99_ms is not None and abs(f.p99_ms - 500.0) <= 5.0


def _spec() -> Any:
    return parse_spec(
        {
            "name": "svc",
            "team": "t",
            "class": "interactive",
            "workload": {"name": "infer", "args": {"model": "mlp"}},
            "sla": {"latency": {"percentile": 99, "max_ms": 100}},
            "run": {"duration_s": 10},
            "serve": {"rate_rps": 10, "endpoint": True},
        }
    )


def test_the_verdict_counts_failed_requests_as_past_the_ceiling() -> None:
    from orchestrator.store.ingress import ServiceFigures

    def figures(ok: int, failed: int) -> ServiceFigures:
        counts = {"ok": ok, "error": 0, "timeout": failed, "unavailable": 0, "refused": 3}
        return ServiceFigures(ok + failed + 3, 5.0, 8.0, 9.0, counts, 2, 2)

    met = evaluate_sla(_spec(), with_service_figures({"p99_ms": 999.0}, figures(1000, 5)))
    assert met.met is True  # the replicas' own p99 is replaced by the ingress's
    assert "over 1,005 requests, 5 failed, 100% of windows met" in met.measured
    missed = evaluate_sla(_spec(), with_service_figures({}, figures(1000, 20)))
    assert missed.met is False  # 2% failed: past what p99 leaves out
    none = ServiceFigures(0, None, None, None, dict.fromkeys(OUTCOMES, 0), 0, None)
    assert with_service_figures({"p99_ms": 1.0}, none) == {"p99_ms": 1.0}  # nothing came yet


SAMPLE = {"shape": [2, 3], "dtype": "float32", "high": None}


@pytest.mark.parametrize(
    ("body", "content_type", "says"),
    [
        (b"{", "application/json", "not JSON"),
        (b'{"inputs": []}', "application/json", 'must be an object {"input"'),
        (b'{"input": [[1, 2, 3]]}', "application/json", "input: a list of 1 where 2"),
        (b'{"input": [[1, 2, 3], [4, 5, "x"]]}', "application/json", "input[1][2]: 'x'"),
        (b'{"input": [[1, 2, 3], [4, 5, true]]}', "application/json", "input[1][2]: True"),
        (b"\0" * 23, "application/octet-stream", "23 bytes"),
    ],
)
def test_a_malformed_request_is_refused_naming_what_is_wrong(
    body: bytes, content_type: str, says: str
) -> None:
    with pytest.raises(ValueError) as err:
        _payload(body, content_type, SAMPLE)
    assert says in str(err.value)
    assert "shape [2, 3]" in str(err.value) or "not JSON" in str(err.value)


def test_a_deep_body_is_refused_without_exhausting_the_stack() -> None:
    deep = b'{"input": ' + b"[" * 100_000 + b"]" * 100_000 + b"}"
    with pytest.raises(ValueError):
        _payload(deep, "application/json", SAMPLE)


def test_token_ids_must_be_in_the_vocabulary() -> None:
    ids = {"shape": [3], "dtype": "int64", "high": 10}
    assert _payload(b'{"input": [0, 5, 9]}', "application/json", ids) == {"input": [0, 5, 9]}
    for bad in (b'{"input": [0, 5, 10]}', b'{"input": [0, -1, 2]}', b'{"input": [0, 1.5, 2]}'):
        with pytest.raises(ValueError, match=r"\[0, 10\)"):
            _payload(bad, "application/json", ids)


def test_a_replica_decodes_both_bodies_to_the_same_sample() -> None:
    import base64
    import struct

    raw = struct.pack("<6f", *range(6))
    a = decode({"input": [[0, 1, 2], [3, 4, 5]]}, SAMPLE)
    b = decode({"raw": base64.b64encode(raw).decode()}, SAMPLE)
    assert torch.equal(a, b) and a.shape == (2, 3)
    with pytest.raises(ValueError):
        decode({"input": [1, 2]}, SAMPLE)


def test_what_a_replica_says_of_its_input_and_output() -> None:
    emb = torch.nn.Sequential(torch.nn.Embedding(50, 4))
    assert sample_facts(emb, torch.zeros(1, 7, dtype=torch.long)) == {
        "shape": [7],
        "dtype": "int64",
        "high": 50,
    }
    assert answer_of(torch.tensor([1.0, 2.0])) == [1.0, 2.0]
    logits = torch.zeros(8, 1000)
    logits[-1, 123] = 5.0
    assert answer_of(logits) == {"next_token": 123}  # 8,000 values: the next token only


def test_a_team_process_answer_is_cleaned_before_it_leaves_the_worker() -> None:
    assert clean_answer("nope") == {
        "error": "the service's process answered with something other than an object"
    }
    assert clean_answer({"error": "x" * 10_000}) == {"error": "x" * 2000}
    got = clean_answer({"output": [1], "timing": {"model_ms": 1.5, "x": {"deep": 1}}, "y": 2})
    assert got == {"output": [1], "timing": {"model_ms": 1.5}}


def test_what_a_team_process_says_of_its_replica_is_cleaned_before_the_ingress_reads_it() -> None:
    """The facts a replica joins with reach the ingress (it checks requests by them) and every
    client (``GET /v1/services/JOB``): only their known fields, each well-formed, pass."""
    good = {"input": {"shape": [16], "dtype": "float32", "high": None}, "max_batch": 8}
    assert clean_facts({**good, "ends_at": 1.7e9, "extra": "x" * 10_000}) == {
        **good,
        "ends_at": 1.7e9,
    }
    hostile = {
        "input": {"shape": [16, "x"], "dtype": "float32"},
        "max_batch": "lots",
        "ends_at": float("nan"),
    }
    assert clean_facts(hostile) == {"input": None, "max_batch": 1, "ends_at": None}
    assert clean_facts({"input": {"shape": [1] * 9, "dtype": "float32"}})["input"] is None
    assert clean_facts({"input": {"shape": [4], "dtype": "complex128"}})["input"] is None
    assert clean_facts({"input": {"shape": [4], "dtype": ["float32"]}})["input"] is None
    assert clean_facts({"max_batch": True, "ends_at": 1e300})["ends_at"] is None
    assert clean_facts("nope") == {"input": None, "max_batch": 1, "ends_at": None}


def test_requests_reach_one_replica_each_and_are_answered_and_requeued(redis_url: str) -> None:
    """The queue over a real Redis: two replicas share the requests (each taken once); what
    one takes and puts back is taken again by the other."""
    import json

    import redis

    ns = f"test-ingress-{time.time_ns()}"
    a, b = (ReplicaQueue(redis_url, ns, "svc") for _ in range(2))
    a.join("a", {"max_batch": 4})
    b.join("b", {"max_batch": 4})
    client = redis.Redis.from_url(redis_url, decode_responses=True)
    keys = service_keys(ns, "svc")
    try:
        inbox = f"{ns}:svc-inbox:test"
        for i in range(6):
            fields = {"rid": f"r{i}", "at": "1.0", "body": json.dumps({"i": i}), "reply": inbox}
            client.xadd(keys["req"], fields)
        got_a = a.take(4, 0.1)
        got_b = b.take(4, 0.1)
        assert len(got_a) == 4 and len(got_b) == 2
        assert {r.rid for r in got_a} | {r.rid for r in got_b} == {f"r{i}" for i in range(6)}
        a.answer([(r, {"output": r.payload["i"]}) for r in got_a])
        for r in got_a:  # each answer in the inbox its request named, under its id
            got = json.loads(client.lpop(inbox))
            assert got == {"rid": r.rid, "body": {"output": r.payload["i"]}}
        b.requeue(got_b)  # b stops: what it took goes to the replicas that stay
        again = a.take(4, 0.1)
        assert sorted(r.rid for r in again) == sorted(r.rid for r in got_b)
        assert {r.reply for r in again} == {inbox}  # put back with where it is answered
        assert client.xlen(keys["req"]) == 2  # answered ones are gone
        assert set(client.hgetall(keys["ready"])) == {"a", "b"}
        b.leave()
        assert set(client.hgetall(keys["ready"])) == {"a"}
    finally:
        for k in client.scan_iter(f"{ns}:*"):
            client.delete(k)
        a.close()
        b.close()


def test_what_a_dead_replica_took_is_claimed_by_a_ready_one(redis_url: str) -> None:
    """A replica that dies (killed, its node lost) leaves what it took pending: once it is no
    longer ready and the requests have waited, a ready replica claims and answers them; a
    live replica's pending requests are never claimed."""
    import json

    import redis

    ns = f"test-reclaim-{time.time_ns()}"
    dead, live, other = (ReplicaQueue(redis_url, ns, "svc") for _ in range(3))
    for q, name in ((dead, "dead"), (live, "live"), (other, "other")):
        q.join(name, {"max_batch": 4})
        q.reclaim_idle_s = 0.2
    client = redis.Redis.from_url(redis_url, decode_responses=True)
    keys = service_keys(ns, "svc")
    try:
        inbox = f"{ns}:inbox"
        for i in range(5):
            fields = {"rid": f"r{i}", "at": "1.0", "body": json.dumps({"i": i}), "reply": inbox}
            client.xadd(keys["req"], fields)
        taken_dead = dead.take(3, 0.1)  # then its process dies: no answer, no leave()
        taken_live = live.take(2, 0.1)  # alive, still working on them
        assert len(taken_dead) == 3 and len(taken_live) == 2
        assert other.reclaim(10) == []  # too fresh: nothing waited long enough
        time.sleep(0.3)
        assert other.reclaim(10) == []  # waited, but both are still ready
        client.hdel(keys["ready"], "dead")  # its readiness lapses (nobody renews it)
        live.heartbeat()
        got = other.reclaim(10)
        assert sorted(r.rid for r in got) == sorted(r.rid for r in taken_dead)
        other.answer([(r, {"output": r.payload["i"]}) for r in got])
        assert client.llen(inbox) == 3
        time.sleep(0.3)
        live.heartbeat()
        assert other.reclaim(10) == []  # the live replica's stay its own
    finally:
        for k in client.scan_iter(f"{ns}:*"):
            client.delete(k)
        for q in (dead, live, other):
            q.close()


def test_many_waiting_requests_share_one_inbox_and_get_their_own_answers(
    redis_client: Any, redis_url: str
) -> None:
    """More requests waiting at once than the ingress holds connections (each used to hold
    one for its whole wait, and the 65th was refused): each gets its own answer, through
    the one inbox its process reads."""
    import asyncio
    import threading

    from orchestrator.store.ingress import INGRESS_CONNECTIONS, IngressStore

    ns = f"test-inbox-{time.time_ns()}"
    ingress = IngressStore(redis_client, ns)
    replica = ReplicaQueue(redis_url, ns, "svc")
    replica.join("r0", {"max_batch": 32})
    done = threading.Event()

    def serve() -> None:
        while not done.is_set():
            taken = replica.take(32, 0.05)
            replica.answer([(r, {"output": r.payload["i"] * 2}) for r in taken])

    server = threading.Thread(target=serve, daemon=True)
    server.start()
    n = 4 * INGRESS_CONNECTIONS

    async def main() -> list[Any]:
        try:
            answers = await asyncio.gather(
                *(ingress.ask("svc", {"i": i}, time.time(), 30.0) for i in range(n))
            )
        finally:
            await ingress.aclose()
        return answers

    try:
        answers = asyncio.run(main())
    finally:
        done.set()
        server.join(timeout=5)
        replica.close()
        for k in redis_client.scan_iter(f"{ns}:*"):
            redis_client.delete(k)
    assert answers == [{"output": 2 * i} for i in range(n)]


def test_a_request_queued_when_the_last_replica_leaves_is_refused_not_left_to_time_out(
    redis_client: Any, redis_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A service's run ends (its last replica leaves) with requests still queued: no replica
    is left to answer them, so each is refused (503, counted unavailable) within two
    readiness holds, not at its timeout; while a replica stays ready (busy, renewing), a
    request waits for it."""
    import asyncio

    import orchestrator.store.ingress as ingress_mod
    from orchestrator.store.ingress import IngressStore, Unserved

    monkeypatch.setattr(ingress_mod, "READY_TTL_S", 0.3)
    monkeypatch.setattr(ingress_mod, "SERVED_EVERY_S", 0.1)
    ns = f"test-unserved-{time.time_ns()}"
    ingress = IngressStore(redis_client, ns)
    replica = ReplicaQueue(redis_url, ns, "svc")
    replica.join("r0", {"max_batch": 4})

    async def main() -> tuple[Any, float, str]:
        try:
            # the replica is ready and renews, but takes nothing yet: the request waits
            asked = asyncio.ensure_future(ingress.ask("svc", {"i": 1}, time.time(), 30.0))
            for _ in range(4):
                await asyncio.sleep(0.3)
                replica.heartbeat()
            assert not asked.done()
            taken = replica.take(4, 0.5)
            replica.answer([(r, {"output": 7}) for r in taken])
            answered = await asyncio.wait_for(asked, 5)
            # the run ends with a request queued: refused within seconds, not at 30 s
            replica.leave()
            started = time.monotonic()
            with pytest.raises(Unserved, match="no ready replica left"):
                await ingress.ask("svc", {"i": 2}, time.time(), 30.0)
            waited = time.monotonic() - started
            status = await ingress.call("svc", {"i": 3}, 30.0)  # a trial's path says 503
            return answered, waited, status
        finally:
            await ingress.aclose()

    try:
        answered, waited, status = asyncio.run(main())
        figures = ingress.figures("svc", None)
    finally:
        replica.close()
        for k in redis_client.scan_iter(f"{ns}:*"):
            redis_client.delete(k)
    assert answered == {"output": 7}
    assert waited < 5.0 and status == "503"
    assert figures.counts["unavailable"] == 1  # the trial path's refusal, counted


def test_a_hostile_join_reaches_the_ingress_cleaned_and_a_second_join_changes_nothing(
    redis_url: str,
) -> None:
    """The worker's pump between a team's process and the service's queue (real Redis): a
    join whose facts are malformed (an unhashable dtype, a junk batch) neither raises in the
    worker nor reaches the ingress as sent; a second join is ignored."""
    import json

    import redis

    from workers.serve_endpoint import RequestPump

    ns = f"test-pump-{time.time_ns()}"
    queue = ReplicaQueue(redis_url, ns, "svc")
    sent: list[Any] = []
    pump = RequestPump(queue, sent.append)
    client = redis.Redis.from_url(redis_url, decode_responses=True)
    keys = service_keys(ns, "svc")
    hostile = {"input": {"shape": [4], "dtype": ["float32"]}, "max_batch": {"x": 1}}
    try:
        assert pump.on_message({"join": {"name": "r0", "facts": hostile}})
        assert pump.on_message({"join": {"name": "r1", "facts": {"max_batch": 7}}})
        ready = client.hgetall(keys["ready"])
        assert set(ready) == {"r0"}
        facts = json.loads(ready["r0"])
        assert facts["input"] is None and facts["max_batch"] == 1 and facts["ends_at"] is None
        assert pump.max_batch == 1
    finally:
        pump.close()
        for k in client.scan_iter(f"{ns}:*"):
            client.delete(k)


def test_each_windows_percentile_is_read_apart(redis_client: Any) -> None:
    """A window's percentile from its own buckets (what the benchmarks set a scale's windows
    beside the steady ones by), oldest first, with its start and its answered requests."""
    from orchestrator.store.ingress import WINDOW_S, record_commands, window_percentiles

    ns = f"test-windows-{time.time_ns()}"
    keys = service_keys(ns, "svc")
    t0 = 1_000 * WINDOW_S
    try:
        for at, ms in [(t0 + 1, 5.0), (t0 + 2, 6.0), (t0 + WINDOW_S + 1, 200.0)]:
            pipe = redis_client.pipeline(transaction=False)
            for cmd in record_commands(keys, "ok", ms, at):
                pipe.execute_command(*cmd)
            pipe.execute()
        pipe = redis_client.pipeline(transaction=False)
        for cmd in record_commands(keys, "unavailable", None, t0 + 2 * WINDOW_S + 1):
            pipe.execute_command(*cmd)
        pipe.execute()
        got = window_percentiles(redis_client, keys, 0.99)
    finally:
        for k in redis_client.scan_iter(f"{ns}:*"):
            redis_client.delete(k)
    assert [(start, n) for start, _, n in got] == [
        (t0, 2),
        (t0 + WINDOW_S, 1),
        (t0 + 2 * WINDOW_S, 0),
    ]
    first, second, third = (p for _, p, _ in got)
    assert first == pytest.approx(6.0, rel=0.03) and second == pytest.approx(200.0, rel=0.03)
    assert third is None  # a window of refusals only: no latency
