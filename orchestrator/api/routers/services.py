"""``/v1/services/{job}``: a service's endpoint (requests from outside the pool answered by the
service's replicas), its figures as measured there, and its own clients' tokens.

``POST /v1/services/{job}/infer`` takes one request: a JSON body ``{"input": <one sample as
nested lists>}``, or the sample's raw bytes (``Content-Type: application/octet-stream``,
little-endian, of the shape and dtype ``GET /v1/services/{job}`` gives). It is answered with
``{"output": ..., "timing": {...}}``; a malformed body 400 or 422, an oversized one 413 (the
API's body limit), no ready replica 503 at once with ``Retry-After`` (and a request still
queued once the service has had no ready replica for two readiness holds, about 6 s: its run
over, or its only replica gone, 503 then), no answer within the service's
``serve.timeout_ms`` (else :data:`DEFAULT_TIMEOUT_S`) 504. Every request is counted
where it arrives, its latency from its arrival here to its answer
(:mod:`orchestrator.store.ingress`).

Who may call: an admin, a member of the service's team, or a service token of this service
(``POST /v1/services/{job}/tokens``, made by an admin or a member of its team, revocable by
them): the token the service's own clients hold, which reaches nothing else.
"""

from __future__ import annotations

import asyncio
import base64
import json
import math
import time
from dataclasses import dataclass
from typing import Annotated, Any

from fastapi import APIRouter, Path, Request
from fastapi.responses import JSONResponse
from pydantic import Field
from starlette.concurrency import run_in_threadpool

from orchestrator.api import operations
from orchestrator.api.auth import Caller, Store, Who
from orchestrator.api.identity import Principal
from orchestrator.api.models import TokenCreated, _Body
from orchestrator.api.params import TOKEN_ID_PATTERN
from orchestrator.errors import Forbidden, JobNotFound
from orchestrator.spec import NAME_PATTERN
from orchestrator.store import JobStore
from orchestrator.store.ingress import IngressStore, Unserved
from orchestrator.store.records import JobRecord
from orchestrator.store.states import JobState
from orchestrator.store.tokens import Role, TokenInfo

__all__ = ["DEFAULT_TIMEOUT_S", "router"]

router = APIRouter(prefix="/v1/services", tags=["services"])

DEFAULT_TIMEOUT_S = 30.0
"""A request's wait for its answer when the service sets no ``serve.timeout_ms``."""
RETRY_AFTER_S = 1
_DTYPES = {"float32": 4, "int64": 8}

Ref = Annotated[str, Path(max_length=200, description="the service's job id or name")]


class ServiceTokenCreate(_Body):
    """A token for one of the service's own clients."""

    name: str = Field(pattern=NAME_PATTERN, description="the client (recorded on actions)")


def ingress_of(request: Request) -> IngressStore:
    """The app's ingress store (the store's: its asyncio client is closed with the app)."""
    store: JobStore = request.app.state.store
    return store.ingress


@dataclass(frozen=True)
class _Service:
    """What a request to a service needs of its record (read at most once a second)."""

    job_id: str
    state: JobState
    timeout_s: float


class _Known:
    """Services as recently resolved for a caller, and their ready replicas: each request
    would otherwise read and parse the job's record and the ready set (most of what the
    endpoint added to a request). A second's staleness: a cancelled service answers 503 from
    the next second; a replica that left is routed around by the queue meanwhile (what it
    never took is taken by the others)."""

    TTL_S = 1.0
    READY_TTL_S = 0.25
    MAX = 4096

    def __init__(self) -> None:
        self.services: dict[tuple[Any, ...], tuple[float, _Service]] = {}
        self.ready: dict[str, tuple[float, dict[str, dict[str, Any]]]] = {}
        self.tasks: set[asyncio.Task[None]] = set()

    async def service(self, store: JobStore, who: Principal, ref: str) -> _Service:
        key = (who.role, who.team, who.service, who.name, ref)
        now = time.monotonic()
        hit = self.services.get(key)
        if hit is not None and hit[0] > now:
            return hit[1]
        rec = await run_in_threadpool(_resolve, store, who, ref)
        serve = rec.spec.serve
        timeout = serve.timeout_ms / 1000.0 if serve and serve.timeout_ms else DEFAULT_TIMEOUT_S
        got = _Service(rec.id, rec.state, timeout)
        if len(self.services) >= self.MAX:
            self.services.clear()
        self.services[key] = (now + self.TTL_S, got)
        return got

    async def replicas(self, ingress: IngressStore, job_id: str) -> dict[str, dict[str, Any]]:
        now = time.monotonic()
        hit = self.ready.get(job_id)
        if hit is not None and hit[0] > now:
            return hit[1]
        ready = await ingress.ready(job_id)
        if len(self.ready) >= self.MAX:
            self.ready.clear()
        self.ready[job_id] = (now + self.READY_TTL_S, ready)
        return ready

    def record(
        self, ingress: IngressStore, job_id: str, outcome: str, latency_ms: float | None
    ) -> None:
        """Count a request after its answer is sent (its count costs the caller nothing)."""
        task = asyncio.get_running_loop().create_task(ingress.record(job_id, outcome, latency_ms))
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)


def _known(request: Request) -> _Known:
    state = request.app.state
    known: _Known | None = getattr(state, "services_known", None)
    if known is None:
        known = state.services_known = _Known()
    return known


def _resolve(store: JobStore, who: Principal, ref: str) -> JobRecord:
    """The service ``ref`` names, as ``who`` may reach it: a service token only its own (any
    other is not found, as for an outsider); a viewer may not call one.

    Raises:
        JobNotFound, AmbiguousJob, Forbidden, NotAService.
    """
    if who.role is Role.SERVICE:
        if ref != who.service:
            raise JobNotFound(ref)
        rec = store.get(ref)
        if rec.team != who.team:  # a token minted for another team's job id: never
            raise JobNotFound(ref)
    else:
        rec = operations.read_job(store, who, ref)
    operations.check_endpoint(rec)
    return rec


def _unavailable(detail: str) -> JSONResponse:
    return JSONResponse(
        {"detail": detail}, status_code=503, headers={"Retry-After": str(RETRY_AFTER_S)}
    )


@router.get("/{ref}")
async def service(ref: Ref, who: Caller, request: Request) -> dict[str, Any]:
    """The service's endpoint: its ready replicas, the input a request carries (one sample's
    shape and dtype), when it stops serving (``ends_at``, Unix seconds; ``None``: not
    serving, or no end), and its requests' figures over its whole life, as measured here."""
    store: JobStore = request.app.state.store
    rec = await run_in_threadpool(_resolve, store, who, ref)
    ingress = ingress_of(request)
    ready = await ingress.ready(rec.id)
    pending = list(_known(request).tasks)
    if pending:  # the counts of requests already answered by this process, in the figures
        await asyncio.gather(*pending, return_exceptions=True)
    latency = rec.spec.sla.latency
    ceiling = None if latency is None else (latency.percentile / 100.0, latency.max_ms)
    figures = await run_in_threadpool(ingress.figures, rec.id, ceiling)
    facts = next(iter(ready.values()), {})
    return {
        "job_id": rec.id,
        "state": rec.state.value,
        "ready_replicas": len(ready),
        "input": facts.get("input"),
        "max_batch": facts.get("max_batch"),
        "ends_at": facts.get("ends_at"),
        "sla": None
        if latency is None
        else {"percentile": latency.percentile, "max_ms": latency.max_ms},
        "figures": figures.to_dict(),
    }


@router.post("/{ref}/infer")
async def infer(ref: Ref, who: Caller, request: Request) -> JSONResponse:
    """Answer one request with the service's model (see the module doc)."""
    arrived = time.time()
    store: JobStore = request.app.state.store
    if who.role is Role.VIEWER:
        raise Forbidden(
            f"{who.describe()} may only read: calling a service takes a member or service token"
        )
    known = _known(request)
    svc = await known.service(store, who, ref)
    ingress = ingress_of(request)
    if svc.state is not JobState.RUNNING:  # not started (or over): not the SLA's business
        known.record(ingress, svc.job_id, "refused", None)
        return _unavailable(f"service {svc.job_id} is {svc.state.value}, not serving")
    ready = await known.replicas(ingress, svc.job_id)
    if not ready:  # running, and no replica to answer: the service's failure
        known.record(ingress, svc.job_id, "unavailable", None)
        return _unavailable(f"service {svc.job_id} has no ready replica yet")
    sample = next(iter(ready.values())).get("input") or {}
    body = await request.body()
    try:
        payload = _payload(body, request.headers.get("content-type", ""), sample)
    except ValueError as err:
        known.record(ingress, svc.job_id, "refused", None)
        return JSONResponse({"detail": str(err)}, status_code=400)
    try:
        answer = await ingress.ask(svc.job_id, payload, arrived, svc.timeout_s)
    except Unserved as err:  # queued, then no replica left: said now, not at the timeout
        known.record(ingress, svc.job_id, "unavailable", None)
        return _unavailable(str(err))
    latency_ms = (time.time() - arrived) * 1000.0
    if answer is None:
        known.record(ingress, svc.job_id, "timeout", None)
        return JSONResponse(
            {"detail": f"service {svc.job_id} did not answer within {svc.timeout_s:g} s"},
            status_code=504,
        )
    if answer.get("error"):
        known.record(ingress, svc.job_id, "error", None)
        return JSONResponse(
            {"detail": f"the service's model failed on this request: {answer['error']}"},
            status_code=500,
        )
    known.record(ingress, svc.job_id, "ok", latency_ms)
    timing = {**dict(answer.get("timing") or {}), "latency_ms": latency_ms}
    return JSONResponse({"output": answer.get("output"), "timing": timing})


@router.post("/{ref}/tokens", status_code=201)
def create_token(ref: Ref, body: ServiceTokenCreate, who: Who, store: Store) -> TokenCreated:
    """Make a token for one of the service's clients (an admin or a member of its team): it
    reaches this service's endpoint and nothing else; it is in this answer only."""
    token, info = operations.create_service_token(store, who, ref, body.name)
    return TokenCreated(token=token, info=info)


@router.delete("/{ref}/tokens/{token_id}")
def revoke_token(
    ref: Ref,
    token_id: Annotated[str, Path(pattern=TOKEN_ID_PATTERN)],
    who: Who,
    store: Store,
) -> TokenInfo:
    """Revoke one of the service's tokens (an admin or a member of its team)."""
    return operations.revoke_service_token(store, who, ref, token_id)


def _payload(body: bytes, content_type: str, sample: dict[str, Any]) -> dict[str, Any]:
    """The request as a replica takes it, checked against the sample the replicas take.

    Raises:
        ValueError: what is wrong with the body, naming the field and what is allowed.
    """
    shape = [int(n) for n in sample.get("shape") or []]
    dtype = str(sample.get("dtype") or "float32")
    high = sample.get("high")
    want = f"one sample of shape {shape} ({dtype}{'' if high is None else f' in [0, {high})'})"
    if content_type.split(";")[0].strip().lower() == "application/octet-stream":
        size = math.prod(shape) * _DTYPES.get(dtype, 4)
        if len(body) != size:
            raise ValueError(
                f"body: {len(body)} bytes; a raw request is {want} as little-endian bytes: "
                f"{size} bytes"
            )
        return {"raw": base64.b64encode(body).decode(), "dtype": dtype, "shape": shape}
    try:
        doc = json.loads(body)
    except (ValueError, RecursionError):  # a body nested past the parser's depth too
        raise ValueError(
            'body: not JSON; send {"input": ...} with Content-Type: application/json, or the '
            "raw bytes with Content-Type: application/octet-stream"
        ) from None
    if not isinstance(doc, dict) or set(doc) != {"input"}:
        raise ValueError(f'body: must be an object {{"input": ...}} holding {want}')
    _check(doc["input"], shape, dtype, high, "input", want)
    return {"input": doc["input"]}


def _check(value: Any, shape: list[int], dtype: str, high: Any, where: str, want: str) -> None:
    """Check nested lists against a shape and dtype, iteratively (a deep body cannot
    exhaust the stack).

    Raises:
        ValueError: the first place it differs, named.
    """
    stack: list[tuple[Any, int, str]] = [(value, 0, where)]
    while stack:
        v, depth, at = stack.pop()
        if depth == len(shape):
            if dtype == "int64":
                ok = isinstance(v, int) and not isinstance(v, bool)
                ok = ok and v >= 0 and (high is None or v < int(high))
            else:
                ok = isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v)
            if not ok:
                raise ValueError(f"{at}: {v!r} is not allowed; {where} must be {want}")
            continue
        if not isinstance(v, list) or len(v) != shape[depth]:
            got = f"a list of {len(v)}" if isinstance(v, list) else type(v).__name__
            raise ValueError(
                f"{at}: {got} where {shape[depth]} values were expected; {where} must be {want}"
            )
        stack.extend((x, depth + 1, f"{at}[{i}]") for i, x in enumerate(v))
