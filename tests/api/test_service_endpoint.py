"""A service's endpoint over a real API server and a real Redis, with no pool: what the ingress
answers on its own when no replica answers in time, when none is ready, and to callers who may
not reach the service. The replica here is a real ``ReplicaQueue`` that joins and never
answers (a stuck replica); the answered path is the e2e test's (tests/e2e)."""

from __future__ import annotations

import time

from orchestrator.api.server import ApiServer
from orchestrator.spec import parse_spec
from orchestrator.store import JobStore
from orchestrator.store.ingress import ReplicaQueue
from orchestrator.store.states import JobState
from tests.api.conftest import http


def _running_service(store: JobStore, timeout_ms: float | None = 300) -> str:
    serve = {"rate_rps": 10, "endpoint": True, **({"timeout_ms": timeout_ms} if timeout_ms else {})}
    spec = parse_spec(
        {
            "name": "svc",
            "team": "vision",
            "class": "interactive",
            "workload": {"name": "infer", "args": {"model": "mlp"}},
            "sla": {"latency": {"percentile": 99, "max_ms": 50}},
            "run": {"duration_s": 60},
            "serve": serve,
        }
    )
    job_id = store.submit(spec).id
    store.transition(job_id, JobState.PLACED, expect=JobState.QUEUED)
    store.transition(job_id, JobState.RUNNING, expect=JobState.PLACED)
    return job_id


def test_no_answer_in_time_is_504_and_counted_as_a_failure(
    store: JobStore, api: ApiServer, tokens: dict[str, str], redis_url: str
) -> None:
    job_id = _running_service(store, timeout_ms=300)
    with http(api, tokens["member"]) as c:
        # running, no replica ready: 503 at once, with Retry-After
        t0 = time.monotonic()
        r = c.post(f"/v1/services/{job_id}/infer", json={"input": [0.0]})
        assert r.status_code == 503 and r.headers["Retry-After"] == "1", r.text
        assert time.monotonic() - t0 < 5
        stuck = ReplicaQueue(redis_url, store.namespace, job_id)
        stuck.join("stuck", {"input": {"shape": [2], "dtype": "float32", "high": None}})
        time.sleep(0.3)  # past the endpoint's memory of "no replica ready"
        t0 = time.monotonic()
        r = c.post(f"/v1/services/{job_id}/infer", json={"input": [1.0, 2.0]})
        took = time.monotonic() - t0
        assert r.status_code == 504 and "0.3 s" in r.json()["detail"], r.text
        assert 0.25 <= took < 10
        figures = c.get(f"/v1/services/{job_id}").json()["figures"]
        assert figures["counts"]["timeout"] == 1 and figures["counts"]["unavailable"] == 1
        assert figures["windows_met"] == 0
        stuck.close()


def test_a_job_that_is_not_a_service_or_not_callable_is_refused(
    store: JobStore, api: ApiServer, tokens: dict[str, str]
) -> None:
    job_id = _running_service(store)
    plain = parse_spec(
        {
            "name": "train",
            "team": "vision",
            "class": "bulk",
            "workload": {"name": "mlp"},
            "sla": {"throughput": {"min_samples_per_s": 1}},
            "run": {"steps": 10},
        }
    )
    other = store.submit(plain).id
    with http(api, tokens["member"]) as c:
        r = c.post(f"/v1/services/{other}/infer", json={"input": [0.0]})
        assert r.status_code == 409 and "without endpoint: false" in r.json()["detail"]
    with http(api, tokens["viewer"]) as c:  # reads, never calls
        assert c.post(f"/v1/services/{job_id}/infer", json={"input": [0.0]}).status_code == 403
        assert c.get(f"/v1/services/{job_id}").status_code == 200
    with http(api, tokens["outsider"]) as c:  # another team: not found, as a missing one
        assert c.post(f"/v1/services/{job_id}/infer", json={"input": [0.0]}).status_code == 404
        made = c.post(f"/v1/services/{job_id}/tokens", json={"name": "x"})
        assert made.status_code == 404
    with http(api, tokens["admin"]) as c:  # service tokens are made for their service only
        r = c.post("/v1/tokens", json={"name": "x", "role": "service", "team": "vision"})
        assert r.status_code == 422 and "/v1/services/" in r.text
    with http(api) as c:
        assert c.post(f"/v1/services/{job_id}/infer", json={"input": [0.0]}).status_code == 401
