"""An open-loop load generator for a service's HTTP endpoint (``orch load``'s engine).

Each request is sent at its *intended* time, whether or not the ones before were answered
(open loop, as users arrive), over a bounded pool of connections, and its latency is measured
from that intended time to its answer. So when the client or the server stalls, the requests
due during the stall carry their wait, as their users would have (no coordinated omission: Gil
Tene, "How NOT to measure latency", 2015; wrk2 measures the same way). How late each request
actually left (its first byte on the wire, behind its intended time) is reported apart: a
client that cannot keep up says so rather than quietly offering less.

* :class:`Schedule`: when each request is due, a seeded Poisson stream (:func:`poisson_schedule`)
  or a trace (:func:`trace_schedule`), from :mod:`workers.arrivals` (the streams a service's
  ``serve:`` section names, so a trace means the same load to both), at most
  :data:`MAX_REQUESTS`.
* :func:`make_bodies`: random inputs of the shape and dtype the service advertises (seeded),
  made and encoded before the first request, so making them is not measured.
* :func:`run_schedule`: the requests at their times on an asyncio loop, each carried by a
  :data:`Send`; returns a :class:`LoadReport` (answers by status, latency percentiles of the
  answered ones, the send lag). :func:`run_load` carries them over HTTP with
  ``httpx.AsyncClient`` (``orch load``, the benchmarks); a service's tuning trial carries them
  into the ingress's producer side (``orchestrator.tuner.evaluators.serve``): one engine, so a
  trial's load and a client's are the same schedule measured the same way.

Standard library, httpx and pydantic only: it runs in the light client.
"""

from __future__ import annotations

import asyncio
import json
import math
import random
import statistics
from array import array
from collections import Counter
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Annotated, Any, Literal, Self

import httpx
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from orchestrator.errors import OrchError
from workers.arrivals import parse_trace, poisson_arrivals, repeat_trace

if TYPE_CHECKING:
    from orchestrator.client import Client

__all__ = [
    "CONNECTION_ERROR",
    "MAX_REQUESTS",
    "TIMEOUT",
    "Answered",
    "LoadReport",
    "Schedule",
    "Send",
    "ServiceInput",
    "Spread",
    "make_bodies",
    "offered_schedule",
    "poisson_schedule",
    "run_load",
    "run_schedule",
    "send_load",
    "trace_schedule",
]

MAX_REQUESTS = 1_000_000
"""The most requests one run sends (each is a task and two numbers while it runs)."""
DISTINCT_INPUTS = 16
"""How many different inputs are made; request ``i`` sends input ``i % 16``."""
MAX_INPUT_ELEMENTS = 1 << 22
"""The most numbers made for the inputs together (and the most one input may hold)."""
TIMEOUT = "timeout"
"""The status of a request not answered within the timeout."""
CONNECTION_ERROR = "connection_error"
"""The status of a request that got no HTTP answer (refused, reset, a broken reply)."""
JSON = {"content-type": "application/json"}


# ---- when each request is due ----------------------------------------------------------------


@dataclass(frozen=True)
class Schedule:
    """When each request is due, in seconds from the start, and the span they are offered
    over (the offered rate is ``len(offsets) / span_s``)."""

    offsets: list[float]
    span_s: float


def poisson_schedule(rate_rps: float, duration_s: float, seed: int) -> Schedule:
    """A Poisson stream at ``rate_rps`` over ``duration_s``, seeded (``random.Random(seed)``).

    Raises:
        ValueError: a rate or duration not a finite number > 0, or more than
            :data:`MAX_REQUESTS` requests expected (the message names the setting).
    """
    return Schedule(poisson_arrivals(rate_rps, duration_s, seed, limit=MAX_REQUESTS), duration_s)


def trace_schedule(text: str, duration_s: float | None = None) -> Schedule:
    """The arrival times of a trace (seconds, one per line or whitespace separated, never
    decreasing, from its first), repeated every ``last time`` seconds to cover ``duration_s``
    if given (as a service's ``serve.trace`` is), else sent once.

    Raises:
        ValueError: a malformed trace (naming its line), more than :data:`MAX_REQUESTS`
            requests, or a trace whose times are all one, asked to cover a duration (it has
            no period to repeat).
    """
    times = parse_trace(text, limit=MAX_REQUESTS)
    if duration_s is None:
        return Schedule(times, times[-1])
    if times[-1] == 0:
        raise ValueError(
            "every arrival of the trace is at one time: it has no period to repeat over a "
            "duration (give two different times, or no duration)"
        )
    return Schedule(repeat_trace(times, duration_s, limit=MAX_REQUESTS), duration_s)


def offered_schedule(serve: Mapping[str, Any], duration_s: float, seed: int) -> Schedule:
    """The offered load a service's job file states (``serve.rate_rps``, seeded Poisson, or
    ``serve.trace``, repeated) over ``duration_s``: what a tuning trial sends the service's
    replicas and what ``orch demo`` sends its services, as ``orch load --rate`` or ``--trace``
    would.

    Raises:
        ValueError: as :func:`poisson_schedule` and :func:`trace_schedule` do.
    """
    trace = serve.get("trace")
    if trace is None:
        return poisson_schedule(float(serve["rate_rps"]), duration_s, seed)
    return trace_schedule("\n".join(str(t) for t in trace), duration_s)


# ---- what each request sends -----------------------------------------------------------------


class ServiceInput(BaseModel):
    """One sample of the input a service takes, as it advertises it (``GET
    /v1/services/{job}``: ``input``): its shape, its dtype and, for ``int64``, the bound its
    values stay under (``[0, high)``)."""

    model_config = ConfigDict(extra="ignore", frozen=True)

    shape: list[Annotated[int, Field(ge=1)]] = Field(max_length=16)
    dtype: Literal["float32", "int64"]
    high: int | None = Field(default=None, ge=1)

    @model_validator(mode="after")
    def _not_too_big(self) -> Self:
        if self.elements > MAX_INPUT_ELEMENTS:
            raise ValueError(
                f"one sample of shape {self.shape} holds {self.elements:,} numbers; orch load "
                f"makes at most {MAX_INPUT_ELEMENTS:,}"
            )
        return self

    @property
    def elements(self) -> int:
        """How many numbers one sample holds."""
        return math.prod(self.shape)

    @classmethod
    def advertised(cls, service: dict[str, Any]) -> ServiceInput:
        """The ``input`` of a service's description.

        Raises:
            OrchError: it advertises none, or one that is malformed.
        """
        job = service.get("job_id", "the service")
        if service.get("input") is None:
            raise OrchError(
                f"{job} advertises no input (shape and dtype) to make requests of; is it "
                f"serving? (`orch show {job}`)"
            )
        try:
            return cls.model_validate(service["input"])
        except ValidationError as err:
            problems = "; ".join(
                f"{'.'.join(str(p) for p in e['loc']) or 'input'}: {e['msg']}" for e in err.errors()
            )
            message = f"{job} advertises an input orch load cannot make: {problems}"
            raise OrchError(message) from None


def make_bodies(spec: ServiceInput, count: int, seed: int) -> list[bytes]:
    """Request bodies (``{"input": <one sample>}``, JSON-encoded) of random inputs of
    ``spec``, seeded: at most :data:`DISTINCT_INPUTS` of them (fewer for large inputs, at most
    :data:`MAX_INPUT_ELEMENTS` numbers in all; request ``i`` sends ``bodies[i % len]``).
    ``float32`` values are standard normal; ``int64`` values uniform in ``[0, high)``, or 0
    when the service gives no ``high`` (the one value every index takes)."""
    rng = random.Random(seed)
    made = max(1, min(count, DISTINCT_INPUTS, MAX_INPUT_ELEMENTS // spec.elements))
    bodies = []
    for _ in range(made):
        if spec.dtype == "float32":
            flat: list[float] | list[int] = [
                round(rng.gauss(0.0, 1.0), 6) for _ in range(spec.elements)
            ]
        elif spec.high is not None:
            flat = [rng.randrange(spec.high) for _ in range(spec.elements)]
        else:
            flat = [0] * spec.elements
        sample = _nest(flat, spec.shape)
        bodies.append(json.dumps({"input": sample}, separators=(",", ":")).encode())
    return bodies


def _nest(flat: Sequence[Any], shape: Sequence[int]) -> Any:
    """``flat`` (row-major) as nested lists of ``shape``."""
    for size in reversed(shape[1:]):
        flat = [list(flat[i : i + size]) for i in range(0, len(flat), size)]
    return list(flat)


# ---- the requests ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Spread:
    """Percentiles of a set of times, in milliseconds (exact: every value is kept)."""

    count: int
    p50: float
    p95: float
    p99: float
    max: float

    @classmethod
    def of(cls, seconds: Sequence[float]) -> Spread | None:
        """The spread of ``seconds`` (``None`` when empty), linearly interpolated between
        ranks (as ``numpy.percentile``'s default)."""
        if not seconds:
            return None
        ms = sorted(s * 1000.0 for s in seconds)
        if len(ms) == 1:
            return cls(1, ms[0], ms[0], ms[0], ms[0])
        cuts = statistics.quantiles(ms, n=100, method="inclusive")
        return cls(len(ms), cuts[49], cuts[94], cuts[98], ms[-1])


@dataclass
class LoadReport:
    """What one run measured.

    Attributes:
        requests: requests due (every one is sent, unless the run was stopped).
        span_s: the span they were offered over (``--duration``, or the trace's).
        elapsed_s: from the start to the last answer (or failure).
        statuses: requests by outcome: the HTTP status (``"200"``, ``"503"``...),
            :data:`TIMEOUT` or :data:`CONNECTION_ERROR`.
        latency: intended send time to answer, of the requests answered 200.
        send_lag: how long after its intended time each request's first byte left (the
            client's own lateness, and its wait for a free connection).
    """

    requests: int
    span_s: float
    elapsed_s: float
    statuses: dict[str, int]
    latency: Spread | None
    send_lag: Spread | None

    @property
    def offered_rps(self) -> float | None:
        """Requests per second offered (``None`` for a span of 0)."""
        return self.requests / self.span_s if self.span_s > 0 else None

    @property
    def achieved_rps(self) -> float | None:
        """Requests answered 200 per second, from the start to the last answer."""
        return self.statuses.get("200", 0) / self.elapsed_s if self.elapsed_s > 0 else None

    def data(self) -> dict[str, Any]:
        """The report as JSON-ready data (times in seconds, or ms where the key says so)."""

        def spread(s: Spread | None) -> dict[str, float] | None:
            return None if s is None else {k: getattr(s, k) for k in ("p50", "p95", "p99", "max")}

        return {
            "requests": self.requests,
            "span_s": self.span_s,
            "elapsed_s": self.elapsed_s,
            "offered_rps": self.offered_rps,
            "achieved_rps": self.achieved_rps,
            "statuses": self.statuses,
            "latency_ms": spread(self.latency),
            "send_lag_ms": spread(self.send_lag),
        }


@dataclass
class _Tally:
    """What the requests met, added to as each ends."""

    statuses: Counter[str] = field(default_factory=Counter)
    latency_s: array[float] = field(default_factory=lambda: array("d"))
    lag_s: array[float] = field(default_factory=lambda: array("d"))
    last_s: float = 0.0
    on_answer: Answered | None = None


Send = Callable[[int], Awaitable[tuple[str, float | None]]]
"""How one request goes out: ``send(i)`` sends request ``i`` and returns its outcome (an HTTP
status as text, or :data:`CONNECTION_ERROR`) and the loop time it left (``None``: unknown). It
is called at the request's intended time, and cancelled at its timeout."""


Answered = Callable[[int, float, float], None]
"""Told of each answered request (status 200): ``(i, due_s, latency_s)``, its index, when it
was due (seconds from the first request's due time) and its latency. It runs on the load's
event loop, after the request is tallied, and must not raise (an exception ends the load)."""


async def run_schedule(
    schedule: Schedule, send: Send, *, timeout_s: float, on_answer: Answered | None = None
) -> LoadReport:
    """Send request ``i`` with ``send(i)`` at each of the schedule's times, open loop, and
    measure: the engine of :func:`run_load`, apart from what carries a request (HTTP there;
    a service's tuning trial enters at the ingress's producer side,
    ``orchestrator.tuner.evaluators.serve``).

    Each request is a task started at its intended time (the loop sleeps until then; it never
    waits for an answer); its latency runs from that time to its answer. A request unanswered
    ``timeout_s`` after its intended time counts as :data:`TIMEOUT`. ``on_answer``, if given,
    is told of each answered request as it ends (a benchmark's latency over time).
    """
    loop = asyncio.get_running_loop()
    tally = _Tally(on_answer=on_answer)
    running: set[asyncio.Task[None]] = set()
    start = loop.time()
    for i, offset in enumerate(schedule.offsets):
        await asyncio.sleep(max(0.0, start + offset - loop.time()))  # 0: still yields
        task = loop.create_task(_one(send, i, start, offset, timeout_s, tally))
        running.add(task)
        task.add_done_callback(running.discard)
    if running:
        await asyncio.gather(*running)
    return LoadReport(
        requests=len(schedule.offsets),
        span_s=schedule.span_s,
        elapsed_s=max(0.0, tally.last_s - start),
        statuses=dict(sorted(tally.statuses.items())),
        latency=Spread.of(tally.latency_s),
        send_lag=Spread.of(tally.lag_s),
    )


async def _one(
    send: Send, i: int, start: float, offset: float, timeout_s: float, tally: _Tally
) -> None:
    """Send request ``i``, due at loop time ``start + offset``; tally its outcome, latency and
    send lag."""
    loop = asyncio.get_running_loop()
    due = start + offset
    left: float | None = None
    try:
        async with asyncio.timeout(timeout_s):
            outcome, left = await send(i)
    except (TimeoutError, httpx.TimeoutException):
        outcome = TIMEOUT
    ended = loop.time()
    tally.statuses[outcome] += 1
    tally.last_s = max(tally.last_s, ended)
    if left is not None:
        tally.lag_s.append(max(0.0, left - due))
    if outcome == "200":
        tally.latency_s.append(ended - due)
        if tally.on_answer is not None:
            tally.on_answer(i, offset, ended - due)


async def run_load(
    client: Client,
    path: str,
    schedule: Schedule,
    bodies: Sequence[bytes],
    *,
    timeout_s: float,
    connections: int,
    on_answer: Answered | None = None,
) -> LoadReport:
    """POST ``bodies`` (in turn) to ``path`` at the schedule's times, open loop, and measure
    (:func:`run_schedule`; ``on_answer`` as there).

    At most ``connections`` requests are in flight, each on a connection of its own
    (:class:`_Connections`); the others wait their turn in order, and the wait counts in
    their latency.

    Args:
        client: the SDK client (its server and token).
        path: where to POST (``/v1/services/JOB/infer``).
        schedule: when each request is due.
        bodies: the encoded request bodies (:func:`make_bodies`).
        timeout_s: how long a request may take.
        connections: how many requests may be in flight at once.
    """
    tls = httpx.create_ssl_context()  # once: each session would load the CA bundle again
    pool = _Connections(
        lambda: client.async_http(timeout_s=timeout_s, connections=1, tls=tls), most=connections
    )
    try:
        send = _http_send(pool, path, bodies)
        return await run_schedule(schedule, send, timeout_s=timeout_s, on_answer=on_answer)
    finally:
        await pool.aclose()


def send_load(
    client: Client,
    job_id: str,
    info: Mapping[str, Any],
    schedule: Schedule,
    *,
    seed: int,
    timeout_s: float,
    connections: int,
) -> LoadReport:
    """Send ``schedule`` to a service's endpoint over HTTP and measure (:func:`run_load`), its
    inputs random of the shape ``info`` (``GET /v1/services/JOB``) advertises, seeded, made
    before the first request: ``orch load``'s run, and ``orch demo``'s clients'."""
    from urllib.parse import quote

    bodies = make_bodies(ServiceInput.advertised(dict(info)), len(schedule.offsets), seed)
    path = f"/v1/services/{quote(job_id, safe='')}/infer"
    load = run_load(client, path, schedule, bodies, timeout_s=timeout_s, connections=connections)
    return asyncio.run(load)


class _Connections:
    """Sessions of one connection each, made as they are needed up to :attr:`most`, and lent
    to one request at a time: the most recently returned first (its connection is open), the
    requests waiting for one in their order.

    Not one session of many connections: httpcore's pool (1.0) scans all its connections and
    waiting requests for each request, so with a hundred connections open (after a stall, say)
    the client spends more time there than the requests take, falls behind and stays behind
    (encode/httpcore#1035)."""

    def __init__(self, make: Callable[[], httpx.AsyncClient], *, most: int) -> None:
        self.make = make
        self.most = most
        self.made: list[httpx.AsyncClient] = []
        self.free: asyncio.LifoQueue[httpx.AsyncClient] = asyncio.LifoQueue()

    async def take(self) -> httpx.AsyncClient:
        """A free session, a new one while fewer than :attr:`most` exist, else the next
        one returned."""
        if self.free.empty() and len(self.made) < self.most:
            self.made.append(self.make())
            return self.made[-1]
        return await self.free.get()

    def give(self, session: httpx.AsyncClient) -> None:
        """Return a session taken."""
        self.free.put_nowait(session)

    async def aclose(self) -> None:
        """Close every session (its connection)."""
        await asyncio.gather(*(session.aclose() for session in self.made))


def _http_send(pool: _Connections, path: str, bodies: Sequence[bytes]) -> Send:
    """POST request ``i``'s body (``bodies[i % len]``) on a free connection of ``pool``."""

    async def send(i: int) -> tuple[str, float | None]:
        loop = asyncio.get_running_loop()
        sent: list[float] = []

        async def trace(event: str, info: dict[str, Any]) -> None:
            # httpcore's trace hook: the request's headers start on the wire
            if not sent and event.endswith("send_request_headers.started"):
                sent.append(loop.time())

        try:
            http = await pool.take()
            try:
                reply = await http.post(
                    path, content=bodies[i % len(bodies)], headers=JSON, extensions={"trace": trace}
                )
            finally:
                pool.give(http)
            outcome = str(reply.status_code)
        except httpx.TimeoutException:
            raise
        except httpx.HTTPError:
            outcome = CONNECTION_ERROR
        return outcome, (sent[0] if sent else None)

    return send
