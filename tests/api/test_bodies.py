"""Bad bodies over real HTTP: 422 naming each field (or the key or limit of a JSON document the
CLI's loader refuses too), an answer that always encodes, and nothing written."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx
import pytest

from orchestrator.api.server import ApiServer
from orchestrator.errors import SpecError
from orchestrator.inputs import load_document
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


def test_a_plan_its_model_cannot_split_is_422_naming_the_field(
    api: ApiServer, store: JobStore, tokens: dict[str, str]
) -> None:
    body = {**spec_data(), "workload": {"name": "gpt", "args": {"n_layer": 3}}}
    body["resources"] = {"gpus": 2}
    body["run"] = {**body["run"], "plan": {"pp": 2}}
    with http(api, tokens["admin"]) as client:
        reply = client.post("/v1/jobs", json=body)
    assert reply.status_code == 422, reply.text
    (problem,) = reply.json()["detail"]
    assert "run.plan.pp must divide the model's 3 blocks, got 2 (allowed: 1, 3)" in problem["msg"]
    assert store.list() == []


def test_an_entry_point_the_operator_did_not_allow_is_422_and_writes_nothing(
    api: ApiServer, store: JobStore, tokens: dict[str, str]
) -> None:
    """The issue's hostile submission: a member naming subprocess:call as its workload."""
    body = {**spec_data("vision"), "workload": {"entry": "subprocess:call", "args": {}}}
    with http(api, tokens["member"]) as client:
        reply = client.post("/v1/jobs", json=body)
    assert reply.status_code == 422
    (problem,) = reply.json()["detail"]
    assert "module 'subprocess' is not one team 'vision' may run" in problem["msg"]
    assert store.list() == []
    with http(api, tokens["admin"]) as client:  # the operator allows the team's own package
        teams = {"teams": [{"name": "vision", "entry_modules": ["vision_models"]}]}
        assert client.put("/v1/teams", json=teams).status_code == 200
    with http(api, tokens["member"]) as client:
        body["workload"] = {"entry": "vision_models.resnet:build"}
        assert client.post("/v1/jobs", json=body).status_code == 201
        body["workload"] = {"entry": "vision_models_evil:build"}  # a prefix is not a package
        assert client.post("/v1/jobs", json=body).status_code == 422


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


def _raw(client: httpx.Client, method: str, path: str, text: str) -> httpx.Response:
    return client.request(method, path, content=text, headers={"content-type": "application/json"})


@pytest.mark.parametrize("literal", ["NaN", "Infinity", "-Infinity"])
def test_a_non_finite_number_is_422_naming_the_field_and_encodes(
    api: ApiServer, store: JobStore, tokens: dict[str, str], literal: str
) -> None:
    job = json.dumps(_with("sla.latency.max_ms", 12345.5)).replace("12345.5", literal)
    teams = '{"teams": [{"name": "vision", "weight": ' + literal + "}]}"
    with http(api, tokens["admin"]) as client:
        replies = [
            _raw(client, "POST", "/v1/jobs", job),
            _raw(client, "POST", "/v1/jobs/batch", f'{{"jobs": [{job}]}}'),
            _raw(client, "PUT", "/v1/teams", teams),
        ]
    fields = [
        ["body", "sla", "latency", "max_ms"],
        ["body", "jobs", 0, "sla", "latency", "max_ms"],
        ["body", "teams", 0, "weight"],
    ]
    for reply, field in zip(replies, fields, strict=True):
        assert reply.status_code == 422, reply.text
        (problem,) = reply.json()["detail"]
        assert problem["loc"] == field and problem["msg"] == "Input should be a finite number"
        assert problem["input"] in ("nan", "inf", "-inf")  # shown as text: JSON has no NaN
    assert store.list() == [] and store.teams() is None


@pytest.mark.parametrize(
    ("method", "path", "text", "key"),
    [
        ("POST", "/v1/jobs", '{"name": "a", "name": "b"}', "name"),
        (
            "POST",
            "/v1/jobs",
            '{"name": "a", "sla": {"latency": {"max_ms": 1, "max_ms": 2}}}',
            "max_ms",
        ),
        ("POST", "/v1/jobs/batch", '{"jobs": [], "jobs": []}', "jobs"),
        ("PUT", "/v1/teams", '{"teams": [{"name": "vision", "name": "speech"}]}', "name"),
        ("POST", "/v1/tokens", '{"name": "carol", "role": "viewer", "role": "admin"}', "role"),
    ],
)
def test_a_duplicate_key_is_422_naming_the_key_as_the_cli_refuses_it(
    api: ApiServer,
    store: JobStore,
    tokens: dict[str, str],
    tmp_path: Path,
    method: str,
    path: str,
    text: str,
    key: str,
) -> None:
    before = snapshot(store)
    with http(api, tokens["admin"]) as client:
        reply = _raw(client, method, path, text)
    assert reply.status_code == 422, reply.text
    assert reply.json()["detail"] == [
        {"type": "json_invalid", "loc": ["body"], "msg": f"not valid JSON: duplicate key {key!r}"}
    ]
    assert snapshot(store) == before and store.teams() is None
    file = tmp_path / "same.json"  # the CLI's loader refuses it in the same words
    file.write_text(text)
    with pytest.raises(SpecError, match=f"not valid JSON: duplicate key {key!r}"):
        load_document(file)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("[" * 40 + "]" * 40, "nested more than 32 levels deep"),
        ('{"gpus": ' + "9" * 41 + "}", "integer of 41 characters; at most 40 allowed"),
        ('{"name": ', "not valid JSON: line 1, column 10: Expecting value"),
    ],
    ids=["deep", "long-integer", "truncated"],
)
def test_the_cli_limits_on_json_hold_for_bodies(
    api: ApiServer, tokens: dict[str, str], text: str, message: str
) -> None:
    with http(api, tokens["admin"]) as client:
        reply = _raw(client, "POST", "/v1/jobs", text)
    assert reply.status_code == 422, reply.text
    assert message in reply.json()["detail"][0]["msg"]


def test_a_body_that_is_not_utf8_is_422(api: ApiServer, tokens: dict[str, str]) -> None:
    with http(api, tokens["admin"]) as client:
        as_json = client.post(
            "/v1/jobs", content=b'{"name": "\xff"}', headers={"content-type": "application/json"}
        )
        as_text = client.post(
            "/v1/jobs", content=b"\xff\xfe", headers={"content-type": "text/plain"}
        )
    assert as_json.status_code == 422 and "not UTF-8" in as_json.json()["detail"][0]["msg"]
    assert as_text.status_code == 422  # echoed as text, not a failure to encode bytes
    assert as_text.json()["detail"][0]["input"] == "\ufffd\ufffd"


def test_steps_within_the_warm_up_are_422_naming_both_fields(
    api: ApiServer, store: JobStore, tokens: dict[str, str]
) -> None:
    """``run.steps`` at or under the warm-up (the default 3 when not given) could measure
    nothing: refused at submission, as the CLI refuses it, not at placement."""
    short = {**spec_data(), "run": {"steps": 1}}
    equal = {**spec_data(), "run": {"steps": 5, "warmup_steps": 5}}
    before = snapshot(store)
    with http(api, tokens["member"]) as client:
        replies = [
            client.post("/v1/jobs", json=short),
            client.post("/v1/jobs/batch", json={"jobs": [spec_data(name="fine"), short]}),
            client.post("/v1/jobs", json=equal),
        ]
    messages = [[e["msg"] for e in r.json()["detail"]] for r in replies]
    assert [r.status_code for r in replies] == [422, 422, 422], messages
    for got, (steps, warmup) in zip(messages, [(1, 3), (1, 3), (5, 5)], strict=True):
        wanted = f"run.steps ({steps}) must be greater than run.warmup_steps ({warmup})"
        assert any(wanted in m for m in got), got
    assert snapshot(store) == before


LONE = "\ud800"
"""Half a surrogate pair: JSON's ``"\\ud800"`` parses to it, and UTF-8 cannot encode it."""
ODD_TEXTS = {
    "job-name": ("POST", "/v1/jobs", json.dumps({**spec_data(), "name": LONE})),
    "job-key": ("POST", "/v1/jobs", json.dumps({**spec_data(), LONE: 1})),
    "job-deep": (
        "POST",
        "/v1/jobs",
        json.dumps({**spec_data(), "workload": {"name": "mlp", "args": {"x": [LONE]}}}),
    ),
    "batch": ("POST", "/v1/jobs/batch", json.dumps({"jobs": [{**spec_data(), "team": LONE}]})),
    "teams-name": ("PUT", "/v1/teams", json.dumps({"teams": [{"name": LONE}]})),
    "teams-key": ("PUT", "/v1/teams", json.dumps({"teams": [{"name": "vision", LONE: 1}]})),
    "low-half": ("PUT", "/v1/teams", json.dumps({"teams": [{"name": "\udc00"}]})),
}
ODD_BYTES = {
    "not-utf8": b'{"name": "\xff"}',
    "encoded-surrogate": b'{"name": "\xed\xa0\x80"}',  # UTF-8 forbids encoding one
    "overlong": b'{"name": "\xc0\xaf"}',
    "cut-short": b'{"name": "\xe2\x82"}',
}


@pytest.mark.parametrize("case", list(ODD_TEXTS))
def test_a_lone_surrogate_is_422_naming_it_and_writes_nothing(
    api: ApiServer, store: JobStore, tokens: dict[str, str], case: str
) -> None:
    method, path, text = ODD_TEXTS[case]
    assert "\\ud" in text or "\\udc" in text  # the JSON escape, sent as ASCII
    before = snapshot(store)
    with http(api, tokens["admin"]) as client:
        reply = _raw(client, method, path, text)
    assert reply.status_code == 422, reply.text
    (problem,) = reply.json()["detail"]
    assert "half of a UTF-16 surrogate pair" in problem["msg"]
    assert snapshot(store) == before and store.teams() is None


def test_a_lone_surrogate_in_a_json_file_is_refused_by_the_cli_too(tmp_path: Path) -> None:
    file = tmp_path / "job.json"
    file.write_text(json.dumps({**spec_data(), "name": LONE}))
    with pytest.raises(SpecError, match=r"\\ud800 is half of a UTF-16 surrogate pair"):
        load_document(file)


@pytest.mark.parametrize("case", list(ODD_BYTES))
@pytest.mark.parametrize(("method", "path"), [("POST", "/v1/jobs"), ("PUT", "/v1/teams")])
@pytest.mark.parametrize("content_type", ["application/json", "text/plain", None])
def test_bytes_that_are_not_utf8_are_4xx_with_a_json_error(
    api: ApiServer,
    store: JobStore,
    tokens: dict[str, str],
    case: str,
    method: str,
    path: str,
    content_type: str | None,
) -> None:
    headers = {"content-type": content_type} if content_type else {}
    before = snapshot(store)
    with http(api, tokens["admin"]) as client:
        reply = client.request(method, path, content=ODD_BYTES[case], headers=headers)
    assert 400 <= reply.status_code < 500, reply.text
    assert reply.headers["content-type"] == "application/json"
    assert reply.json()["detail"]
    assert snapshot(store) == before and store.teams() is None


def test_a_refusal_quoting_a_lone_surrogate_still_encodes() -> None:
    """Whatever a message quotes, the refusal is sent (escaped), never a 500."""
    from orchestrator.api.statuses import refusal
    from orchestrator.errors import JobNotFound

    reply = refusal(JobNotFound(LONE))
    assert reply.status_code == 404
    assert json.loads(reply.body)["detail"] == "no job matches '\\ud800' (see `orch list`)"
    spec = refusal(SpecError("body", [f"name {LONE}"]))
    assert json.loads(spec.body)["detail"][0]["msg"] == "name \\ud800"


def test_guarantees_past_the_pool_are_refused(
    api: ApiServer, store: JobStore, tokens: dict[str, str]
) -> None:
    huge = {"teams": [{"name": f"t{i}", "guaranteed_gpus": 1_000_000} for i in range(5)]}
    with http(api, tokens["admin"]) as client:
        unknown_pool = client.put("/v1/teams", json=huge)
        store.pool_view.publish({"nodes": [{"node_id": "n1", "gpus": 4}]}, 60_000)
        known_pool = client.put("/v1/teams", json=huge)
        fits = client.put("/v1/teams", json={"teams": [{"name": "t0", "guaranteed_gpus": 4}]})
    assert unknown_pool.status_code == 422
    (problem,) = unknown_pool.json()["detail"]
    assert problem["msg"].startswith(
        "teams.guaranteed_gpus add up to 5,000,000; at most 1,000,000 in all while the pool's "
        "size is unknown"
    )
    assert known_pool.status_code == 422
    assert known_pool.json()["detail"][0]["msg"] == (
        "teams.guaranteed_gpus add up to 5,000,000, more than the pool's 4 GPUs; "
        "guarantee at most 4 in all"
    )
    assert fits.status_code == 200
    config = store.teams()
    assert config is not None and [t.name for t in config.teams] == ["t0"]
