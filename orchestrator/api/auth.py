"""The auth dependency: a bearer token becomes the request's :class:`Principal`.

Every route but ``/healthz`` and the docs depends on :func:`principal`; a request without a
token, or with one that is unknown, malformed or revoked, is answered 401 before its handler
runs (and, when it carries a body, before the body is read: see
:mod:`orchestrator.api.limits`). What the principal may then do is decided by ``identity``
(403 when it may not).

The token is checked on the event loop, without a thread: its record is read with an asyncio
Redis client (:class:`Authenticator`) and verified in memory (``store.tokens.verify``). It is
read afresh on every request, never cached, so a revoked token is refused from the next
request on, whichever process revoked it. The body-limit middleware checks the token of a
request with a body first and hands the principal on (:data:`PRINCIPAL_KEY`), so it is read
once per request.
"""

from __future__ import annotations

import asyncio
from typing import Annotated, Any, cast

import redis
import redis.asyncio as aredis
from fastapi import Depends, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from starlette.concurrency import run_in_threadpool

from orchestrator.api.identity import Principal
from orchestrator.errors import Unauthenticated
from orchestrator.store import JobStore
from orchestrator.store.tokens import token_id_of, verify

__all__ = [
    "PRINCIPAL_KEY",
    "Authenticator",
    "Store",
    "Who",
    "authenticate",
    "bearer_token",
    "principal",
    "store_of",
]

PRINCIPAL_KEY = "orch.principal"
"""The ASGI scope key under which the body-limit middleware leaves the principal it checked."""

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


async def principal(
    request: Request,
    credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)],
) -> Principal:
    """The principal the request's bearer token speaks for (the one the body-limit
    middleware checked, when it did).

    Raises:
        Unauthenticated: no bearer token, or one that is unknown, malformed or revoked.
    """
    checked = request.scope.get(PRINCIPAL_KEY)
    if isinstance(checked, Principal):
        return checked
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
    """Checks bearer tokens on the event loop: one ``HGET`` through an asyncio client over
    the same server as the store's (made on first use, on the loop that serves; closed by
    :meth:`aclose`). A store whose client cannot be mirrored (TLS, a credential provider)
    is read in a thread instead, as before.

    Args:
        store: the store whose ``{ns}:tokens`` holds the tokens.
    """

    def __init__(self, store: JobStore) -> None:
        self.store = store
        self._loop: asyncio.AbstractEventLoop | None = None
        self._client: aredis.Redis | None = None
        self._mirrored = _async_pool_kwargs(store.client) is not None

    async def principal(self, token: str | None) -> Principal:
        """The principal ``token`` speaks for (``None``: the request sent no bearer token).

        Raises:
            Unauthenticated: no token, or one that is unknown, malformed or revoked.
            RedisError: the store failed.
        """
        if token is None:
            raise Unauthenticated(_NO_TOKEN)
        if not self._mirrored:
            return await run_in_threadpool(authenticate, self.store, token)
        token_id = token_id_of(token)
        if token_id is None:
            raise Unauthenticated(_BAD_TOKEN)
        raw = await self._hget(self.store.keys.tokens, token_id)
        info = verify(token, raw)
        if info is None:
            raise Unauthenticated(_BAD_TOKEN)
        return Principal.of_token(info)

    async def _hget(self, key: str, field: str) -> str | None:
        loop = asyncio.get_running_loop()
        if self._client is None or self._loop is not loop:
            # A client's connections belong to the loop that opened them (one per server).
            kwargs = _async_pool_kwargs(self.store.client)
            assert kwargs is not None
            self._client = aredis.Redis(connection_pool=aredis.ConnectionPool(**kwargs))
            self._loop = loop
        return cast(str | None, await self._client.execute_command("HGET", key, field))

    async def aclose(self) -> None:
        """Close the asyncio client's connections (the server is stopping)."""
        if self._client is not None and self._loop is asyncio.get_running_loop():
            await self._client.aclose()
        self._client = self._loop = None


_COMMON = (
    "db",
    "username",
    "password",
    "client_name",
    "decode_responses",
    "encoding",
    "encoding_errors",
    "socket_timeout",
    "socket_connect_timeout",
)
"""Connection settings the blocking and asyncio clients share."""


def _async_pool_kwargs(client: redis.Redis) -> dict[str, Any] | None:
    """The asyncio pool's arguments reaching the server ``client`` reaches as it does, or
    ``None`` when it connects in a way not mirrored here (TLS, a credential provider)."""
    pool = client.connection_pool
    kwargs = pool.connection_kwargs
    if kwargs.get("credential_provider") is not None:
        return None
    if pool.connection_class is redis.connection.Connection:
        kind: type[aredis.connection.AbstractConnection] = aredis.Connection
        where = ("host", "port")
    elif pool.connection_class is redis.connection.UnixDomainSocketConnection:
        kind, where = aredis.UnixDomainSocketConnection, ("path",)
    else:
        return None
    picked = {k: kwargs[k] for k in (*where, *_COMMON) if k in kwargs}
    return {"connection_class": kind, "max_connections": pool.max_connections, **picked}


Store = Annotated[JobStore, Depends(store_of)]
"""A route parameter: the app's job store."""

Who = Annotated[Principal, Depends(principal)]
"""A route parameter: the authenticated principal (401 without one)."""
