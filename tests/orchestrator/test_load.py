"""The load generator's engine (``orchestrator/load.py``): its schedules and inputs (pure), and
its requests against a real local HTTP server that keeps the service endpoint's contract
(``tests/orchestrator/service_stub.py``), stalls once, and answers 503, 504, late or not at
all. The stall checks are the point: a request due during a stall reports its wait, measured
from its intended time. Figures are checked only with wide margins, never as performance."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable

import pytest

from orchestrator.client import Client
from orchestrator.errors import OrchError
from orchestrator.load import (
    CONNECTION_ERROR,
    DISTINCT_INPUTS,
    MAX_REQUESTS,
    TIMEOUT,
    Answered,
    LoadReport,
    Schedule,
    ServiceInput,
    Spread,
    make_bodies,
    poisson_schedule,
    run_load,
    trace_schedule,
)
from tests.orchestrator.service_stub import INPUT, JOB_ID, TOKEN, ServiceStub, serving

PATH = f"/v1/services/{JOB_ID}/infer"


# ---- pure: the schedule, the inputs, the percentiles --------------------------------------------


def test_a_poisson_schedule_is_seeded_at_its_rate_and_bounded() -> None:
    a = poisson_schedule(100.0, 20.0, seed=1)
    assert a == poisson_schedule(100.0, 20.0, seed=1) != poisson_schedule(100.0, 20.0, seed=2)
    assert a.span_s == 20.0 and len(a.offsets) == pytest.approx(2_000, rel=0.1)
    assert a.offsets == sorted(a.offsets) and a.offsets[0] > 0 and a.offsets[-1] < 20.0
    with pytest.raises(ValueError, match=f"at most {MAX_REQUESTS:,} in one run"):
        poisson_schedule(1_000.0, 1_001.0, seed=0)


def test_a_trace_is_sent_once_or_repeated_over_the_duration() -> None:
    once = trace_schedule("0.5 0.75\n1.5\n")
    assert once == Schedule([0.0, 0.25, 1.0], 1.0)
    repeated = trace_schedule("0\n0.25 0.5\n", duration_s=1.2)
    assert repeated.span_s == 1.2
    assert repeated.offsets == pytest.approx([0.0, 0.25, 0.5, 0.5, 0.75, 1.0, 1.0])
    with pytest.raises(ValueError, match="line 2: arrival times must not decrease"):
        trace_schedule("1\n0.5\n")
    with pytest.raises(ValueError, match="no period to repeat"):
        trace_schedule("3 3\n", duration_s=10.0)
    with pytest.raises(ValueError, match=f"more than {MAX_REQUESTS:,} arrivals"):
        trace_schedule("0\n0.001\n", duration_s=2_000.0)


def test_inputs_have_the_advertised_shape_and_values_and_are_seeded() -> None:
    ints = ServiceInput.model_validate(INPUT)
    bodies = make_bodies(ints, count=100, seed=3)
    assert len(bodies) == DISTINCT_INPUTS and bodies == make_bodies(ints, 100, seed=3)
    for body in bodies:
        (sample,) = json.loads(body).values()
        assert len(sample) == 2 and all(len(row) == 3 for row in sample)
        assert all(isinstance(v, int) and 0 <= v < 50 for row in sample for v in row)
    floats = ServiceInput(shape=[4], dtype="float32")
    (one,) = make_bodies(floats, count=1, seed=0)  # no more inputs than requests
    assert all(isinstance(v, float) for v in json.loads(one)["input"])
    no_high = make_bodies(ServiceInput(shape=[3], dtype="int64"), count=2, seed=0)
    assert [json.loads(b)["input"] for b in no_high] == [[0, 0, 0]] * 2
    large = ServiceInput(shape=[1024, 1024], dtype="int64")
    assert len(make_bodies(large, count=100, seed=0)) == 4  # 4 Mi numbers in all


def test_an_advertised_input_is_checked() -> None:
    with pytest.raises(OrchError, match="advertises no input"):
        ServiceInput.advertised({"job_id": JOB_ID, "ready_replicas": 1, "input": None})
    with pytest.raises(OrchError, match="dtype"):
        ServiceInput.advertised({"job_id": JOB_ID, "input": {"shape": [2], "dtype": "float16"}})
    with pytest.raises(OrchError, match="makes at most"):
        ServiceInput.advertised(
            {"job_id": JOB_ID, "input": {"shape": [4096] * 2, "dtype": "int64"}}
        )


def test_a_spread_interpolates_between_ranks() -> None:
    assert Spread.of([]) is None
    assert Spread.of([0.002]) == Spread(1, 2.0, 2.0, 2.0, 2.0)
    spread = Spread.of([i / 1000 for i in range(101)])  # 0..100 ms
    assert spread is not None
    assert (spread.p50, spread.p95, spread.p99, spread.max) == pytest.approx((50, 95, 99, 100))


# ---- against a real server ------------------------------------------------------------------


def _load(
    stub: ServiceStub,
    schedule: Schedule,
    *,
    timeout_s: float = 10.0,
    connections: int = 100,
    meanwhile: Callable[[asyncio.AbstractEventLoop], object] | None = None,
    on_answer: Answered | None = None,
) -> LoadReport:
    """``run_load`` against ``stub`` through the SDK client (its clock started with it)."""
    bodies = make_bodies(ServiceInput.model_validate(INPUT), len(schedule.offsets), seed=0)

    async def session() -> LoadReport:
        if meanwhile is not None:
            meanwhile(asyncio.get_running_loop())
        with Client(stub.url, TOKEN) as client:
            stub.start_clock()
            return await run_load(
                client,
                PATH,
                schedule,
                bodies,
                timeout_s=timeout_s,
                connections=connections,
                on_answer=on_answer,
            )

    return asyncio.run(session())


def _every(gap_s: float, count: int) -> Schedule:
    return Schedule([i * gap_s for i in range(count)], gap_s * count)


def test_requests_due_during_a_server_stall_carry_their_wait() -> None:
    # 100 req/s for 2 s; at 0.5 s the server holds every request for 0.5 s. Two connections:
    # the requests due meanwhile wait for one in the client, and are sent when the stall ends.
    # Measured from when they were sent, they would look fast; from when they were due, the
    # first of them waited ~0.5 s and a quarter of all ~0-0.5 s, so p95 is ~0.4 s.
    answers: dict[int, tuple[float, float]] = {}
    with serving(stall_at=0.5, stall_s=0.5) as stub:
        report = _load(
            stub,
            _every(0.01, 200),
            connections=2,
            on_answer=lambda i, due, lat: answers.setdefault(i, (due, lat)),
        )
        assert stub.stalled and len(stub.peers) <= 2  # never more connections than allowed
    assert report.statuses == {"200": 200}
    # each answer told once, with when it was due: the stall shows in time, not only in sum
    assert sorted(answers) == list(range(200))
    assert all(due == pytest.approx(i * 0.01) for i, (due, _) in answers.items())
    before = max(lat for due, lat in answers.values() if due < 0.4)
    during = max(lat for due, lat in answers.values() if 0.5 <= due < 0.6)
    assert during >= 0.25 and during > before
    assert report.latency is not None and report.send_lag is not None
    assert report.latency.max >= 400  # ms: the first request of the stall waited it through
    assert report.latency.p95 >= 250  # and so did the ones due after it, less each
    assert report.send_lag.max >= 250  # they left late: the client's two connections were busy


def test_requests_due_while_the_client_stalls_carry_their_wait() -> None:
    # the client's own loop blocked for 0.5 s at 0.5 s (a GC pause, a slow callback): the
    # requests due meanwhile leave when it wakes, and their latency and send lag say so
    def block(loop: asyncio.AbstractEventLoop) -> object:
        return loop.call_later(0.5, time.sleep, 0.5)

    with serving() as stub:
        report = _load(stub, _every(0.01, 200), meanwhile=block)
    assert report.statuses == {"200": 200}
    assert report.latency is not None and report.send_lag is not None
    assert report.latency.max >= 400 and report.latency.p95 >= 250
    assert report.send_lag.max >= 400  # the client that could not keep up says so


def test_answers_are_counted_by_status() -> None:
    script = ("ok", "ok", "ok", "503", "ok", "slow", "ok", "504", "ok", "drop")
    with serving(script=script, slow_s=3.0) as stub:
        report = _load(stub, _every(0.01, 100), timeout_s=1.0)
        assert all(p == PATH for p in stub.paths)
    assert report.statuses == {
        "200": 60,
        "503": 10,
        "504": 10,
        CONNECTION_ERROR: 10,
        TIMEOUT: 10,
    }
    assert report.latency is not None and report.latency.count == 60  # the 200s' alone


def test_an_open_loop_achieves_about_the_offered_rate() -> None:
    schedule = poisson_schedule(100.0, 2.0, seed=0)
    with serving() as stub:
        report = _load(stub, schedule)
        assert stub.count == len(schedule.offsets)
    assert report.requests == len(schedule.offsets) == report.statuses["200"]
    assert report.offered_rps == pytest.approx(len(schedule.offsets) / 2.0)
    assert report.achieved_rps is not None and report.offered_rps is not None
    assert 0.5 <= report.achieved_rps / report.offered_rps <= 1.5  # wide: a shared machine
    data = report.data()
    assert set(data["latency_ms"]) == {"p50", "p95", "p99", "max"}
    assert data["statuses"] == {"200": report.requests}
