"""API tokens: who a bearer token speaks for, stored with its secret hashed.

A token reads ``orch_{id}_{secret}``: the id names its record in ``{ns}:tokens`` (one ``HGET``
per request) and the secret is kept only as its SHA-256, compared in constant time. A revoked
token keeps its record (``orch tokens list`` shows who revoked it when) and never authenticates
again. The secret is returned once, by :meth:`TokenStore.create`; nothing can show it later.
"""

from __future__ import annotations

import builtins
import hashlib
import hmac
import json
import secrets
import time
from collections.abc import Sequence
from typing import Self, cast

from pydantic import BaseModel, ConfigDict, Field, model_validator
from redis.exceptions import WatchError

from orchestrator.errors import OrchError, TokenNotFound
from orchestrator.spec import NAME_PATTERN
from orchestrator.store.keys import KeyFamily
from orchestrator.store.roles import Role

__all__ = ["TOKEN_PREFIX", "Role", "TokenInfo", "TokenStore", "token_id_of", "verify"]

TOKEN_PREFIX = "orch_"
_ID_TRIES = 16


class TokenInfo(BaseModel):
    """One token's principal and history (never its secret).

    Attributes:
        id: the token's id (8 hex digits), the part of the token before the secret.
        name: the principal it speaks for (``alice``), recorded on every action.
        team: the team whose jobs it reaches; ``None`` only for an admin or a viewer of all
            teams.
        role: what it may do (see :class:`Role`).
        created_at, created_by: when and by whom it was made.
        revoked_at, revoked_by: when and by whom it was revoked, if it was.
        service: the one service (a job id) a ``service`` token reaches; ``None`` for the
            other roles.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    id: str
    name: str = Field(pattern=NAME_PATTERN)
    team: str | None = Field(default=None, pattern=NAME_PATTERN)
    role: Role
    created_at: float
    created_by: str
    revoked_at: float | None = None
    revoked_by: str | None = None
    service: str | None = Field(default=None, pattern=NAME_PATTERN)

    @model_validator(mode="after")
    def _member_has_team(self) -> Self:
        if self.role in (Role.MEMBER, Role.SERVICE) and self.team is None:
            raise ValueError(f"a {self.role.value} token needs a team")
        if (self.role is Role.SERVICE) != (self.service is not None):
            raise ValueError("a service token names its service, and only a service token does")
        return self

    @property
    def revoked(self) -> bool:
        """Whether the token was revoked."""
        return self.revoked_at is not None


class TokenStore(KeyFamily):
    """The API tokens of one namespace (``{ns}:tokens``)."""

    def create(
        self,
        *,
        name: str,
        role: Role,
        team: str | None,
        created_by: str,
        service: str | None = None,
    ) -> tuple[str, TokenInfo]:
        """Make a new token.

        Returns:
            The token itself (shown once: only its hash is kept) and its record.

        Raises:
            pydantic.ValidationError: a name or team that is not allowed, or a member without
                a team.
        """
        for _ in range(_ID_TRIES):
            info = TokenInfo(
                id=secrets.token_hex(4),
                name=name,
                team=team,
                role=role,
                created_at=time.time(),
                created_by=created_by,
                service=service,
            )
            secret = secrets.token_urlsafe(32)
            record = {**info.model_dump(mode="json"), "sha256": _digest(secret)}
            if self._client.hsetnx(self._keys.tokens, info.id, json.dumps(record)):
                return f"{TOKEN_PREFIX}{info.id}_{secret}", info
        raise OrchError(f"no free token id after {_ID_TRIES} tries")

    def authenticate(self, token: str) -> TokenInfo | None:
        """The record of a live token, or ``None`` for a malformed, unknown or revoked one
        (which of these is not said: a caller learns nothing by guessing)."""
        token_id = token_id_of(token)
        if token_id is None:
            return None
        return verify(token, cast(str | None, self._client.hget(self._keys.tokens, token_id)))

    def authenticate_many(self, tokens: Sequence[str]) -> builtins.list[TokenInfo | None]:
        """:meth:`authenticate` of each token, in order, in one round trip for them all."""
        ids = [token_id_of(token) for token in tokens]
        pipe = self._client.pipeline(transaction=False)
        for token_id in ids:
            if token_id is not None:
                pipe.hget(self._keys.tokens, token_id)
        raws = iter(pipe.execute() if any(ids) else [])
        return [
            None if token_id is None else verify(token, next(raws))
            for token, token_id in zip(tokens, ids, strict=True)
        ]

    def get(self, token_id: str) -> TokenInfo:
        """The record of one token.

        Raises:
            TokenNotFound: no such token.
        """
        raw = cast(str | None, self._client.hget(self._keys.tokens, token_id))
        if raw is None:
            raise TokenNotFound(token_id)
        return _info(raw)

    def list(self) -> builtins.list[TokenInfo]:
        """Every token, revoked ones included, oldest first."""
        raw = cast(dict[str, str], self._client.hgetall(self._keys.tokens))
        return sorted((_info(v) for v in raw.values()), key=lambda t: t.created_at)

    def revoke(self, token_id: str, *, by: str) -> TokenInfo:
        """Revoke a token: it never authenticates again (revoking twice keeps the first).

        Raises:
            TokenNotFound: no such token.
        """
        key = self._keys.tokens
        with self._client.pipeline(transaction=True) as pipe:
            while True:  # optimistic: a concurrent revoke retries on the new record
                try:
                    pipe.watch(key)
                    raw = cast(str | None, pipe.hget(key, token_id))
                    if raw is None:
                        raise TokenNotFound(token_id)
                    record = json.loads(raw)
                    if record.get("revoked_at") is not None:
                        return _info(raw)
                    record.update(revoked_at=time.time(), revoked_by=by)
                    pipe.multi()
                    pipe.hset(key, token_id, json.dumps(record))
                    pipe.execute()
                    return _info(json.dumps(record))
                except WatchError:
                    continue


def token_id_of(token: str) -> str | None:
    """The id of a well-formed token (``orch_{id}_{secret}``), ``None`` for a malformed one: the
    field of ``{ns}:tokens`` whose record :func:`verify` checks the token against."""
    prefix, _, rest = token.partition("_")
    token_id, _, secret = rest.partition("_")
    if f"{prefix}_" != TOKEN_PREFIX or not token_id or not secret:
        return None
    return token_id


def verify(token: str, raw: str | None) -> TokenInfo | None:
    """The record of ``token`` if it is live: ``raw`` is its stored record (the field
    :func:`token_id_of` names; ``None`` when there is none), whose hash must match the token's
    secret and which must not be revoked. No I/O, so that the API can fetch ``raw`` without
    blocking (see ``orchestrator.api.auth``)."""
    token_id = token_id_of(token)
    if token_id is None or raw is None:
        return None
    record = json.loads(raw)
    secret = token[len(TOKEN_PREFIX) + len(token_id) + 1 :]
    if not hmac.compare_digest(record.pop("sha256"), _digest(secret)):
        return None
    info = TokenInfo.model_validate(record)
    return None if info.revoked else info


def _digest(secret: str) -> str:
    return hashlib.sha256(secret.encode("utf-8")).hexdigest()


def _info(raw: str) -> TokenInfo:
    record = json.loads(raw)
    record.pop("sha256", None)
    return TokenInfo.model_validate(record)
