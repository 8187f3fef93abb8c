"""The auth dependency: a bearer token becomes the request's :class:`Principal`.

Every route but ``/healthz`` and the docs depends on :func:`principal`; a request without a
token, or with one that is unknown, malformed or revoked, is answered 401 before its handler
runs (and, when it carries a body, before the body is read: see
:mod:`orchestrator.api.limits`). What the principal may then do is decided by ``identity``
(403 when it may not).

The token is checked on the event loop, without a thread: its record is read with an asyncio
Redis client (:class:`Authenticator`) and verified in memory (``store.tokens.verify``). What a
request may do is always decided on the token's record as stored when it acts, so a revoked
token is refused from the next request on, whichever process revoked it.

A request with a body is first checked by the body-limit middleware, before the body is read,
which hands the principal on (:class:`Claim`, under :data:`CLAIM_KEY`) so the token is read once
per request. To let a body be read, a token verified in the last :data:`RECENT_S` seconds is
taken as it was (no read): the body is then held (within its size limit) for a token revoked
within those seconds, but nothing is done with it unless the token is still live: routes read
the token again (``Who``), except the submissions, which read it in the thread that writes the
jobs (:func:`Claim.confirm`; for concurrent single submissions, one round trip for all of them,
:func:`confirm_each`: the blocking client's round trip is a fraction of the asyncio
client's). So within those seconds a revoked token's submission with an invalid body is
answered 422 (what is wrong with its own body) before the 401 it gets with a valid one.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Annotated

from fastapi import Depends, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from starlette.concurrency import run_in_threadpool

from orchestrator.api.identity import Principal
from orchestrator.errors import Unauthenticated
from orchestrator.store import JobStore
from orchestrator.store.async_tokens import AsyncTokens

__all__ = [
    "CLAIM_KEY",
    "Authenticator",
    "Caller",
    "Claim",
    "Claimed",
    "Store",
    "Who",
    "authenticate",
    "bearer_token",
    "caller",
    "confirm_each",
    "principal",
    "store_of",
]

CLAIM_KEY = "orch.claim"
"""The ASGI scope key under which the body-limit middleware leaves the :class:`Claim` it
checked."""

RECENT_S = 5.0
"""How long a verified token lets bodies be read without being read again (see the module)."""

_RECENT_MAX = 4096
"""Most tokens remembered as recently verified (only live ones are: a full table is emptied)."""

_NO_TOKEN = (
    "no API token: send `Authorization: Bearer <token>` (make one with `orch tokens create`)"
)
_BAD_TOKEN = "the API token is unknown, malformed or revoked"

_bearer = HTTPBearer(
    auto_error=False,
    description="An API token from `orch tokens create` (sent as `Authorization: Bearer ...`).",
)


async def store_of(request: Request) -> JobStore:
    """The job store the app serves (set by ``create_app``)."""
    store: JobStore = request.app.state.store
    return store


@dataclass(frozen=True)
class Claim:
    """Who a request's token spoke for when it was checked.

    Attributes:
        token: the bearer token.
        principal: whom it speaks for.
        fresh: read from the store for this request; else taken from a check of the last
            :data:`RECENT_S` seconds, to be confirmed (:meth:`confirm`) before acting.
    """

    token: str
    principal: Principal
    fresh: bool

    def confirm(self, store: JobStore) -> Principal:
        """The principal, read again from the store unless it was read for this request
        (blocking: call it in a thread).

        Raises:
            Unauthenticated: the token was revoked (or removed) meanwhile.
        """
        return self.principal if self.fresh else authenticate(store, self.token)


def confirm_each(store: JobStore, claims: Sequence[Claim]) -> list[Principal | Unauthenticated]:
    """:meth:`Claim.confirm` of each claim, in one round trip for those to read (blocking:
    call it in a thread): each principal, or the refusal of a token revoked meanwhile."""
    stale = list(dict.fromkeys(claim.token for claim in claims if not claim.fresh))
    infos = dict(zip(stale, store.tokens.authenticate_many(stale), strict=True))
    return [
        claim.principal
        if claim.fresh
        else Unauthenticated(_BAD_TOKEN)
        if (info := infos[claim.token]) is None
        else Principal.of_token(info)
        for claim in claims
    ]


async def claimed(
    request: Request,
    credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)],
) -> Claim:
    """The :class:`Claim` the body-limit middleware checked, or one read now (a request
    without a body, which the middleware lets through unchecked).

    Raises:
        Unauthenticated: no bearer token, or one that is unknown, malformed or revoked.
    """
    claim = request.scope.get(CLAIM_KEY)
    if not isinstance(claim, Claim):
        token = None if credentials is None else credentials.credentials
        auth: Authenticator = request.app.state.auth
        claim = Claim(token or "", await auth.principal(token), fresh=True)
    claim.principal.check_not_service()
    return claim


async def principal(
    request: Request,
    credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)],
) -> Principal:
    """The principal the request's bearer token speaks for, as stored now (the body-limit
    middleware's check when it read the token for this request, else read here).

    Raises:
        Unauthenticated: no bearer token, or one that is unknown, malformed or revoked.
    """
    who = await caller(request, credentials)
    who.check_not_service()
    return who


async def caller(
    request: Request,
    credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)],
) -> Principal:
    """Whom the request's bearer token speaks for, service tokens included: only a service's
    endpoint takes this (it lets a service token through to its own service); every other
    route takes :func:`principal`.

    Raises:
        Unauthenticated: no bearer token, or one that is unknown, malformed or revoked.
    """
    claim = request.scope.get(CLAIM_KEY)
    if isinstance(claim, Claim) and claim.fresh:
        return claim.principal
    auth: Authenticator = request.app.state.auth
    return await auth.principal(None if credentials is None else credentials.credentials)


def bearer_token(authorization: str | None) -> str | None:
    """The token of an ``Authorization: Bearer <token>`` header (``None`` for none, or for
    another scheme), read as :data:`_bearer` reads it for the routes."""
    scheme, _, token = (authorization or "").partition(" ")
    token = token.strip()
    return token if scheme.lower() == "bearer" and token else None


def authenticate(store: JobStore, token: str | None) -> Principal:
    """The principal ``token`` speaks for (``None``: the request sent no bearer token), read
    with the store's blocking client (for code already in a thread).

    Raises:
        Unauthenticated: no token, or one that is unknown, malformed or revoked.
    """
    if token is None:
        raise Unauthenticated(_NO_TOKEN)
    info = store.tokens.authenticate(token)
    if info is None:
        raise Unauthenticated(_BAD_TOKEN)
    return Principal.of_token(info)


class Authenticator:
    """Checks bearer tokens on the event loop: one ``HGET`` through the store's asyncio
    token reader (:class:`~orchestrator.store.async_tokens.AsyncTokens`; closed by
    :meth:`aclose`). A store whose client cannot be mirrored (TLS, a credential provider)
    is read in a thread instead, as before.

    Args:
        store: the store whose ``{ns}:tokens`` holds the tokens.
    """

    def __init__(self, store: JobStore) -> None:
        self.store = store
        self.tokens = AsyncTokens(store)
        self._recent: dict[str, tuple[float, Principal]] = {}

    async def claim(self, token: str | None) -> Claim:
        """The claim of a request with a body (see the module): a token verified in the last
        :data:`RECENT_S` seconds as it was, else read now.

        Raises:
            Unauthenticated: no token, or one that is unknown, malformed or revoked (when
                read now).
            RedisError: the store failed.
        """
        now = time.monotonic()
        recent = self._recent.get(token) if token is not None else None
        if token is not None and recent is not None and now - recent[0] < RECENT_S:
            return Claim(token, recent[1], fresh=False)
        who = await self.principal(token)
        if len(self._recent) >= _RECENT_MAX:
            self._recent.clear()
        self._recent[token or ""] = (now, who)
        return Claim(token or "", who, fresh=True)

    async def principal(self, token: str | None) -> Principal:
        """The principal ``token`` speaks for (``None``: the request sent no bearer token).

        Raises:
            Unauthenticated: no token, or one that is unknown, malformed or revoked.
            RedisError: the store failed.
        """
        if token is None:
            raise Unauthenticated(_NO_TOKEN)
        if not self.tokens.available:
            return await run_in_threadpool(authenticate, self.store, token)
        info = await self.tokens.authenticate(token)
        if info is None:
            raise Unauthenticated(_BAD_TOKEN)
        return Principal.of_token(info)

    async def aclose(self) -> None:
        """Close the asyncio client's connections (the server is stopping)."""
        await self.tokens.aclose()


Store = Annotated[JobStore, Depends(store_of)]
"""A route parameter: the app's job store."""

Who = Annotated[Principal, Depends(principal)]
"""A route parameter: the authenticated principal (401 without one; 403 for a service token)."""

Caller = Annotated[Principal, Depends(caller)]
"""A route parameter of a service's endpoint only: the principal, service tokens included."""

Claimed = Annotated[Claim, Depends(claimed)]
"""A route parameter: the principal as checked before the body was read, which the route
confirms (:meth:`Claim.confirm`) in the thread where it acts (401 without a token)."""
