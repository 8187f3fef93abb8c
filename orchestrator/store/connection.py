"""Open the orchestrator's Redis: the one ``REDIS_URL`` names, or the embedded server."""

from __future__ import annotations

import time
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import redis

from orchestrator.config import Settings
from orchestrator.errors import StoreError
from orchestrator.store.server import EmbeddedRedis

__all__ = ["async_pool_kwargs", "connect", "open_url", "resolve_url"]

CONNECT_TIMEOUT_S = 5.0


def connect(settings: Settings) -> redis.Redis:
    """A client for the orchestrator's Redis, checked with a PING.

    With ``settings.redis_url`` set, that server; otherwise the embedded server of
    ``settings.data_dir``, started if it is not running.

    Raises:
        StoreError: the server cannot be reached (the message names the URL) or started.
    """
    return open_url(resolve_url(settings))


def resolve_url(settings: Settings) -> str:
    """The URL of the orchestrator's Redis: ``REDIS_URL``, or the embedded server's (started
    if it is not running). Workers get this URL to stream their metrics.

    Raises:
        StoreError: the embedded server could not be started.
    """
    if settings.redis_url:
        return settings.redis_url
    return EmbeddedRedis(settings.data_dir, settings.redis_bind).ensure_running()


LOADING_WAIT_S = 60.0
"""How long to wait for a server loading its data file before giving up."""


def open_url(url: str) -> redis.Redis:
    """A client for ``url`` (responses decoded to ``str``), checked with a PING.

    Raises:
        StoreError: the URL is invalid or the server does not answer.
    """
    try:
        client = redis.Redis.from_url(
            url, decode_responses=True, socket_connect_timeout=CONNECT_TIMEOUT_S
        )
        _ping(client)
    except (redis.RedisError, ValueError, OSError) as err:
        raise StoreError(f"cannot reach Redis at {redact(url)}: {err}") from None
    return client


def _ping(client: redis.Redis) -> None:
    """PING, waiting up to :data:`LOADING_WAIT_S` while a restarted server loads its data file
    (it answers LOADING for as long as that takes: `orch down; orch list` must not fail on
    it)."""
    deadline = time.monotonic() + LOADING_WAIT_S
    while True:
        try:
            client.ping()
            return
        except redis.BusyLoadingError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)


def redact(url: str) -> str:
    """``url`` with its password replaced by ``***``, for messages and logs."""
    try:
        parts = urlsplit(url)
        if parts.password is None:
            return url
        netloc = parts.netloc.replace(f":{parts.password}@", ":***@", 1)
        return urlunsplit(parts._replace(netloc=netloc))
    except ValueError:
        return url


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


def async_pool_kwargs(client: redis.Redis) -> dict[str, Any] | None:
    """The asyncio pool's arguments reaching the server ``client`` reaches as it does, or
    ``None`` when it connects in a way not mirrored here (TLS, a credential provider)."""
    import redis.asyncio as aredis  # the API's only: no other command loads it

    pool = client.connection_pool
    kwargs = pool.connection_kwargs
    if kwargs.get("credential_provider") is not None:
        return None
    if pool.connection_class is redis.connection.Connection:
        kind: type[aredis.connection.AbstractConnection] = aredis.Connection
        where: tuple[str, ...] = ("host", "port")
    elif pool.connection_class is redis.connection.UnixDomainSocketConnection:
        kind, where = aredis.UnixDomainSocketConnection, ("path",)
    else:
        return None
    picked = {k: kwargs[k] for k in (*where, *_COMMON) if k in kwargs}
    return {"connection_class": kind, "max_connections": pool.max_connections, **picked}
