"""``/v1/whoami``, ``/v1/tokens`` and ``/v1/audit``: identity, tokens (admins) and the audit
stream (admins)."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Path, Query

from orchestrator.api import operations
from orchestrator.api.auth import Store, Who
from orchestrator.api.bodies import StrictJsonRoute
from orchestrator.api.models import TokenCreate, TokenCreated, WhoAmI
from orchestrator.api.params import MAX_ACTION_CHARS, MAX_AUDIT, TOKEN_ID_PATTERN
from orchestrator.store.audit import AuditEntry
from orchestrator.store.tokens import TokenInfo

__all__ = ["router"]

router = APIRouter(prefix="/v1", tags=["access"], route_class=StrictJsonRoute)


@router.get("/whoami")
def whoami(who: Who) -> WhoAmI:
    """The principal the token speaks for."""
    return WhoAmI(name=who.name, role=who.role, team=who.team, token_id=who.token_id)


@router.get("/tokens")
def tokens(who: Who, store: Store) -> list[TokenInfo]:
    """Every token's record, revoked ones included (never a secret; admins only)."""
    return operations.list_tokens(store, who)


@router.post("/tokens", status_code=201)
def create_token(body: TokenCreate, who: Who, store: Store) -> TokenCreated:
    """Make a token (admins only); the token is in this answer and nowhere else."""
    token, info = operations.create_token(
        store, who, name=body.name, role=body.role, team=body.team
    )
    return TokenCreated(token=token, info=info)


@router.delete("/tokens/{token_id}")
def revoke_token(
    token_id: Annotated[str, Path(pattern=TOKEN_ID_PATTERN)], who: Who, store: Store
) -> TokenInfo:
    """Revoke a token (admins only): it is refused (401) from now on."""
    return operations.revoke_token(store, who, token_id)


@router.get("/audit")
def audit(
    who: Who,
    store: Store,
    count: Annotated[int, Query(ge=1, le=MAX_AUDIT)] = 100,
    action: Annotated[str | None, Query(max_length=MAX_ACTION_CHARS)] = None,
) -> list[AuditEntry]:
    """The latest mutations and who made them, oldest first (admins only)."""
    return operations.read_audit(store, who, count, action)
