"""A service on the pool: an interactive job answering an open-loop stream with a dynamic
batcher, judged on request latency (arrival to answer)."""

from __future__ import annotations

from orchestrator.spec import parse_spec
from orchestrator.store.states import JobState
from tests.e2e.conftest import Orch

DONE = {JobState.FINISHED, JobState.FAILED, JobState.CANCELLED}


def test_a_service_answers_its_offered_load_and_is_judged_on_request_latency(orch: Orch) -> None:
    spec = parse_spec(
        {
            "name": "svc",
            "team": "e2e",
            "class": "interactive",
            "workload": {"name": "infer", "args": {"model": "mlp"}},
            "sla": {"latency": {"percentile": 99, "max_ms": 500}},
            "run": {"micro_batch": 8, "duration_s": 3},
            "serve": {"rate_rps": 100, "max_delay_ms": 5, "endpoint": False},
        }
    )
    job_id = orch.store.submit(spec).id
    rec = orch.wait(job_id, DONE, timeout_s=180)
    assert rec.state is JobState.FINISHED, rec.message
    metrics = orch.store.metrics(job_id)
    # every request of the stream answered (about 300 in 3 s), none dropped, batched
    assert 200 <= int(metrics["measured_steps"]) <= 400
    assert int(metrics["dropped"]) == 0
    assert float(metrics["offered_rps"]) == float(metrics["measured_steps"]) / 3.0
    assert 1.0 <= float(metrics["mean_batch"]) <= 8.0
    # the run's percentiles are request latencies, and the SLA is judged on them
    assert float(metrics["p99_ms"]) >= float(metrics["p50_ms"]) > 0
    assert "SLA met" in rec.message or "SLA missed" in rec.message, rec.message
