"""The token store: secrets kept hashed, compared whole, revocation final."""

from __future__ import annotations

import hashlib

import pytest
from pydantic import ValidationError

from orchestrator.errors import TokenNotFound
from orchestrator.store import JobStore
from orchestrator.store.tokens import Role


def test_only_the_hash_is_stored(store: JobStore) -> None:
    token, info = store.tokens.create(
        name="alice", role=Role.MEMBER, team="vision", created_by="root"
    )
    secret = token.split("_", 2)[2]
    raw = store.client.hget(store.keys.tokens, info.id)
    assert secret not in raw and hashlib.sha256(secret.encode()).hexdigest() in raw
    assert store.tokens.authenticate(token) == info


@pytest.mark.parametrize(
    "mangle",
    [
        lambda t: t[:-1] + ("A" if t[-1] != "A" else "B"),
        lambda t: t + "x",
        lambda t: t.replace("orch_", "orc_"),
        lambda t: "orch_" + t.split("_")[1],
        lambda t: "",
    ],
)
def test_a_wrong_token_does_not_authenticate(store: JobStore, mangle: object) -> None:
    token, _ = store.tokens.create(name="alice", role=Role.VIEWER, team=None, created_by="root")
    assert store.tokens.authenticate(mangle(token)) is None  # type: ignore[operator]


def test_revocation_is_final_and_recorded(store: JobStore) -> None:
    token, info = store.tokens.create(name="bob", role=Role.ADMIN, team=None, created_by="root")
    revoked = store.tokens.revoke(info.id, by="root")
    assert revoked.revoked and revoked.revoked_by == "root"
    assert store.tokens.authenticate(token) is None
    assert store.tokens.revoke(info.id, by="someone").revoked_by == "root"
    assert store.tokens.list() == [revoked]
    with pytest.raises(TokenNotFound):
        store.tokens.revoke("00000000", by="root")


def test_a_member_needs_a_team_and_names_are_checked(store: JobStore) -> None:
    with pytest.raises(ValidationError):
        store.tokens.create(name="carol", role=Role.MEMBER, team=None, created_by="root")
    with pytest.raises(ValidationError):
        store.tokens.create(name="Carol!", role=Role.VIEWER, team=None, created_by="root")
    assert store.tokens.list() == []


def test_audit_reads_newest_count_oldest_first(store: JobStore) -> None:
    for i in range(5):
        action = "submit" if i % 2 == 0 else "cancel"
        store.audit.record(actor="a", role="admin", team=None, action=action, targets=[f"j{i}"])
    assert [e.target for e in store.audit.read(3)] == ["j2", "j3", "j4"]
    assert [e.target for e in store.audit.read(10, action="cancel")] == ["j1", "j3"]
