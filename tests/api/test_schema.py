"""Schemathesis over the served OpenAPI spec: whatever a client sends to any operation, as an
admin, as a member, with a forged token or with none, no answer is a 5xx; and a body holding
``NaN`` or ``Infinity`` anywhere (JSON has neither, so schemathesis never sends one) is a 422
that encodes.

Schemathesis' pytest plugin (``from_fixture``) does not run under this pytest, so each
operation's strategy is drawn with Hypothesis directly, against the live server.
"""

from __future__ import annotations

import copy
import json
import math
from typing import Any

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from orchestrator.api import operations
from orchestrator.api.identity import Principal
from orchestrator.api.server import ApiServer
from orchestrator.store import JobStore
from tests.api.conftest import http, job_spec, spec_data

schemathesis = pytest.importorskip("schemathesis")
from schemathesis.generation import GenerationMode  # noqa: E402 - after the skip
from schemathesis.transport.requests import ManagedCookiesSession  # noqa: E402

EXAMPLES = 12
FORGED = "orch_00000000_forged"


def _operations(api: ApiServer) -> list[Any]:
    """Every operation of the served spec."""
    loaded = schemathesis.openapi.from_url(f"{api.url}/openapi.json")
    return [result.ok() for result in loaded.get_all_operations()]


def _ended_job(store: JobStore) -> str:
    """A cancelled job: the streams of its events and output end at once."""
    (job_id,) = operations.submit(store, Principal.local("root"), [job_spec(name="ended")]).ids
    store.cancel(job_id)
    return job_id


@pytest.mark.parametrize("mode", ["positive", "negative"])
def test_no_operation_answers_5xx(
    api: ApiServer, store: JobStore, tokens: dict[str, str], mode: str
) -> None:
    operations_ = _operations(api)
    assert len(operations_) >= 16
    ended = _ended_job(store)
    headers = [{"Authorization": f"Bearer {tokens[who]}"} for who in ("admin", "member")]
    headers += [{"Authorization": f"Bearer {FORGED}"}, {}]
    # One session for every call, its connections kept open and reused (a session per call,
    # schemathesis' default, opened about 1,100 of them): schemathesis' own kind, which follows
    # redirects on the same host only, as its default does, and drops cookies after each call,
    # so each call is still made with its own headers and nothing else.
    with ManagedCookiesSession() as session:
        for operation in operations_:
            _no_server_error(api, session, operation, GenerationMode(mode), headers, ended)


def _no_server_error(
    api: ApiServer,
    session: ManagedCookiesSession,
    operation: Any,
    mode: Any,
    headers: list[dict[str, str]],
    ended: str,
) -> None:
    """Draw calls of ``operation`` (``mode``: valid by the schema, or not) and make each with
    every one of ``headers`` through ``session``: none is a 5xx, and none without a valid token
    changes anything."""
    # A generated job never ends, so a stream is followed on the ended job only (its cursor
    # and other parameters are still drawn).
    fixed = {"ref": ended} if operation.path.endswith("/stream") else None
    drawn = [operation.query, operation.body] + ([] if fixed else [operation.path_parameters])
    if mode is GenerationMode.NEGATIVE and not any(len(p) for p in drawn):
        return  # nothing to break but the token, which each call sets itself

    @given(case=operation.as_strategy(mode, path_parameters=fixed))
    @settings(
        max_examples=EXAMPLES,
        deadline=None,
        suppress_health_check=list(HealthCheck),
    )
    def check(case: Any) -> None:
        for auth in headers:
            response = case.call(base_url=api.url, session=session, headers=auth, timeout=30)
            assert response.status_code < 500, (case.method, case.path, response.text)
            if not auth or auth["Authorization"].endswith(FORGED):
                assert response.status_code not in (200, 201) or case.method == "GET", case.path

    check()


NON_FINITE = st.sampled_from([math.nan, math.inf, -math.inf])
BODIES: dict[tuple[str, str], Any] = {
    ("POST", "/v1/jobs"): spec_data(),
    ("POST", "/v1/jobs/batch"): {"jobs": [spec_data(), spec_data(name="other")]},
    ("PUT", "/v1/teams"): {"teams": [{"name": "vision", "weight": 2.0, "guaranteed_gpus": 1}]},
    ("POST", "/v1/tokens"): {"name": "carol", "role": "viewer"},
}
"""A valid body of each route that takes one."""


def _places(data: Any, at: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """The path of every value in ``data`` (the whole of it included)."""
    places = [at]
    if isinstance(data, dict):
        for key, value in data.items():
            places += _places(value, (*at, key))
    elif isinstance(data, list):
        for i, value in enumerate(data):
            places += _places(value, (*at, i))
    return places


@st.composite
def _poisoned(draw: st.DrawFn, body: Any) -> Any:
    """``body`` with one of its values (or a new field) made a non-finite number, or a list or
    mapping holding one."""
    body = copy.deepcopy(body)
    place = draw(st.sampled_from([p for p in _places(body) if p]))
    number: Any = draw(NON_FINITE | st.lists(NON_FINITE, min_size=1, max_size=2))
    bad = draw(st.sampled_from([number, {"x": number}]))
    *parents, last = place
    node = body
    for part in parents:
        node = node[part]
    if isinstance(node, dict) and draw(st.booleans()):
        last = draw(st.sampled_from(["extra", "max_ms", "weight", "args"]))
    node[last] = bad
    return body


@pytest.mark.parametrize(("method", "path"), list(BODIES), ids=lambda v: str(v))
def test_a_non_finite_number_anywhere_is_422_and_encodes(
    api: ApiServer, store: JobStore, tokens: dict[str, str], method: str, path: str
) -> None:
    with http(api, tokens["admin"]) as client:

        @given(body=_poisoned(BODIES[method, path]))
        @settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
        def refused(body: Any) -> None:
            text = json.dumps(body)  # NaN, Infinity, -Infinity: what Python's parser reads
            reply = client.request(
                method, path, content=text, headers={"content-type": "application/json"}
            )
            assert reply.status_code == 422, (text, reply.text)
            assert reply.json()["detail"], reply.text  # JSON that says why

        refused()
    assert store.list() == [] and store.teams() is None


def test_unauthenticated_bodies_are_refused_before_validation(api: ApiServer) -> None:
    with httpx.Client(base_url=api.url, timeout=30) as client:
        for (method, path), body in BODIES.items():
            reply = client.request(method, path, content=json.dumps({**body, "x": math.nan}))
            assert reply.status_code == 401, (path, reply.text)
