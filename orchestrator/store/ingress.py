"""A service's endpoint in the store: requests in, answers out, which replicas are ready, and
every request's latency as measured where it arrived.

Why Redis streams and not Ray Serve's proxy and router: a service's replicas are the job's
gang, on the GPUs the scheduler granted, and a team's model runs in the sandboxed child as the
job's own uid (``workers.sandbox``). Ray Serve runs its replicas as Ray actors it places itself
(its controller decides where and how many) under the operator's user, and its proxy has no
authentication: the scheduler's grants, the trust boundary and the team's tokens would each
need working around.

Why not Ray Serve, measured (``bench/serving/ray_serve.py``, Ray 2.60, the same model, client and
figure as ``bench/serving/ingress.py``; 2-core VM at load 4-6, three rounds alternating, medians in
ms of what each adds to a request, p50 / p99): this path 2.59 / 10.07, Serve's Python proxy 7.53 /
15.85 (2.9x / 1.6x; it collapsed at 200 req/s open loop), Serve behind HAProxy
(``RAY_SERVE_ENABLE_HA_PROXY=1``) 1.55 / 7.97 (0.60x / 0.79x: Serve measured better, by about 1 ms).
Neither proxy checks a token, the body or measures at arrival, so Serve would sit behind the API
anyway: the part it would replace (append, pickup, answer) is 0.9-1.2 ms at p50 of this path's 2.6,
forward included. Serve scales without failing through its external-scaler API (0 failed of 1,919
and 18,401 requests through 1 -> 2 -> 1), but ``serve.run`` again replaces every replica, and its
replicas take no ``scheduling_strategy``: they cannot run in the placement groups the scheduler
reserved, and Serve picks which replica a scale-down stops. Adopting it (HAProxy in every Ray
process's environment, a deployment per service and node, the scheduler setting replicas through the
external-scaler API, the API forwarding after its checks) is set out in ``bench/serving/README.md``.
A consumer group over one stream per service is the router instead:

- the API's ingress (``orchestrator.api.routers.services``) checks the caller, validates the
  body, appends the request (``XADD``, capped at :data:`QUEUE_MAXLEN`) naming its process's
  inbox, and waits for the answer there (one task per process reads the inbox, ``BLPOP``, and
  hands each answer to its request; a wait per request would hold a connection each);
- each replica reads up to its batch (``XREADGROUP`` in group :data:`GROUP`, one consumer per
  replica), so requests go to whichever replica is free, answers each request (``RPUSH`` to
  the inbox it names, which expires) and acknowledges it;
- a replica is *ready* once its model is loaded and has run a first batch: it says so in
  ``ready`` with a time it holds until (renewed every second); the ingress answers 503 at
  once when no replica is ready. A replica that stops (a scale-down, a cancel) first stops
  taking requests and answers those it took (a drain), then leaves ``ready``: the replicas
  that stay serve throughout. A replica that dies (its process killed, its node lost) leaves
  what it took pending in the group: a replica that is ready claims those of any consumer no
  longer ready once they have waited :data:`RECLAIM_IDLE_S` (``XPENDING``, ``XCLAIM``), so
  they are answered late rather than time out.

The ingress measures each request, arrival to answer, into log-spaced buckets (relative error
:data:`GAMMA` - 1) kept for the service's whole life and per :data:`WINDOW_S` window: the
figures, the SLA's attainment over windows and the verdict survive every relaunch and scale,
and take bounded space per window.

Keys (``ns:svc:{id}:...``): ``req`` stream, ``ans:{rid}`` list, ``ready`` hash (replica ->
JSON facts), ``life`` hash (bucket -> count, and the outcome counters), ``win:{k}`` hash (one
window's buckets and counters), ``wins`` zset (window numbers).
"""

from __future__ import annotations

import contextlib
import json
import math
import secrets
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, cast

import redis

__all__ = [
    "GAMMA",
    "GROUP",
    "OUTCOMES",
    "WINDOW_S",
    "ReplicaQueue",
    "Request",
    "ServiceFigures",
    "Unserved",
    "bucket_of",
    "figures_of",
    "forget_service",
    "quantile",
    "read_figures",
    "ready_count",
    "service_keys",
    "window_percentiles",
    "with_service_figures",
]

GROUP = "replicas"
QUEUE_MAXLEN = 10_000
"""Requests a service's stream holds at most (about: trimmed with ``~``): a burst past it loses
its oldest waiting requests, which time out at the ingress and are counted there."""
READY_TTL_S = 3.0
"""A replica's readiness holds this long unless renewed (every second while it serves): a
replica that dies stops being offered requests within it."""
RECLAIM_IDLE_S = 2 * READY_TTL_S
"""How long a request taken by a replica that is no longer ready waits before another replica
claims it (twice the readiness's hold: a live replica renews it every second; a draining one
answers what it took well within it)."""
UNSERVED_CHECKS = 2
"""A waiting request is refused (503) once this many checks :data:`READY_TTL_S` apart found no
ready replica (two: one renewal missed by a replica starved of CPU is not its end)."""
SERVED_EVERY_S = 1.0
"""How long one read of whether a service has a ready replica answers for every request
waiting on it."""
RECLAIM_EVERY_S = 1.0
"""How often a replica looks for such requests (one ``XPENDING`` when there are none)."""
ANSWER_TTL_S = 60
INGRESS_CONNECTIONS = 64
"""Connections an API process's ingress holds at most for its short commands."""
WINDOW_S = 10.0
"""The windows over which the SLA's attainment is counted (a window meets it when its
percentile is within the ceiling)."""
GAMMA = 1.02
"""Bucket ``b`` holds latencies in (GAMMA^(b-1), GAMMA^b] ms: a percentile is within 1%."""
WINDOWS_KEPT = 8640
"""Windows kept per service (a day of 10 s windows); older ones are dropped, the whole-life
buckets keep them."""
OUTCOMES = ("ok", "error", "timeout", "unavailable", "refused")
"""What became of a request: answered; failed at the replica (its model raised); not answered
within its timeout; refused because the running service had no ready replica (503); refused
for the caller's own doing (a malformed body) or before the service first ran. All but the
last count against the SLA."""
FAILED = ("error", "timeout", "unavailable")
"""The outcomes that are the service's failures (a request with no answer in time)."""


def service_keys(namespace: str, job_id: str) -> dict[str, str]:
    """The keys of one service's endpoint (see the module doc)."""
    base = f"{namespace}:svc:{job_id}"
    return {
        "req": f"{base}:req",
        "ans": f"{base}:ans:",
        "ready": f"{base}:ready",
        "life": f"{base}:life",
        "win": f"{base}:win:",
        "wins": f"{base}:wins",
    }


def bucket_of(ms: float) -> int:
    """The bucket of a latency in milliseconds (see :data:`GAMMA`); 0 holds all up to 1 ms
    divided finely enough: latencies under 0.01 ms count as 0.01 ms."""
    return math.ceil(math.log(max(ms, 0.01)) / math.log(GAMMA))


def bucket_ms(b: int) -> float:
    """A bucket's representative latency (the middle of its range, in ms)."""
    return float(GAMMA ** (b - 0.5))


def quantile(buckets: Mapping[int, int], q: float) -> float | None:
    """The ``q`` quantile (0 < q <= 1) of the latencies counted in ``buckets``; ``None`` for
    none."""
    total = sum(buckets.values())
    if total <= 0:
        return None
    rank = max(1, math.ceil(q * total))
    seen = 0
    for b in sorted(buckets):
        seen += buckets[b]
        if seen >= rank:
            return bucket_ms(b)
    return bucket_ms(max(buckets))


@dataclass(frozen=True)
class ServiceFigures:
    """A service's requests as its ingress measured them.

    Attributes:
        requests: requests that reached the ingress with a valid body, and were answered,
            failed, timed out or were rejected (``counts``).
        p50_ms, p95_ms, p99_ms: the answered requests' latencies, arrival to answer, over
            the service's whole life.
        counts: requests per outcome (:data:`OUTCOMES`).
        windows: windows with requests the SLA judges; ``windows_met``: those whose
            percentile was within the ceiling asked about, with no request failed
            (:data:`FAILED`; ``None`` when no ceiling was asked about).
    """

    requests: int
    p50_ms: float | None
    p95_ms: float | None
    p99_ms: float | None
    counts: dict[str, int]
    windows: int
    windows_met: int | None

    @property
    def attainment(self) -> float | None:
        """The share of windows meeting the SLA (``None`` without windows or a ceiling)."""
        if self.windows_met is None or not self.windows:
            return None
        return self.windows_met / self.windows

    def to_dict(self) -> dict[str, Any]:
        """As JSON."""
        return {
            "requests": self.requests,
            "p50_ms": self.p50_ms,
            "p95_ms": self.p95_ms,
            "p99_ms": self.p99_ms,
            "counts": dict(self.counts),
            "windows": self.windows,
            "windows_met": self.windows_met,
            "attainment": self.attainment,
        }


def _split(raw: Mapping[str, str]) -> tuple[dict[int, int], dict[str, int]]:
    """A hash of buckets (integer fields) and counters (named fields)."""
    buckets: dict[int, int] = {}
    counts: dict[str, int] = {}
    for k, v in raw.items():
        try:
            buckets[int(k)] = int(v)
        except ValueError:
            counts[k] = int(v)
    return buckets, counts


def figures_of(
    life: Mapping[str, str],
    windows: Iterable[Mapping[str, str]],
    ceiling: tuple[float, float] | None = None,
) -> ServiceFigures:
    """The figures of a service from its ``life`` hash and its windows' hashes; ``ceiling``
    (``(q, max_ms)``, q in (0, 1]) judges each window."""
    buckets, counts = _split(life)
    n_windows = met = 0
    for raw in windows:
        wb, wc = _split(raw)
        failed = sum(wc.get(k, 0) for k in FAILED)
        if not wb and not failed:  # nothing the SLA judges (refusals only)
            continue
        n_windows += 1
        if ceiling is not None:
            p = quantile(wb, ceiling[0])
            met += int(failed == 0 and p is not None and p <= ceiling[1])
    return ServiceFigures(
        requests=sum(counts.get(k, 0) for k in OUTCOMES),
        p50_ms=quantile(buckets, 0.50),
        p95_ms=quantile(buckets, 0.95),
        p99_ms=quantile(buckets, 0.99),
        counts={k: counts.get(k, 0) for k in OUTCOMES},
        windows=n_windows,
        windows_met=met if ceiling is not None else None,
    )


def record_commands(
    keys: Mapping[str, str], outcome: str, latency_ms: float | None, now: float
) -> list[tuple[Any, ...]]:
    """The Redis commands recording one request's ``outcome`` (and latency, when answered)
    in the whole-life and the current window's hashes (one pipeline, no read)."""
    k = int(now // WINDOW_S)
    win = f"{keys['win']}{k}"
    cmds: list[tuple[Any, ...]] = [
        ("HINCRBY", keys["life"], outcome, 1),
        ("HINCRBY", win, outcome, 1),
    ]
    if latency_ms is not None:
        b = str(bucket_of(latency_ms))
        cmds += [("HINCRBY", keys["life"], b, 1), ("HINCRBY", win, b, 1)]
    cmds += [
        ("EXPIRE", win, int(WINDOWS_KEPT * WINDOW_S)),
        ("ZADD", keys["wins"], k, k),
    ]
    return cmds


def with_service_figures(metrics: dict[str, Any], figures: ServiceFigures) -> dict[str, Any]:
    """A service's metrics with its requests' figures as its ingress measured them over its
    whole life (percentiles, requests, failed, windows met) in place of its replicas' own,
    which start again with each run; unchanged while no request reached it."""
    if not figures.requests:
        return metrics
    failed = sum(figures.counts[k] for k in FAILED)
    judged = figures.requests - figures.counts["refused"]
    if not judged:
        return metrics
    return {
        **metrics,
        "p50_ms": figures.p50_ms,
        "p95_ms": figures.p95_ms,
        "p99_ms": figures.p99_ms,
        "requests": judged,
        "requests_failed": failed,
        "requests_refused": figures.counts["refused"],
        "windows": figures.windows,
        "windows_met": figures.windows_met,
        "attainment": figures.attainment,
        "measured_at": "ingress",
    }


def read_figures(
    client: redis.Redis, keys: Mapping[str, str], ceiling: tuple[float, float] | None
) -> ServiceFigures:
    """A service's figures as stored (blocking client)."""
    life = cast(dict[Any, Any], client.hgetall(keys["life"]))
    numbers = cast(list[Any], client.zrange(keys["wins"], -WINDOWS_KEPT, -1))
    pipe = client.pipeline(transaction=False)
    for k in numbers:
        pipe.hgetall(f"{keys['win']}{k.decode() if isinstance(k, bytes) else k}")
    return figures_of(_text(life), (_text(w) for w in pipe.execute()), ceiling)


def window_percentiles(
    client: redis.Redis, keys: Mapping[str, str], q: float
) -> list[tuple[float, float | None, int]]:
    """Each kept window of a service, oldest first: its start (Unix seconds), its answered
    requests' ``q`` latency percentile (``None``: none answered) and how many were answered
    (blocking client; what the benchmarks read to set a scale's windows beside the steady
    ones)."""
    numbers = cast(list[Any], client.zrange(keys["wins"], -WINDOWS_KEPT, -1))
    pipe = client.pipeline(transaction=False)
    for k in numbers:
        pipe.hgetall(f"{keys['win']}{k.decode() if isinstance(k, bytes) else k}")
    out = []
    for k, raw in zip(numbers, pipe.execute(), strict=True):
        buckets, _ = _split(_text(raw))
        start = int(k.decode() if isinstance(k, bytes) else k) * WINDOW_S
        out.append((start, quantile(buckets, q), sum(buckets.values())))
    return out


def _text(raw: Mapping[Any, Any]) -> dict[str, str]:
    return {
        (k.decode() if isinstance(k, bytes) else str(k)): (
            v.decode() if isinstance(v, bytes) else str(v)
        )
        for k, v in raw.items()
    }


def ready_count(client: redis.Redis, namespace: str, job_id: str) -> int:
    """How many of a service's replicas are ready now (one read of its ready set)."""
    raw = cast(dict[Any, Any], client.hgetall(service_keys(namespace, job_id)["ready"]))
    return len(ready_facts(_text(raw), time.time()))


def ready_facts(raw: Mapping[str, str], now: float) -> dict[str, dict[str, Any]]:
    """The replicas whose readiness holds at ``now``, with what each said of itself."""
    out: dict[str, dict[str, Any]] = {}
    for name, text in raw.items():
        try:
            facts = json.loads(text)
        except ValueError:
            continue
        if isinstance(facts, dict) and float(facts.get("until", 0)) > now:
            out[name] = facts
    return out


@dataclass(frozen=True)
class Request:
    """One request as a replica took it.

    Attributes:
        rid: its id (its answer goes to the list of that name).
        entry: its stream entry's id (acknowledged once answered).
        arrived_at: when the ingress received it (Unix seconds): a queue time is measured
            from it.
        payload: what the ingress checked: ``{"input": nested list}`` or ``{"raw": base64,
            "dtype": ..., "shape": [...]}``.
        reply: the list its answer goes to (the inbox of the API process that waits for it).
    """

    rid: str
    entry: str
    arrived_at: float
    payload: dict[str, Any]
    reply: str = ""


class ReplicaQueue:
    """A replica's side of a service's endpoint: picklable (made by the control plane, shipped
    to the worker with the run; the connection opens on first use), held only by the trusted
    worker, never by a team's process (it carries the store's address and password).

    Args:
        redis_url, namespace, job_id: the store and the service.
    """

    def __init__(self, redis_url: str, namespace: str, job_id: str) -> None:
        self.redis_url = redis_url
        self.namespace = namespace
        self.job_id = job_id
        self.keys = service_keys(namespace, job_id)
        self.name = ""
        self.facts: dict[str, Any] = {}
        self.reclaim_idle_s = RECLAIM_IDLE_S
        self._reclaimed_at = 0.0  # monotonic: when this replica last looked
        self._client: redis.Redis | None = None

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        state["_client"] = None
        return state

    @property
    def client(self) -> redis.Redis:
        """The connection (opened on first use)."""
        if self._client is None:
            self._client = redis.Redis.from_url(
                self.redis_url, decode_responses=True, socket_connect_timeout=5.0
            )
        return self._client

    def join(self, name: str, facts: dict[str, Any]) -> None:
        """Become ready as replica ``name``, telling the ingress ``facts`` (its input's shape
        and dtype, its batch): requests are routed to it from now on."""
        self.name = name
        self.facts = dict(facts)
        try:
            self.client.xgroup_create(self.keys["req"], GROUP, id="0", mkstream=True)
        except redis.ResponseError as err:
            if "BUSYGROUP" not in str(err):
                raise
        self.heartbeat()

    def heartbeat(self) -> None:
        """Renew this replica's readiness (see :data:`READY_TTL_S`)."""
        facts = {**self.facts, "until": time.time() + READY_TTL_S}
        self.client.hset(self.keys["ready"], self.name, json.dumps(facts))

    def leave(self) -> None:
        """Stop being offered requests (before draining what was taken)."""
        if self.name:
            self.client.hdel(self.keys["ready"], self.name)

    def take(self, max_n: int, block_s: float) -> list[Request]:
        """Up to ``max_n`` requests, waiting at most ``block_s`` for the first: those a gone
        replica left (:meth:`reclaim`, looked for every :data:`RECLAIM_EVERY_S`) first."""
        if time.monotonic() - self._reclaimed_at >= RECLAIM_EVERY_S:
            self._reclaimed_at = time.monotonic()
            left = self.reclaim(max_n)
            if left:
                return left
        got: Any = self.client.xreadgroup(
            GROUP,
            self.name,
            {self.keys["req"]: ">"},
            count=max_n,
            block=max(1, int(block_s * 1000)),
        )
        return self._requests([entries for _stream, entries in got or ()])

    def reclaim(self, max_n: int) -> list[Request]:
        """Up to ``max_n`` requests taken by replicas that are no longer ready (dead: a live
        one renews its readiness every second) and left unanswered for
        :attr:`reclaim_idle_s`, now this replica's."""
        pending: Any = self.client.xpending_range(
            self.keys["req"],
            GROUP,
            min="-",
            max="+",
            count=max_n,
            idle=int(self.reclaim_idle_s * 1000),
        )
        if not pending:
            return []
        now = time.time()
        ready: dict[str, str] = cast(dict[str, str], self.client.hgetall(self.keys["ready"]))
        alive = {name for name, raw in ready.items() if _until(raw) >= now}
        ids = [p["message_id"] for p in pending if p["consumer"] not in alive | {self.name}]
        if not ids:
            return []
        claimed: Any = self.client.xclaim(
            self.keys["req"], GROUP, self.name, int(self.reclaim_idle_s * 1000), ids
        )
        return self._requests([claimed or []])

    def _requests(self, batches: Iterable[Any]) -> list[Request]:
        """The requests of stream entries (``(id, fields)`` lists); an entry that is not the
        ingress's is acknowledged and dropped."""
        out: list[Request] = []
        for entries in batches:
            for entry, fields in entries:
                if not fields:  # deleted meanwhile (answered by its replica after all)
                    continue
                try:
                    out.append(
                        Request(
                            rid=fields["rid"],
                            entry=entry,
                            arrived_at=float(fields["at"]),
                            payload=json.loads(fields["body"]),
                            reply=str(fields.get("reply") or ""),
                        )
                    )
                except (KeyError, ValueError):  # not the ingress's: acknowledged, dropped
                    self.client.xack(self.keys["req"], GROUP, entry)
        return out

    def answer(self, answers: Iterable[tuple[Request, dict[str, Any]]]) -> None:
        """Send each request its answer and acknowledge it (one round trip)."""
        pipe = self.client.pipeline(transaction=False)
        entries = []
        for req, body in answers:
            key = req.reply or f"{self.keys['ans']}{req.rid}"
            pipe.rpush(key, json.dumps({"rid": req.rid, "body": body}))
            pipe.expire(key, ANSWER_TTL_S)
            entries.append(req.entry)
        if entries:
            pipe.xack(self.keys["req"], GROUP, *entries)
            pipe.xdel(self.keys["req"], *entries)
        pipe.execute()

    def requeue(self, requests: Iterable[Request]) -> None:
        """Put requests this replica took but will not answer back at the stream's end, for
        the replicas that stay (their arrival time kept: their wait goes on counting)."""
        pipe = self.client.pipeline(transaction=False)
        entries = []
        for req in requests:
            fields: dict[Any, Any] = {
                "rid": req.rid,
                "at": repr(req.arrived_at),
                "body": json.dumps(req.payload),
                "reply": req.reply,
            }
            pipe.xadd(self.keys["req"], fields, maxlen=QUEUE_MAXLEN, approximate=True)
            entries.append(req.entry)
        if entries:
            pipe.xack(self.keys["req"], GROUP, *entries)
            pipe.xdel(self.keys["req"], *entries)
            pipe.execute()

    def load(self, window_s: float) -> tuple[float | None, float | None]:
        """Requests per second that reached the service's ingress over the last ``window_s``
        seconds (every outcome), and those of them every replica answered (answered or
        failed at a replica), from its windows' counters: the whole service's, whichever
        replica asks (its replicas are worlds of one, each seeing only its own batches)."""
        now = time.time()
        first = int((now - window_s) // WINDOW_S)
        last = int(now // WINDOW_S)
        pipe = self.client.pipeline(transaction=False)
        for k in range(first, last + 1):
            pipe.hmget(f"{self.keys['win']}{k}", *OUTCOMES)
        rows = [[int(v or 0) for v in row] for row in pipe.execute()]
        span = now - first * WINDOW_S
        if span <= 0:
            return None, None
        answered = [OUTCOMES.index("ok"), OUTCOMES.index("error")]
        offered = sum(sum(row) for row in rows)
        served = sum(row[i] for row in rows for i in answered)
        return offered / span, served / span

    def close(self) -> None:
        """Close the connection (a later use reopens it)."""
        if self._client is not None:
            self._client.close()
            self._client = None


def forget_service(client: redis.Redis, keys: Mapping[str, str]) -> None:
    """Delete every key of a service's endpoint (a tuning trial's, once measured): its
    stream, ready set, figures and windows (its answers' lists expire on their own)."""
    numbers = cast(list[Any], client.zrange(keys["wins"], 0, -1))
    wins = [f"{keys['win']}{k.decode() if isinstance(k, bytes) else k}" for k in numbers]
    client.delete(keys["req"], keys["ready"], keys["life"], keys["wins"], *wins)


def _until(raw: str) -> float:
    """Until when a ``ready`` entry holds (0: unreadable)."""
    try:
        return float(json.loads(raw).get("until", 0.0))
    except (ValueError, AttributeError, TypeError):
        return 0.0


class Unserved(Exception):
    """A queued request no replica is left to answer (:meth:`IngressStore.ask`)."""

    def __init__(self, job_id: str) -> None:
        super().__init__(f"service {job_id} has no ready replica left to answer this request")
        self.job_id = job_id


def new_request_id() -> str:
    """A request's id: unguessable, so no one answers another's request."""
    return secrets.token_hex(12)


class IngressStore:
    """The ingress's side of every service's endpoint (the API's): an asyncio client over
    the store's server, made on first use on the serving loop, with no read timeout of its
    own (a request's wait for its answer is bounded by the request's timeout instead).

    Args:
        client: the store's blocking client (its server and settings are mirrored).
        namespace: the store's namespace.
    """

    def __init__(self, client: redis.Redis, namespace: str) -> None:
        from orchestrator.store.connection import async_pool_kwargs

        self.namespace = namespace
        kwargs = async_pool_kwargs(client)
        self._kwargs = None if kwargs is None else {**kwargs, "socket_timeout": None}
        self._blocking = client
        self._loop: Any = None
        self._client: Any = None
        self._reader_client: Any = None
        self._reader: Any = None
        # this process's inbox: every answer to a request it queued comes here, read by one
        # task on one connection (a wait per request would hold a connection each)
        self.inbox = f"{namespace}:svc-inbox:{secrets.token_hex(8)}"
        self._waiting: dict[str, Any] = {}
        self._served_at: dict[str, tuple[float, bool]] = {}  # service -> (when read, ready)

    def _async(self) -> Any:
        import asyncio

        import redis.asyncio as aredis

        if self._kwargs is None:
            raise RuntimeError(
                "the store's connection (TLS, a credential provider) cannot be mirrored: "
                "a service endpoint needs a plain or unix-socket Redis connection"
            )
        loop = asyncio.get_running_loop()
        if self._client is None or self._loop is not loop:
            # short commands only (the answers' wait is the reader's): a connection is waited
            # for when all are busy, never refused
            kwargs = {**self._kwargs, "max_connections": INGRESS_CONNECTIONS, "timeout": None}
            self._client = aredis.Redis(connection_pool=aredis.BlockingConnectionPool(**kwargs))
            self._reader_client = aredis.Redis(
                connection_pool=aredis.ConnectionPool(**{**self._kwargs, "max_connections": 1})
            )
            self._loop = loop
            self._reader = None
            self._waiting = {}
        if self._reader is None or self._reader.done():
            self._reader = loop.create_task(self._read_inbox())
        return self._client

    async def _read_inbox(self) -> None:
        """Hand each answer in this process's inbox to the request waiting for it (one that
        stopped waiting - its timeout passed - gets nothing: the answer is dropped)."""
        import asyncio

        while True:
            try:
                got = await self._reader_client.blpop([self.inbox], timeout=1)
            except asyncio.CancelledError:
                raise
            except Exception:  # the store briefly unreachable: waits time out meanwhile
                await asyncio.sleep(0.2)
                continue
            if got is None:
                continue
            try:
                answer = json.loads(got[1])
                waiter = self._waiting.pop(str(answer["rid"]), None)
            except (ValueError, KeyError, TypeError):
                continue
            if waiter is not None and not waiter.done():
                body = answer.get("body")
                waiter.set_result(body if isinstance(body, dict) else None)

    async def ready(self, job_id: str) -> dict[str, dict[str, Any]]:
        """The service's ready replicas and what each said of itself."""
        keys = service_keys(self.namespace, job_id)
        raw = await self._async().hgetall(keys["ready"])
        return ready_facts(_text(raw), time.time())

    async def ask(
        self, job_id: str, payload: dict[str, Any], arrived_at: float, timeout_s: float
    ) -> dict[str, Any] | None:
        """Queue a request and wait for its answer; ``None`` if none came in ``timeout_s``.

        Raises:
            Unserved: the service has had no ready replica for :data:`UNSERVED_CHECKS`
                checks :data:`READY_TTL_S` apart while the request waited (its run ended, or
                its last replica died, with the request still queued): no replica is left to
                answer it, so it is refused now rather than left to time out.
        """
        import asyncio

        keys = service_keys(self.namespace, job_id)
        rid = new_request_id()
        client = self._async()
        loop = asyncio.get_running_loop()
        waiter = loop.create_future()
        self._waiting[rid] = waiter
        fields = {
            "rid": rid,
            "at": repr(arrived_at),
            "body": json.dumps(payload),
            "reply": self.inbox,
        }
        deadline = loop.time() + max(0.01, timeout_s)
        unserved = 0
        try:
            await client.xadd(keys["req"], fields, maxlen=QUEUE_MAXLEN, approximate=True)
            while True:
                left = deadline - loop.time()
                if left <= 0:
                    return None
                try:
                    answer = await asyncio.wait_for(
                        asyncio.shield(waiter), timeout=min(left, READY_TTL_S)
                    )
                    break
                except TimeoutError:
                    if waiter.done():  # answered while the wait gave up
                        answer = waiter.result()
                        break
                    # waited a readiness's hold: is any replica left to answer it?
                    served = await self._served(job_id)
                    unserved = 0 if served is not False else unserved + 1
                    if unserved >= UNSERVED_CHECKS:
                        raise Unserved(job_id) from None
        finally:
            self._waiting.pop(rid, None)
            waiter.cancel()
        return answer if isinstance(answer, dict) else None

    async def _served(self, job_id: str) -> bool | None:
        """Whether the service has a ready replica, as read at most :data:`SERVED_EVERY_S`
        ago (one read a service shared by every request waiting on it, not one each: a
        backlog is when the store is busiest); ``None`` when the store cannot say (a blip:
        the waits go on)."""
        now = time.monotonic()
        seen = self._served_at.get(job_id)
        if seen is not None and now - seen[0] < SERVED_EVERY_S:
            return seen[1]
        try:
            served = bool(await self.ready(job_id))
        except Exception:  # the store briefly unreachable: not a verdict on the service
            return None
        self._served_at[job_id] = (now, served)
        return served

    async def call(self, job_id: str, payload: dict[str, Any], timeout_s: float) -> str:
        """One checked request through the producer side, as the HTTP router takes it once its
        checks pass (queued, answered, counted in the service's figures): its HTTP status,
        ``"200"`` answered, ``"500"`` failed at the replica, ``"503"`` no replica left to
        answer it (:class:`Unserved`), ``"504"`` no answer within ``timeout_s``. A service's
        tuning trial sends its requests here (``orchestrator.tuner.evaluators.serve``)."""
        arrived = time.time()
        try:
            answer = await self.ask(job_id, payload, arrived, timeout_s)
        except Unserved:
            await self.record(job_id, "unavailable", None)
            return "503"
        if answer is None:
            await self.record(job_id, "timeout", None)
            return "504"
        if answer.get("error"):
            await self.record(job_id, "error", None)
            return "500"
        await self.record(job_id, "ok", (time.time() - arrived) * 1000.0)
        return "200"

    async def record(self, job_id: str, outcome: str, latency_ms: float | None) -> None:
        """Count one request's outcome (and its latency) in the service's figures."""
        keys = service_keys(self.namespace, job_id)
        pipe = self._async().pipeline(transaction=False)
        for cmd in record_commands(keys, outcome, latency_ms, time.time()):
            pipe.execute_command(*cmd)
        await pipe.execute()

    def figures(self, job_id: str, ceiling: tuple[float, float] | None) -> ServiceFigures:
        """The service's figures as stored (blocking: call it in a thread)."""
        return read_figures(self._blocking, service_keys(self.namespace, job_id), ceiling)

    async def aclose(self) -> None:
        """Close the asyncio client's connections (the server is stopping)."""
        import asyncio

        if self._client is not None and self._loop is asyncio.get_running_loop():
            if self._reader is not None:
                self._reader.cancel()
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await self._reader
            await self._client.aclose()
            await self._reader_client.aclose()
        self._client = self._reader_client = self._reader = self._loop = None


class TrialEndpoint:
    """A tuning trial's own endpoint (``orchestrator.tuner.evaluators.serve``): a service of its
    own in the namespace (``service``, never a live one's), opened from the store's URL: its
    replicas' readiness, an ingress over it, and its figures, read once the trial is over, when
    its keys are deleted.

    Raises:
        StoreError: the URL is invalid or the server does not answer.
    """

    def __init__(self, url: str, namespace: str, service: str) -> None:
        from orchestrator.store.connection import open_url

        self._client = open_url(url)
        self.namespace = namespace
        self.keys = service_keys(namespace, service)

    def ready(self) -> dict[str, str]:
        """The replicas' readiness records as stored (``ready_facts`` reads them)."""
        return _text(cast(dict[Any, Any], self._client.hgetall(self.keys["ready"])))

    def ingress(self) -> IngressStore:
        """An ingress over the trial's server (made on the loop that uses it)."""
        return IngressStore(self._client, self.namespace)

    def close(self) -> ServiceFigures:
        """The trial's whole-life figures (:func:`read_figures`); its keys deleted."""
        try:
            figures = read_figures(self._client, self.keys, None)
            forget_service(self._client, self.keys)
            return figures
        finally:
            self._client.close()
