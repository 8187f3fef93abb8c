"""Query parameters past their bounds over real HTTP: a 422 naming the parameter before any
answer starts (an event cursor Redis would refuse mid-stream, a limit Redis cannot take), and a
stream whose store fails ends with an error event, not a cut connection."""

from __future__ import annotations

from typing import Any

import pytest
from redis.exceptions import ConnectionError as RedisConnectionError

from orchestrator.api import operations
from orchestrator.api.identity import Principal
from orchestrator.api.params import cursor_problem
from orchestrator.api.server import ApiServer
from orchestrator.client import Client
from orchestrator.errors import ApiError
from orchestrator.store import JobStore
from tests.api.conftest import http, job_spec

U64 = 2**64


@pytest.mark.parametrize(
    "cursor", ["0", "0-0", "1700000000000-3", str(U64 - 1), f"{U64 - 1}-{U64 - 1}"]
)
def test_stream_ids_within_64_bits_are_cursors(cursor: str) -> None:
    assert cursor_problem(cursor) is None


@pytest.mark.parametrize(
    "cursor", ["9" * 40, str(U64), f"1-{U64}", "", "-", "1-", "-1", "1-2-3", "$", "+", "١٢"]
)
def test_anything_else_is_refused_in_words(cursor: str) -> None:
    problem = cursor_problem(cursor)
    assert problem is not None and problem.startswith("must be an event id as the events give")
    assert "each a whole number below 2**64" in problem


def _ended_job(store: JobStore) -> str:
    (job_id,) = operations.submit(store, Principal.local("root"), [job_spec()]).ids
    store.cancel(job_id)
    return job_id


def test_an_event_cursor_past_64_bits_is_422_before_the_stream(
    api: ApiServer, store: JobStore, tokens: dict[str, str]
) -> None:
    job_id = _ended_job(store)
    path = f"/v1/jobs/{job_id}/events/stream"
    with http(api, tokens["admin"]) as client:
        refused = client.get(path, params={"after": "9" * 40})
        also = client.get(path, params={"after": f"1-{U64}"})
        largest = client.get(path, params={"after": f"{U64 - 1}-{U64 - 1}"})
        every = client.get(path)
    assert refused.status_code == 422, refused.text
    (problem,) = refused.json()["detail"]
    assert problem["loc"] == ["query", "after"]
    assert "MS or MS-SEQ, each a whole number below 2**64" in problem["msg"]
    assert also.status_code == 422
    assert largest.status_code == 200 and "event: state" not in largest.text  # none after it
    assert every.status_code == 200 and "event: state" in every.text


@pytest.mark.parametrize("limit", ["9" * 20, "0", "100001", "9" * 5000, "1e3"])
def test_a_list_limit_out_of_bounds_is_422_naming_it(
    api: ApiServer, tokens: dict[str, str], limit: str
) -> None:
    with http(api, tokens["admin"]) as client:
        reply = client.get("/v1/jobs", params={"limit": limit})
    assert reply.status_code == 422, reply.text
    assert reply.json()["detail"][0]["loc"] == ["query", "limit"]


def test_a_stream_whose_store_fails_ends_with_an_error_event(
    api: ApiServer, store: JobStore, tokens: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    (job_id,) = operations.submit(store, Principal.local("root"), [job_spec()]).ids

    def down(*args: Any, **kwargs: Any) -> Any:
        raise RedisConnectionError("Connection refused")

    monkeypatch.setattr(store, "events_after", down)  # the server's store: same object
    with http(api, tokens["admin"]) as client:
        reply = client.get(f"/v1/jobs/{job_id}/events/stream")
    assert reply.status_code == 200
    assert reply.text == (
        'event: error\ndata: {"detail": "the store failed: Connection refused", "status": 503}\n\n'
    )
    with pytest.raises(ApiError) as failed:
        list(Client(api.url, tokens["admin"]).follow(job_id))
    assert failed.value.status == 503 and failed.value.problems == [
        "the store failed: Connection refused"
    ]
