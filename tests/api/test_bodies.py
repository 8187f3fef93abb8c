"""Bad bodies over real HTTP: 422 naming each field, and nothing written."""

from __future__ import annotations

from typing import Any

import pytest

from orchestrator.api.server import ApiServer
from orchestrator.store import JobStore
from tests.api.conftest import http, spec_data
from tests.api.test_authorization import snapshot


def _with(path: str, value: Any) -> dict[str, Any]:
    """The example job with the field at dotted ``path`` set to ``value`` (``...`` deletes)."""
    body = spec_data()
    *parents, leaf = path.split(".")
    node = body
    for part in parents:
        node = node.setdefault(part, {})
    if value is ...:
        node.pop(leaf, None)
    else:
        node[leaf] = value
    return body


BAD_JOBS = {
    "sla.latency.max_ms": _with("sla.latency.max_ms", -5),
    "class": _with("class", "batch"),
    "team": _with("team", "Vision Team!"),
    "name": _with("name", ...),
    "run.micro_batch": _with("run.micro_batch", "many"),
    "run.colour": _with("run.colour", "blue"),
    "resources.gpus.min": _with("resources.gpus.min", 0),
}


@pytest.mark.parametrize("field", list(BAD_JOBS))
def test_a_bad_job_is_422_naming_the_field_and_writes_nothing(
    api: ApiServer, store: JobStore, tokens: dict[str, str], field: str
) -> None:
    before = snapshot(store)
    with http(api, tokens["admin"]) as client:
        reply = client.post("/v1/jobs", json=BAD_JOBS[field])
        batch = client.post("/v1/jobs/batch", json={"jobs": [spec_data(), BAD_JOBS[field]]})
    assert reply.status_code == 422, reply.text
    named = {".".join(str(p) for p in e["loc"][1:]) for e in reply.json()["detail"]}
    assert field in named, named
    assert batch.status_code == 422
    batch_named = {".".join(str(p) for p in e["loc"][1:]) for e in batch.json()["detail"]}
    assert f"jobs.1.{field}" in batch_named, batch_named
    assert snapshot(store) == before  # the good job of the batch was not queued either


@pytest.mark.parametrize(
    "body",
    [None, "not json", [], {"jobs": []}, {"jobs": "x"}],
    ids=["empty", "text", "list", "no-jobs", "jobs-not-a-list"],
)
def test_malformed_batches_are_422(
    api: ApiServer, store: JobStore, tokens: dict[str, str], body: Any
) -> None:
    with http(api, tokens["admin"]) as client:
        if isinstance(body, str):
            reply = client.post("/v1/jobs/batch", content=body)
        else:
            reply = client.post("/v1/jobs/batch", json=body)
    assert reply.status_code == 422
    assert store.list() == []


def test_a_job_the_team_config_refuses_is_422_and_writes_nothing(
    api: ApiServer, store: JobStore, tokens: dict[str, str]
) -> None:
    with http(api, tokens["admin"]) as client:
        applied = client.put(
            "/v1/teams", json={"teams": [{"name": "speech"}], "allow_unlisted": False}
        )
        assert applied.status_code == 200
        reply = client.post("/v1/jobs", json=spec_data("vision"))
    assert reply.status_code == 422
    (problem,) = reply.json()["detail"]
    assert "team: 'vision' is not a configured team" in problem["msg"]
    assert store.list() == []


@pytest.mark.parametrize(
    "body",
    [
        {"name": "Bad Name", "role": "member", "team": "vision"},
        {"name": "carol", "role": "root"},
        {"name": "carol", "role": "member"},
        {"name": "carol", "role": "viewer", "team": "vision", "extra": 1},
    ],
    ids=["name", "role", "member-without-team", "unknown-field"],
)
def test_a_bad_token_request_is_422_and_makes_no_token(
    api: ApiServer, store: JobStore, tokens: dict[str, str], body: dict[str, Any]
) -> None:
    before = store.tokens.list()
    with http(api, tokens["admin"]) as client:
        reply = client.post("/v1/tokens", json=body)
    assert reply.status_code == 422, reply.text
    assert store.tokens.list() == before


def test_a_bad_team_config_is_422_naming_the_field(
    api: ApiServer, store: JobStore, tokens: dict[str, str]
) -> None:
    with http(api, tokens["admin"]) as client:
        reply = client.put("/v1/teams", json={"teams": [{"name": "vision", "weight": -1}]})
    assert reply.status_code == 422
    assert ["body", "teams", 0, "weight"] in [e["loc"] for e in reply.json()["detail"]]
    assert store.teams() is None
