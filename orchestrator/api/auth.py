"""The auth dependency: a bearer token becomes the request's :class:`Principal`.

Every route but ``/healthz`` and the docs depends on :func:`principal`; a request without a
token, or with one that is unknown, malformed or revoked, is answered 401 before its handler
runs (and, when it carries a body, before the body is read: see
:mod:`orchestrator.api.limits`). What the principal may then do is decided by ``identity``
(403 when it may not).
"""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from orchestrator.api.identity import Principal
from orchestrator.errors import Unauthenticated
from orchestrator.store import JobStore

__all__ = ["Store", "Who", "authenticate", "bearer_token", "principal", "store_of"]

_bearer = HTTPBearer(
    auto_error=False,
    description="An API token from `orch tokens create` (sent as `Authorization: Bearer ...`).",
)


def store_of(request: Request) -> JobStore:
    """The job store the app serves (set by ``create_app``)."""
    store: JobStore = request.app.state.store
    return store


def principal(
    request: Request,
    credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)],
) -> Principal:
    """The principal the request's bearer token speaks for.

    Raises:
        Unauthenticated: no bearer token, or one that is unknown, malformed or revoked.
    """
    return authenticate(store_of(request), None if credentials is None else credentials.credentials)


def bearer_token(authorization: str | None) -> str | None:
    """The token of an ``Authorization: Bearer <token>`` header (``None`` for none, or for
    another scheme), read as :data:`_bearer` reads it for the routes."""
    scheme, _, token = (authorization or "").partition(" ")
    token = token.strip()
    return token if scheme.lower() == "bearer" and token else None


def authenticate(store: JobStore, token: str | None) -> Principal:
    """The principal ``token`` speaks for (``None``: the request sent no bearer token).

    Raises:
        Unauthenticated: no token, or one that is unknown, malformed or revoked.
    """
    if token is None:
        raise Unauthenticated(
            "no API token: send `Authorization: Bearer <token>` (make one with "
            "`orch tokens create`)"
        )
    info = store.tokens.authenticate(token)
    if info is None:
        raise Unauthenticated("the API token is unknown, malformed or revoked")
    return Principal.of_token(info)


Store = Annotated[JobStore, Depends(store_of)]
"""A route parameter: the app's job store."""

Who = Annotated[Principal, Depends(principal)]
"""A route parameter: the authenticated principal (401 without one)."""
