"""Request bodies within bounds, refused before they are read: a pure ASGI middleware.

FastAPI reads a route's body before its dependencies run, so before the token is checked, and
the FastAPI versions ``pyproject.toml`` allows (>= 0.110) have no limit on its size: anyone
who reaches the port could make the server hold an upload of any size. (Starlette 1.x adds a
``RequestBodyLimitMiddleware``, but older Starlette lacks it, and it checks nothing about who
sends the body.) So this middleware runs before the app, for a request that carries a body:

1. sent to ``/v1``, it needs a valid bearer token: without one the answer is 401 before a byte
   of the body is read (the token is checked on the event loop, and the principal is left in
   the scope for the route: see :mod:`orchestrator.api.auth`, which says when a token
   verified a moment ago is taken as it was);
2. a ``Content-Length`` above the route's limit is answered 413 at once, unread;
3. otherwise the body is read as it arrives, counting bytes: past the limit (a chunked upload
   declares no length) the answer is 413 and the rest is never read; within it, the body is
   handed to the app, which would have read it whole anyway;
4. a body not read whole within the time limit is answered 408 and its connection closed:
   uvicorn waits as long as a client keeps the connection open, so clients sending a byte now
   and then would each hold a connection (and a task) for as long as they like.

The limits are ``ORCH_API_MAX_BODY`` (1 MiB: one job is under 70 KiB) and, for
``POST /v1/jobs/batch`` and ``PUT /v1/working-dirs`` (a command job's zipped folder),
``ORCH_API_MAX_BATCH_BODY`` (32 MiB); the time limit is ``ORCH_API_BODY_TIMEOUT`` (30 s: a
batch at its limit takes about 3 s at 100 Mbit/s).
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

from redis.exceptions import RedisError
from starlette.datastructures import Headers
from starlette.responses import JSONResponse
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from orchestrator.api.auth import CLAIM_KEY, Authenticator, bearer_token
from orchestrator.config import Settings
from orchestrator.errors import Unauthenticated

__all__ = ["BATCH_PATH", "WORKING_DIR_PATH", "BodyLimit", "BodyLimits", "replay"]

BATCH_PATH = "/v1/jobs/batch"
WORKING_DIR_PATH = "/v1/working-dirs"
"""The routes that take the larger limit (many jobs; a command job's zipped folder)."""

_DRAIN_MAX = 64 << 20
"""A refused body declared up to this size is left to the server to read and discard, so the
client (which sends its body before it reads an answer) gets the refusal: closing a connection
with unread data makes the kernel reset it, which can lose the answer. A larger body, or one
of unknown length (chunked), closes the connection at once rather than be received."""


@dataclass(frozen=True)
class BodyLimits:
    """The largest request body read, in bytes, and the longest wait for one.

    Attributes:
        default: for every route but the batch submission.
        batch: for ``POST /v1/jobs/batch`` and ``PUT /v1/working-dirs``.
        timeout_s: the longest a whole body may take to arrive, once the headers are in.
    """

    default: int
    batch: int
    timeout_s: float

    @classmethod
    def from_settings(cls, settings: Settings) -> BodyLimits:
        """``ORCH_API_MAX_BODY``, ``ORCH_API_MAX_BATCH_BODY`` and ``ORCH_API_BODY_TIMEOUT``."""
        return cls(settings.api_max_body, settings.api_max_batch_body, settings.api_body_timeout_s)

    def of(self, path: str) -> tuple[int, str]:
        """The limit of a route, and the setting that sets it."""
        if path.rstrip("/") in (BATCH_PATH, WORKING_DIR_PATH):
            return self.batch, "ORCH_API_MAX_BATCH_BODY"
        return self.default, "ORCH_API_MAX_BODY"


class BodyLimit:
    """The ASGI middleware: bodies to ``/v1`` need a token, and no body past its limit is
    read (see the module's docstring for the order of the checks).

    Args:
        app: the application it wraps.
        auth: where tokens are checked.
        limits: the largest bodies.
    """

    def __init__(self, app: ASGIApp, *, auth: Authenticator, limits: BodyLimits) -> None:
        self.app = app
        self.auth = auth
        self.limits = limits

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Check a request's token and body size, then hand it on, or answer it."""
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = Headers(scope=scope)
        chunked = "chunked" in headers.get("transfer-encoding", "").lower()
        declared = _declared(headers.get("content-length"))
        if not chunked and not declared:  # no body (the server refuses a malformed length)
            await self.app(scope, receive, send)
            return
        path: str = scope["path"]
        if path.startswith("/v1/"):
            refusal = await self._authenticate(headers, scope)
            if refusal is not None:
                await _answer(refusal, declared, scope, receive, send)
                return
        limit, setting = self.limits.of(path)
        if declared is not None and declared > limit:
            what = f"{declared:,} bytes"
            await _answer(_too_large(what, limit, setting), declared, scope, receive, send)
            return
        try:
            body = await asyncio.wait_for(_read(receive, limit), self.limits.timeout_s)
        except TimeoutError:
            await _answer(_too_slow(self.limits.timeout_s), None, scope, receive, send)
            return
        if body is None:  # the client left
            return
        if len(body) > limit:
            what = f"over {limit:,} bytes"
            await _answer(_too_large(what, limit, setting), None, scope, receive, send)
            return
        await self.app(scope, replay(body, receive), send)

    async def _authenticate(self, headers: Headers, scope: Scope) -> JSONResponse | None:
        """The 401 (or 503) answer to a body without a valid token; ``None`` when it has one,
        whose principal is then left in ``scope`` for the route's dependency."""
        token = bearer_token(headers.get("authorization"))
        try:
            scope[CLAIM_KEY] = await self.auth.claim(token)
        except Unauthenticated as err:
            return JSONResponse(
                {"detail": str(err)}, status_code=401, headers={"WWW-Authenticate": "Bearer"}
            )
        except RedisError as err:
            return JSONResponse({"detail": f"the store failed: {err}"}, status_code=503)
        return None


def _declared(length: str | None) -> int | None:
    # uvicorn refuses a request whose Content-Length is not a number (400) before the app sees
    # it; a value that still fails here is treated as absent (the body is counted as read).
    try:
        return int(length) if length is not None else None
    except ValueError:
        return None


def _too_large(what: str, limit: int, setting: str) -> JSONResponse:
    return JSONResponse(
        {
            "detail": f"the request body is {what}; at most {limit:,} bytes allowed here "
            f"(the server's {setting})"
        },
        status_code=413,
    )


def _too_slow(timeout_s: float) -> JSONResponse:
    return JSONResponse(
        {
            "detail": f"the request body did not arrive within {timeout_s:g} s "
            "(the server's ORCH_API_BODY_TIMEOUT)"
        },
        status_code=408,
    )


async def _answer(
    response: JSONResponse, declared: int | None, scope: Scope, receive: Receive, send: Send
) -> None:
    """Send ``response`` to a request whose body was not read (whole): the connection is
    closed after it unless the body's declared rest is small enough to drain."""
    if declared is None or declared > _DRAIN_MAX:
        response.headers["Connection"] = "close"
    await response(scope, receive, send)


async def _read(receive: Receive, limit: int) -> bytes | None:
    """The body, read until it ends or passes ``limit`` (then what was read, over it);
    ``None`` when the client disconnects first."""
    body = bytearray()
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            return None
        body += message.get("body", b"")
        if len(body) > limit or not message.get("more_body", False):
            return bytes(body)


def replay(body: bytes, receive: Receive) -> Receive:
    """A ``receive`` that gives the app the body read, then whatever the server sends next
    (a disconnect, which a streaming answer waits for)."""
    sent = False

    async def replay() -> Message:
        nonlocal sent
        if sent:
            return await receive()
        sent = True
        return {"type": "http.request", "body": body, "more_body": False}

    return replay
