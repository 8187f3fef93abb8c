"""The authorization matrix over real HTTP: each principal x each endpoint, the status it gets,
and that a refused request writes nothing.

Principals (see conftest): ``admin``; ``member`` and ``viewer`` of team vision; ``viewer-all``
(a viewer with no team: reads every team); ``outsider`` (a member of team speech); and three
that never authenticate: no token, a revoked token, a malformed one.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pytest

from orchestrator.api import operations
from orchestrator.api.identity import Principal
from orchestrator.api.server import ApiServer
from orchestrator.spec import JobSpec
from orchestrator.store import JobStore
from orchestrator.store.states import JobState
from orchestrator.store.tokens import Role
from tests.api.conftest import PRINCIPALS, http, job_spec, spec_data

ROLES = tuple(PRINCIPALS)
ROOT = Principal.local("root")
TEAMS = {"teams": [{"name": "vision", "guaranteed_gpus": 1}, {"name": "speech"}]}


@dataclass(frozen=True)
class Case:
    """One endpoint: how to call it (given the store, made ready for the call) and the status
    each principal gets."""

    method: str
    path: Callable[[JobStore], str]
    expect: dict[str, int]
    body: Callable[[JobStore], Any] | None = None


def _job(team: str = "vision", *, cancelled: bool = False) -> Callable[[JobStore], str]:
    def submit(store: JobStore) -> str:
        (job_id,) = operations.submit(store, ROOT, [job_spec(team)]).ids
        if cancelled:
            store.cancel(job_id)
        return job_id

    return submit


def _running_tuned_job(store: JobStore) -> str:
    """A tuned job of team vision that the store says is running (as a scheduler leaves it)."""
    data = {**spec_data(), "tuning": {"enabled": True, "budget": {"trials": 2}}}
    (job_id,) = operations.submit(store, ROOT, [JobSpec.model_validate(data)]).ids
    store.transition(job_id, JobState.PLACED, expect=JobState.QUEUED)
    store.transition(job_id, JobState.RUNNING, expect=JobState.PLACED)
    return job_id


def _spare_token(store: JobStore) -> str:
    return operations.create_token(store, ROOT, name="spare", role=Role.VIEWER, team=None)[1].id


def _only(*allowed: str, ok: int = 200) -> dict[str, int]:
    return {role: ok if role in allowed else 403 for role in ROLES}


def _on_vision_job(*allowed: str, ok: int = 200) -> dict[str, int]:
    """A route on a job of team vision: the outsider (of team speech) may not read it, so for
    it the job does not exist (404, never a 403 that would say it does)."""
    return {**_only(*allowed, ok=ok), "outsider": 404}


ALL = {role: 200 for role in ROLES}
READ_VISION = _on_vision_job("admin", "member", "viewer", "viewer-all")

CASES: dict[str, Case] = {
    "whoami": Case("GET", lambda s: "/v1/whoami", ALL),
    "submit": Case(
        "POST", lambda s: "/v1/jobs", _only("admin", "member", ok=201), lambda s: spec_data()
    ),
    "submit-batch": Case(
        "POST",
        lambda s: "/v1/jobs/batch",
        _only("admin", "member", ok=201),
        lambda s: {"jobs": [spec_data(), spec_data(name="other")]},
    ),
    "list": Case("GET", lambda s: "/v1/jobs", ALL),
    "list-team-speech": Case(
        "GET", lambda s: "/v1/jobs?team=speech", _only("admin", "viewer-all", "outsider")
    ),
    "show": Case("GET", lambda s: f"/v1/jobs/{_job()(s)}", READ_VISION),
    "events": Case("GET", lambda s: f"/v1/jobs/{_job()(s)}/events", READ_VISION),
    "events-stream": Case(
        "GET", lambda s: f"/v1/jobs/{_job(cancelled=True)(s)}/events/stream", READ_VISION
    ),
    "logs": Case("GET", lambda s: f"/v1/jobs/{_job()(s)}/logs", READ_VISION),
    "logs-stream": Case(
        "GET", lambda s: f"/v1/jobs/{_job(cancelled=True)(s)}/logs/stream", READ_VISION
    ),
    "metrics": Case("GET", lambda s: f"/v1/jobs/{_job()(s)}/metrics", READ_VISION),
    "cancel": Case(
        "POST", lambda s: f"/v1/jobs/{_job()(s)}/cancel", _on_vision_job("admin", "member")
    ),
    "tune": Case(
        "POST",
        lambda s: f"/v1/jobs/{_running_tuned_job(s)}/tune",
        _on_vision_job("admin", "member"),
    ),
    # a waiting job is tuned when it starts: asking for a re-tune is a conflict (409)
    "tune-queued": Case(
        "POST",
        lambda s: f"/v1/jobs/{_job()(s)}/tune",
        _on_vision_job("admin", "member", ok=409),
    ),
    "pool": Case("GET", lambda s: "/v1/pool", ALL),
    "teams": Case("GET", lambda s: "/v1/teams", ALL),
    "usage": Case("GET", lambda s: "/v1/usage", ALL),
    "usage-team-speech": Case(
        "GET", lambda s: "/v1/usage?team=speech", _only("admin", "viewer-all", "outsider")
    ),
    "teams-apply": Case("PUT", lambda s: "/v1/teams", _only("admin"), lambda s: TEAMS),
    "tokens": Case("GET", lambda s: "/v1/tokens", _only("admin")),
    "tokens-create": Case(
        "POST",
        lambda s: "/v1/tokens",
        _only("admin", ok=201),
        lambda s: {"name": "carol", "role": "member", "team": "vision"},
    ),
    "tokens-revoke": Case("DELETE", lambda s: f"/v1/tokens/{_spare_token(s)}", _only("admin")),
    "audit": Case("GET", lambda s: "/v1/audit", _only("admin")),
}


@pytest.fixture
def world(store: JobStore) -> JobStore:
    """A namespace with a team config and a published pool view (as a running scheduler
    leaves it)."""
    operations.apply_teams(store, ROOT, operations_teams())
    store.pool_view.publish({"nodes": [{"node_id": "n1", "gpus": 4, "used_gpus": 0}]}, 60_000)
    return store


def operations_teams() -> Any:
    from orchestrator.teams import parse_teams

    return parse_teams(TEAMS)


def snapshot(store: JobStore) -> dict[str, Any]:
    """Every key of the namespace with its value (streams by length), to see nothing changed."""
    client = store.client
    out: dict[str, Any] = {}
    for key in client.scan_iter(match=store.keys.pattern):
        kind = client.type(key)
        read = {
            "string": client.get,
            "hash": client.hgetall,
            "set": client.smembers,
            "zset": lambda k: client.zrange(k, 0, -1, withscores=True),
            "stream": client.xlen,
        }[kind]
        out[key] = read(key)
    return out


@pytest.mark.parametrize("role", ROLES)
@pytest.mark.parametrize("endpoint", list(CASES))
def test_each_role_at_each_endpoint(
    api: ApiServer, world: JobStore, tokens: dict[str, str], endpoint: str, role: str
) -> None:
    case = CASES[endpoint]
    path = case.path(world)
    body = case.body(world) if case.body else None
    before = snapshot(world)
    with http(api, tokens[role]) as client:
        reply = client.request(case.method, path, json=body)
    assert reply.status_code == case.expect[role], reply.text
    if reply.status_code in (403, 404):
        assert "detail" in reply.json()
        assert snapshot(world) == before  # refused: nothing written, not even an audit entry


@pytest.mark.parametrize("endpoint", list(CASES))
@pytest.mark.parametrize("credential", ["none", "revoked", "malformed", "wrong-secret"])
def test_no_valid_token_is_401_everywhere(
    api: ApiServer, world: JobStore, tokens: dict[str, str], endpoint: str, credential: str
) -> None:
    case = CASES[endpoint]
    if credential == "revoked":
        token = tokens["admin"]
        operations.revoke_token(world, ROOT, token.split("_")[1])
    elif credential == "wrong-secret":
        token = tokens["admin"][:-4] + "AAAA"
    else:
        token = {"none": None, "malformed": "not-a-token"}[credential]
    path = case.path(world)
    body = case.body(world) if case.body else None
    before = snapshot(world)
    with http(api, token) as client:
        reply = client.request(case.method, path, json=body)
    assert reply.status_code == 401, reply.text
    assert reply.headers["www-authenticate"] == "Bearer"
    assert snapshot(world) == before


def test_health_needs_no_token(api: ApiServer) -> None:
    with http(api) as client:
        assert client.get("/healthz").json() == {"status": "ok"}


def test_a_member_submitting_for_another_team_is_refused_whatever_the_batch(
    api: ApiServer, world: JobStore, tokens: dict[str, str]
) -> None:
    """The spec's team is never rewritten: a batch with one job of another team queues none."""
    body = {"jobs": [spec_data("vision"), spec_data("speech", name="sneaky")]}
    with http(api, tokens["member"]) as client:
        reply = client.post("/v1/jobs/batch", json=body)
    assert reply.status_code == 403
    assert "team 'speech'" in reply.json()["detail"]
    assert world.list() == []


def test_a_member_lists_only_its_team(
    api: ApiServer, world: JobStore, tokens: dict[str, str]
) -> None:
    operations.submit(world, ROOT, [job_spec("vision"), job_spec("speech")])
    with http(api, tokens["member"]) as client:
        teams = {j["team"] for j in client.get("/v1/jobs").json()}
    with http(api, tokens["admin"]) as client:
        every = {j["team"] for j in client.get("/v1/jobs").json()}
    assert teams == {"vision"} and every == {"vision", "speech"}


def test_mutations_are_audited_with_their_principal(
    api: ApiServer, world: JobStore, tokens: dict[str, str]
) -> None:
    with http(api, tokens["member"]) as client:
        (job_id,) = client.post("/v1/jobs", json=spec_data()).json()["ids"]
        assert client.post(f"/v1/jobs/{job_id}/cancel").json()["state"] == "cancelled"
    assert "cancelled by member" in world.get(job_id).message
    assert world.get(job_id).by == "member"
    with http(api, tokens["admin"]) as client:
        entries = client.get("/v1/audit").json()
    mine = [
        (e["actor"], e["role"], e["team"], e["action"]) for e in entries if e["target"] == job_id
    ]
    assert mine == [
        ("member", "member", "vision", "submit"),
        ("member", "member", "vision", "cancel"),
    ]


def test_the_pool_view_shows_a_member_only_its_teams_jobs(
    api: ApiServer, world: JobStore, tokens: dict[str, str]
) -> None:
    view = {
        "nodes": [{"node_id": "n1", "gpus": 4, "used_gpus": 2}],
        "jobs": {"vis-1": ["n1"], "sp-1": ["n1"]},
        "job_teams": {"vis-1": "vision", "sp-1": "speech"},
    }
    world.pool_view.publish(view, 60_000)
    seen = {}
    for role in ("admin", "viewer-all", "member", "viewer", "outsider"):
        with http(api, tokens[role]) as client:
            reply = client.get("/v1/pool").json()
        seen[role] = set(reply["jobs"])
        assert set(reply["job_teams"]) == seen[role]
        assert reply["nodes"] == view["nodes"]  # the pool itself is no secret
    assert seen["admin"] == seen["viewer-all"] == {"vis-1", "sp-1"}
    assert seen["member"] == seen["viewer"] == {"vis-1"} and seen["outsider"] == {"sp-1"}
    # a view from a scheduler that did not say whose jobs they are shows a member none
    world.pool_view.publish({"nodes": [], "jobs": {"vis-1": ["n1"]}}, 60_000)
    with http(api, tokens["member"]) as client:
        assert client.get("/v1/pool").json()["jobs"] == {}


def test_a_token_for_a_team_the_config_does_not_name_follows_allow_unlisted(
    api: ApiServer, world: JobStore, tokens: dict[str, str]
) -> None:
    """A new team's first member: allowed while the team config accepts unlisted teams (the
    default), refused, naming the team and the setting, once it does not."""
    before = world.tokens.list()
    with http(api, tokens["admin"]) as client:
        new = {"name": "eve", "role": "member", "team": "nlp"}
        made = client.post("/v1/tokens", json=new)
        assert made.status_code == 201, made.text
        assert made.json()["info"]["team"] == "nlp"
        with http(api, made.json()["token"]) as eve:  # and it acts for that team
            assert eve.post("/v1/jobs", json=spec_data("nlp")).status_code == 201
        strict = {**TEAMS, "allow_unlisted": False}
        assert client.put("/v1/teams", json=strict).status_code == 200
        reply = client.post("/v1/tokens", json={**new, "name": "frank"})
        assert reply.status_code == 422, reply.text
        assert (
            "team 'nlp' is not in the team config, which refuses unlisted teams "
            "(allow_unlisted: false); listed: speech, vision"
        ) in reply.text
        ok = client.post("/v1/tokens", json={"name": "eve", "role": "viewer", "team": "speech"})
        assert ok.status_code == 201, ok.text
    assert len(world.tokens.list()) == len(before) + 2


def test_a_token_revoked_after_use_acts_no_more(
    api: ApiServer, world: JobStore, tokens: dict[str, str]
) -> None:
    """A token verified a moment ago lets a body be read without reading the token again
    (orchestrator.api.auth), but nothing is done with it once revoked: every route answers
    401 from the next request on, and nothing is written."""
    token = tokens["member"]
    with http(api, token) as client:
        assert client.post("/v1/jobs", json=spec_data()).status_code == 201
        operations.revoke_token(world, ROOT, token.split("_")[1])
        before = snapshot(world)
        calls = [
            ("POST", "/v1/jobs", spec_data()),
            ("POST", "/v1/jobs/batch", {"jobs": [spec_data()]}),
            ("POST", "/v1/tokens", {"name": "eve", "role": "admin"}),
            ("GET", "/v1/jobs", None),
        ]
        for method, path, body in calls:
            reply = client.request(method, path, json=body)
            assert reply.status_code == 401, (path, reply.text)
            assert reply.headers["www-authenticate"] == "Bearer"
    assert snapshot(world) == before


def test_a_recently_verified_token_is_still_held_to_its_role(
    api: ApiServer, world: JobStore, tokens: dict[str, str]
) -> None:
    """The second request of a token (taken as verified before its body is read) is judged
    exactly as the first: a viewer may not submit, a member not for another team."""
    before = snapshot(world)
    for role, team, status in (("viewer", "vision", 403), ("member", "speech", 403)):
        with http(api, tokens[role]) as client:
            for _ in range(2):
                reply = client.post("/v1/jobs", json=spec_data(team))
                assert reply.status_code == status, reply.text
    assert snapshot(world) == before


JOB_ROUTES = [
    ("GET", ""),
    ("GET", "/events"),
    ("GET", "/events/stream"),
    ("GET", "/logs"),
    ("GET", "/logs/stream"),
    ("GET", "/metrics"),
    ("POST", "/cancel"),
    ("POST", "/tune"),
]


@pytest.mark.parametrize(("method", "suffix"), JOB_ROUTES)
def test_another_teams_job_is_not_found_exactly_as_a_missing_one(
    api: ApiServer, world: JobStore, tokens: dict[str, str], method: str, suffix: str
) -> None:
    """By id or by name, a job of team vision answers the outsider what a job that does not
    exist answers (404, the same body but for the reference), so it learns nothing; an admin
    still reaches it."""
    job_id = operations.submit(world, ROOT, [job_spec("vision", name="secret-plan")]).ids[0]
    world.cancel(job_id)  # ended: a stream answers at once, and nothing can change it now
    before = snapshot(world)
    with http(api, tokens["outsider"]) as client:
        replies = {
            ref: client.request(method, f"/v1/jobs/{ref}{suffix}")
            for ref in (job_id, "secret-plan", "vision-nosuch-0000", "no-such-plan")
        }
    for ref, reply in replies.items():
        assert reply.status_code == 404, (ref, reply.text)
        assert reply.json() == {"detail": f"no job matches {ref!r} (see `orch list`)"}
    assert snapshot(world) == before
    with http(api, tokens["admin"]) as client:
        assert client.get(f"/v1/jobs/{job_id}").status_code == 200
        assert client.get("/v1/jobs/secret-plan").json()["job"]["id"] == job_id


def test_a_name_two_teams_use_names_the_callers_own_job(
    api: ApiServer, world: JobStore, tokens: dict[str, str]
) -> None:
    """A name shared with another team's job is the caller's own job, not a conflict listing
    the other team's ids; an admin, who reads both, is asked for the id."""
    vision, speech = (
        operations.submit(world, ROOT, [job_spec(team, name="shared")]).ids[0]
        for team in ("vision", "speech")
    )
    with http(api, tokens["outsider"]) as client:
        assert client.get("/v1/jobs/shared").json()["job"]["id"] == speech
    with http(api, tokens["member"]) as client:
        assert client.get("/v1/jobs/shared").json()["job"]["id"] == vision
    with http(api, tokens["admin"]) as client:
        reply = client.get("/v1/jobs/shared")
    assert reply.status_code == 409 and vision in reply.text and speech in reply.text
