"""A service with an endpoint on the pool: real HTTP clients' requests, through the API's
ingress, answered by the service's replica; its figures measured where the requests arrived;
its own clients' tokens reaching it and nothing else; bad requests refused, never hung."""

from __future__ import annotations

import concurrent.futures
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from orchestrator.api import operations
from orchestrator.api.identity import Principal
from orchestrator.api.server import ApiServer, start
from orchestrator.spec import parse_spec
from orchestrator.store.states import JobState
from orchestrator.store.tokens import Role
from tests.e2e.conftest import Orch

DONE = {JobState.FINISHED, JobState.FAILED, JobState.CANCELLED}


@pytest.fixture
def api(orch: Orch) -> Iterator[ApiServer]:
    server = start(orch.store, "127.0.0.1:0")
    yield server
    server.stop()


def _client(api: ApiServer, token: str) -> httpx.Client:
    return httpx.Client(base_url=api.url, headers={"Authorization": f"Bearer {token}"}, timeout=30)


def _token(orch: Orch, name: str, role: Role, team: str | None) -> str:
    root = Principal.local("root")
    return operations.create_token(orch.store, root, name=name, role=role, team=team)[0]


def _service(orch: Orch, name: str = "svc", duration_s: float = 60) -> str:
    spec = parse_spec(
        {
            "name": name,
            "team": "e2e",
            "class": "interactive",
            "workload": {"name": "infer", "args": {"model": "mlp"}},
            "sla": {"latency": {"percentile": 99, "max_ms": 2000}},
            "run": {"micro_batch": 8, "duration_s": duration_s},
            "serve": {"rate_rps": 20, "max_delay_ms": 5, "endpoint": True},
        }
    )
    return orch.store.submit(spec).id


def _ready(c: httpx.Client, job_id: str, timeout_s: float = 120) -> dict[str, Any]:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        r = c.get(f"/v1/services/{job_id}")
        assert r.status_code == 200, r.text
        if r.json()["ready_replicas"] >= 1:
            return dict(r.json())
        time.sleep(0.3)
    pytest.fail(f"service {job_id} never had a ready replica")


def test_real_clients_requests_are_answered_and_measured_where_they_arrive(
    orch: Orch, api: ApiServer
) -> None:
    member = _token(orch, "alice", Role.MEMBER, "e2e")
    outsider = _token(orch, "mallory", Role.MEMBER, "other")
    job_id = _service(orch)
    with _client(api, member) as c:
        info = _ready(c, job_id)
        shape = info["input"]["shape"]
        assert info["input"]["dtype"] == "float32" and len(shape) == 1
        sample = [0.5] * shape[0]

        # concurrent real requests: each answered with the model's output and its timing
        def call(i: int) -> httpx.Response:
            return c.post(f"/v1/services/{job_id}/infer", json={"input": sample})

        with concurrent.futures.ThreadPoolExecutor(8) as pool:
            answers = list(pool.map(call, range(40)))
        assert [r.status_code for r in answers] == [200] * 40, answers[0].text
        outputs = [r.json()["output"] for r in answers]
        # the same input, the same answer (to rounding: batches of other sizes sum in
        # another order)
        assert all(o == pytest.approx(outputs[0], rel=1e-4, abs=1e-5) for o in outputs)
        timings = [r.json()["timing"] for r in answers]
        assert max(t["batch"] for t in timings) >= 1
        assert all(t["latency_ms"] >= t["model_ms"] > 0 for t in timings)

        # raw bytes of the advertised shape answer the same as JSON
        import struct

        raw = struct.pack(f"<{shape[0]}f", *sample)
        r = c.post(
            f"/v1/services/{job_id}/infer",
            content=raw,
            headers={"Content-Type": "application/octet-stream"},
        )
        assert r.status_code == 200, r.text
        assert r.json()["output"] == pytest.approx(outputs[0], rel=1e-4, abs=1e-5)

        # bad requests: 400 naming what is wrong, 413 past the body limit; none queued
        bad = c.post(f"/v1/services/{job_id}/infer", json={"input": [1.0, 2.0]})
        assert bad.status_code == 400 and "input" in bad.json()["detail"]
        assert "shape" in bad.json()["detail"]
        nan = c.post(f"/v1/services/{job_id}/infer", content=b'{"input": "x"}')
        assert nan.status_code == 400
        short = c.post(
            f"/v1/services/{job_id}/infer",
            content=b"\0" * 3,
            headers={"Content-Type": "application/octet-stream"},
        )
        assert short.status_code == 400 and "bytes" in short.json()["detail"]
        huge = c.post(f"/v1/services/{job_id}/infer", content=b"0" * (2 << 20))
        assert huge.status_code == 413

        # the figures: every answered request, measured at the ingress
        figures = c.get(f"/v1/services/{job_id}").json()["figures"]
        assert figures["counts"]["ok"] == 41
        assert figures["counts"]["refused"] >= 3  # the malformed ones: the caller's doing
        assert 0 < figures["p50_ms"] <= figures["p99_ms"]
        assert figures["windows"] >= 1 and figures["attainment"] is not None

    # the verdict is on the requests as the ingress measured them, over the service's life
    verdict = operations.verdict_of(orch.store, orch.store.get(job_id))
    assert verdict.met is True and "over 41 requests" in verdict.measured, verdict

    # orch load: a real open-loop client through the same endpoint, every request answered
    import json
    import os
    import subprocess
    import sys
    from pathlib import Path

    env = {**os.environ, "ORCH_API_URL": api.url, "ORCH_TOKEN": member}
    orch_bin = str(Path(sys.executable).parent / "orch")
    proc = subprocess.run(
        [orch_bin, "load", "svc", "--rate", "20", "--duration", "2", "-o", "json"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout)
    assert report["statuses"] == {"200": report["requests"]} and report["requests"] > 10, report

    # another team's member: the service is not found (as a missing one)
    with _client(api, outsider) as c:
        assert c.post(f"/v1/services/{job_id}/infer", json={"input": sample}).status_code == 404
        assert c.get(f"/v1/services/{job_id}").status_code == 404


def test_a_service_token_reaches_its_service_and_nothing_else(orch: Orch, api: ApiServer) -> None:
    member = _token(orch, "alice", Role.MEMBER, "e2e")
    job_id = _service(orch, "svc-a")
    other = _service(orch, "svc-b", duration_s=5)
    with _client(api, member) as c:
        made = c.post(f"/v1/services/{job_id}/tokens", json={"name": "web-frontend"})
        assert made.status_code == 201, made.text
        token, token_id = made.json()["token"], made.json()["info"]["id"]
        assert made.json()["info"]["role"] == "service"
        # before a replica is ready: 503 at once, with Retry-After, never a hang
        t0 = time.monotonic()
        first = c.post(f"/v1/services/{job_id}/infer", json={"input": [0.0] * 32})
        assert time.monotonic() - t0 < 10
        if first.status_code == 503:
            assert first.headers["Retry-After"] == "1"
        info = _ready(c, job_id)
    sample = [0.1] * info["input"]["shape"][0]
    with _client(api, token) as s:
        assert s.post(f"/v1/services/{job_id}/infer", json={"input": sample}).status_code == 200
        assert s.get(f"/v1/services/{job_id}").status_code == 200
        # nothing else: another service, the jobs, the pool, metrics, tokens
        assert s.post(f"/v1/services/{other}/infer", json={"input": sample}).status_code == 404
        assert s.get("/v1/jobs").status_code == 403
        assert s.get(f"/v1/jobs/{job_id}").status_code == 403
        assert s.get("/v1/pool").status_code == 403
        assert s.get("/metrics").status_code == 403
        assert s.post(f"/v1/services/{job_id}/tokens", json={"name": "x"}).status_code == 403
        assert s.post(f"/v1/jobs/{job_id}/cancel").status_code == 403
    with _client(api, member) as c:
        gone = c.delete(f"/v1/services/{job_id}/tokens/{token_id}")
        assert gone.status_code == 200, gone.text
    with _client(api, token) as s:
        assert s.post(f"/v1/services/{job_id}/infer", json={"input": sample}).status_code == 401


def test_a_teams_own_model_serves_from_its_sandbox(orch: Orch, api: ApiServer) -> None:
    """The team's model (an entry point) runs in the sandboxed child, which has no network
    and no store credential: the worker takes the requests and passes them to it."""
    member = _token(orch, "alice", Role.MEMBER, "e2e")
    spec = parse_spec(
        {
            "name": "own-svc",
            "team": "e2e",
            "class": "interactive",
            "workload": {
                "entry": "tests.e2e.paced_service:build",
                "args": {"request_ms": 1.0},
            },
            "sla": {"latency": {"percentile": 99, "max_ms": 2000}},
            "run": {"micro_batch": 4, "duration_s": 60},
            "serve": {"rate_rps": 20, "max_delay_ms": 2, "endpoint": True},
        }
    )
    job_id = orch.store.submit(spec).id
    with _client(api, member) as c:
        info = _ready(c, job_id)
        sample = [0.25] * info["input"]["shape"][0]
        with concurrent.futures.ThreadPoolExecutor(4) as pool:
            answers = list(
                pool.map(
                    lambda _: c.post(f"/v1/services/{job_id}/infer", json={"input": sample}),
                    range(12),
                )
            )
        assert [r.status_code for r in answers] == [200] * 12, answers[0].text
        assert all(r.json()["timing"]["model_ms"] >= 1.0 for r in answers)  # its own forward


def test_a_service_serves_what_a_finished_job_trained(orch: Orch, api: ApiServer) -> None:
    from orchestrator.errors import SpecError
    from orchestrator.weights import trained_weights
    from workers.serve_run import load_weights
    from workers.workloads.registry import build_workload

    args = {"hidden": 16, "n_layer": 1}
    bulk = parse_spec(
        {
            "name": "trainer",
            "team": "e2e",
            "class": "bulk",
            "workload": {"name": "mlp", "args": args},
            "sla": {"throughput": {"min_samples_per_s": 1}},
            "run": {"micro_batch": 8, "steps": 30, "warmup_steps": 2},
        }
    )

    def service(name: str, **serve: Any) -> Any:
        return parse_spec(
            {
                "name": name,
                "team": "e2e",
                "class": "interactive",
                "workload": {"name": "infer", "args": {"model": "mlp", **args}},
                "sla": {"latency": {"percentile": 99, "max_ms": 2000}},
                "run": {"micro_batch": 4, "duration_s": 60},
                "serve": {"rate_rps": 10, "endpoint": True, **serve},
            }
        )

    trainer = orch.store.submit(bulk).id
    # refused while it has not finished: nothing to serve yet
    with pytest.raises(SpecError, match=r"serve\.from_job"):
        trained_weights(orch.store, service("early", from_job=trainer))
    assert orch.wait(trainer, DONE).state is JobState.FINISHED
    member = _token(orch, "alice", Role.MEMBER, "e2e")
    served = orch.store.submit(service("served", from_job="trainer")).id
    fresh = orch.store.submit(service("fresh")).id
    with _client(api, member) as c:
        shape = _ready(c, served)["input"]["shape"]
        _ready(c, fresh)
        x = [0.1 * (i % 7) for i in range(shape[0])]
        got = c.post(f"/v1/services/{served}/infer", json={"input": x}).json()["output"]
        untrained = c.post(f"/v1/services/{fresh}/infer", json={"input": x}).json()["output"]
        # a mismatched model, another team's job: refused at submission, naming the field
        wrong = c.post(
            "/v1/jobs",
            json={
                **service("wrong", from_job="trainer").model_dump(
                    mode="json", by_alias=True, exclude_unset=True
                ),
                "workload": {"name": "infer", "args": {"model": "mlp", "hidden": 8}},
            },
        )
        assert wrong.status_code == 422 and "trained mlp" in wrong.text, wrong.text
    # the answer is the trained model's: its checkpoint loaded here gives the same output
    import torch

    w = build_workload("infer", {"model": "mlp", **args}, seed=0)
    weights = trained_weights(
        orch.store, service("x", from_job=trainer), orch.settings.checkpoint_dir
    )
    assert weights is not None
    load_weights(w.model, weights)
    with torch.inference_mode():
        want = w.model.eval()(torch.tensor([x])).tolist()[0]
    assert got == pytest.approx(want, rel=1e-4, abs=1e-5)
    assert untrained != pytest.approx(want, rel=1e-4, abs=1e-5)
