"""Token records read on an event loop: the API's token check without a thread hop.

The store's client (redis-py's blocking one) would block the event loop, and a thread hop per
request costs the API more than the lookup itself (``bench/api/singles.py``), so the API
checks bearer tokens through an asyncio client over the same server, with the same
connection settings (:func:`async_pool_kwargs`). Only the lookup is here; what a record means
is :func:`orchestrator.store.tokens.verify`'s, as for the blocking path.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, cast

import redis.asyncio as aredis

from orchestrator.store.connection import async_pool_kwargs
from orchestrator.store.tokens import TokenInfo, token_id_of, verify

if TYPE_CHECKING:
    from orchestrator.store.jobs import JobStore

__all__ = ["AsyncTokens"]


class AsyncTokens:
    """Reads ``{ns}:tokens`` records with an asyncio client made on first use, on the loop
    that serves (a client's connections belong to the loop that opened them).

    Args:
        store: the job store (its client's server and connection settings are copied; its
            namespace's tokens hash is read).
    """

    def __init__(self, store: JobStore) -> None:
        self.key = store.keys.tokens
        self._kwargs = async_pool_kwargs(store.client)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._client: aredis.Redis | None = None

    @property
    def available(self) -> bool:
        """Whether the store's connection can be mirrored (not TLS or a credential provider:
        the caller then reads in a thread with the blocking client)."""
        return self._kwargs is not None

    async def authenticate(self, token: str) -> TokenInfo | None:
        """The record of a live token, ``None`` for a malformed, unknown or revoked one (as
        ``TokenStore.authenticate``)."""
        token_id = token_id_of(token)
        if token_id is None:
            return None
        return verify(token, await self._hget(token_id))

    async def _hget(self, field: str) -> str | None:
        if self._kwargs is None:
            raise RuntimeError("this store's connection cannot be mirrored: read in a thread")
        loop = asyncio.get_running_loop()
        if self._client is None or self._loop is not loop:
            self._client = aredis.Redis(connection_pool=aredis.ConnectionPool(**self._kwargs))
            self._loop = loop
        return cast(str | None, await self._client.execute_command("HGET", self.key, field))

    async def aclose(self) -> None:
        """Close the asyncio client's connections (the server is stopping)."""
        if self._client is not None and self._loop is asyncio.get_running_loop():
            await self._client.aclose()
        self._client = self._loop = None
