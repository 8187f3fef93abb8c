"""Concurrent single submissions written together (orchestrator.api.batching): each request
answered on its own (its token, its role, its team's config, its body), never failed by
another's, and each written job audited once."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import httpx

from orchestrator.api import operations
from orchestrator.api.auth import Claim
from orchestrator.api.batching import _Waiting, _write
from orchestrator.api.identity import Principal
from orchestrator.api.models import Submitted
from orchestrator.api.server import ApiServer
from orchestrator.errors import Forbidden, SpecError, Unauthenticated
from orchestrator.store import JobStore
from orchestrator.store.tokens import Role
from orchestrator.teams import parse_teams

from .conftest import http, job_spec, spec_data

ROOT = Principal.local("root")


def _config(store: JobStore) -> None:
    """A team config that lists vision only: a job of team speech is refused by it."""
    config = parse_teams({"teams": [{"name": "vision"}], "allow_unlisted": False})
    operations.apply_teams(store, ROOT, config)


def _claim(store: JobStore, role: Role, team: str | None, *, fresh: bool) -> Claim:
    token, info = operations.create_token(store, ROOT, name=f"{role.value}-x", role=role, team=team)
    return Claim(token, Principal.of_token(info), fresh=fresh)


def test_one_batch_answers_each_request_on_its_own(store: JobStore) -> None:
    """In one batch: two jobs written, a revoked token's (checked a moment ago) refused 401, a
    viewer's 403, a job of a team the config does not list 422 naming the field; only the
    two are stored, each audited once with its submitter."""
    member = _claim(store, Role.MEMBER, "vision", fresh=True)
    stale = _claim(store, Role.MEMBER, "vision", fresh=False)
    revoked = _claim(store, Role.MEMBER, "vision", fresh=False)
    operations.revoke_token(store, ROOT, revoked.principal.token_id or "")
    viewer = _claim(store, Role.VIEWER, "vision", fresh=True)
    outsider = _claim(store, Role.MEMBER, "speech", fresh=True)
    _config(store)  # after the tokens: a member token's team must be in the config
    batch = [
        (member, job_spec(name="first")),
        (revoked, job_spec(name="revoked")),
        (viewer, job_spec(name="viewer")),
        (outsider, job_spec(team="speech", name="unlisted")),
        (stale, job_spec(name="second")),
    ]
    loop = asyncio.new_event_loop()
    try:
        waiting = [_Waiting(c, s, loop.create_future()) for c, s in batch]
        outcomes = _write(store, waiting)
    finally:
        loop.close()
    written, refused, forbidden, unlisted, again = outcomes
    assert isinstance(written, Submitted) and isinstance(again, Submitted)
    ((first,), (second,)) = written.ids, again.ids
    assert written.warnings == again.warnings == []
    assert isinstance(refused, Unauthenticated)
    assert isinstance(forbidden, Forbidden)
    assert isinstance(unlisted, SpecError) and "team: 'speech'" in str(unlisted.problems)
    assert sorted(r.id for r in store.list()) == sorted([first, second])
    audited = [(e.target, e.actor) for e in store.audit.read(action="submit")]
    assert audited == [(first, member.principal.name), (second, stale.principal.name)]


async def _post_all(api: ApiServer, calls: list[tuple[str | None, Any]]) -> list[httpx.Response]:
    async with httpx.AsyncClient(base_url=api.url, timeout=30) as client:
        return await asyncio.gather(
            *(
                client.post("/v1/jobs", json=body, headers={"Authorization": f"Bearer {token}"})
                for token, body in calls
            )
        )


def test_concurrent_requests_get_their_own_answers(
    api: ApiServer, store: JobStore, tokens: dict[str, str]
) -> None:
    """Many requests at once, valid and not, each answered as it would be alone: a bad body
    or a refused principal never fails another's submission, and nothing else is written."""
    _config(store)
    good = [(tokens["member"], spec_data(name=f"ok-{i}")) for i in range(12)]
    bad: list[tuple[str | None, Any]] = [
        (tokens["viewer"], spec_data()),
        (tokens["outsider"], spec_data(team="vision")),
        (tokens["admin"], spec_data(team="speech")),
        (tokens["member"], {**spec_data(), "resources": {"gpus": -1}}),
        ("orch_nope_nope", spec_data()),
    ]
    replies = asyncio.run(_post_all(api, good + bad))
    statuses = [r.status_code for r in replies]
    assert statuses == [201] * len(good) + [403, 403, 422, 422, 401], [r.text for r in replies]
    assert "team" in replies[len(good) + 2].text
    assert "resources" in replies[len(good) + 3].text
    ids = [r.json()["ids"][0] for r in replies[: len(good)]]
    assert sorted(r.id for r in store.list()) == sorted(ids)
    assert sorted(e.target for e in store.audit.read(action="submit")) == sorted(ids)


def test_what_the_middleware_does_not_take_the_route_answers(
    api: ApiServer, store: JobStore, tokens: dict[str, str]
) -> None:
    """A query (``strict``), a body not declared JSON, a body the route refuses: each goes on
    to the route, which answers as it always did."""
    with http(api, tokens["member"]) as client:
        strict = client.post("/v1/jobs", params={"strict": "true"}, json=spec_data(name="s"))
        assert strict.status_code == 201, strict.text
        plain = client.post(
            "/v1/jobs", content=json.dumps(spec_data()), headers={"Content-Type": "text/plain"}
        )
        assert plain.status_code == 422 and plain.json()["detail"][0]["loc"] == ["body"]
        duplicate = client.post(
            "/v1/jobs",
            content=b'{"name": "a", "name": "b"}',
            headers={"Content-Type": "application/json"},
        )
        assert duplicate.status_code == 422 and "duplicate" in duplicate.text
    assert [r.id for r in store.list()] == strict.json()["ids"]
